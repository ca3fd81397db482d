package rsm

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/objtest"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func boundedGroupStore(t *testing.T) (*groupStore, *objtest.Recorder, *store.Store) {
	mem := memstore.New()
	d := objtest.NewRecorder(mem)
	gs := newGroupStore(store.New(d), "g", RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, 0, snapshot.Options{})
	return gs, d, store.New(mem)
}

// TestOversizedObjectsRefused: every object the RSM reads is read within
// the bound of what tenure writes at its key, and one larger than that is
// refused as corrupt, naming it, without reading more of it than the
// bound: leader_state.json, a log entry, the snapshot (a manifest, or an
// object of the earlier formats), a base part and a segment.
func TestOversizedObjectsRefused(t *testing.T) {
	t.Run("leader_state.json", func(t *testing.T) {
		gs, d, _ := boundedGroupStore(t)
		key := gs.key(leaderStateKey)
		d.PutHuge(key, []byte(`{"term":1,"leaderID":"a","followers":[`), int64(leaderStateMax)+1)
		_, _, err := gs.readLeaderState(t.Context())
		objtest.AssertTooLarge(t, err, key, leaderStateMax)
		d.AssertBounded(t, key, leaderStateMax)
		if n := len(d.Of(key)); n != 1 {
			t.Fatalf("%d reads of %s; want 1: an oversized object is not retried", n, key)
		}
	})
	t.Run("log entry", func(t *testing.T) {
		gs, d, _ := boundedGroupStore(t)
		key := logKey(gs.group, 7)
		d.PutHuge(key, []byte(record.Magic+"E"), int64(entryMax)+1)
		_, err := gs.readEntry(t.Context(), 7)
		objtest.AssertTooLarge(t, err, key, int64(entryMax))
		d.AssertBounded(t, key, int64(entryMax))
		// The same through the log reader that catch-up and takeover use.
		_, err = gs.readLog(t.Context(), 7, 0, 10)
		objtest.AssertTooLarge(t, err, key, int64(entryMax))
	})
}

// TestBoundsHoldWhatTenureWrites: the bounds hold the largest objects a
// writer makes, so nothing tenure wrote is refused: a log entry of the
// largest batch, a segment of one such entry and one of entries up to
// segmentMax, a manifest of maxSegments segments each of a run of its own
// with the longest names; and the writers refuse what would exceed them.
func TestBoundsHoldWhatTenureWrites(t *testing.T) {
	id := strings.Repeat("n", 200)
	// The largest batch a leader cuts fills entryRoom: its entry takes at
	// most MaxMessageSize, framed, whatever MaxMessageSize is (checked at
	// small ones; entryMax takes the largest, MaxMessageSizeLimit).
	for _, maxMessage := range []int{8 << 10, DefaultMaxMessageSize} {
		room := entryRoom(maxMessage, id, strings.Repeat("g", 200))
		cmd := &rsmpb.Command{Machine: "m", Session: math.MaxUint64, Seq: math.MaxUint64}
		cmd.Data = make([]byte, room-proto.Size(cmd)-16)
		e := &rsmpb.Entry{Index: math.MaxUint64, Term: math.MaxUint64, Commit: math.MaxUint64 - 1, Writer: id,
			Nonce: make([]byte, 12), Group: strings.Repeat("g", 200), Commands: []*rsmpb.Command{cmd}}
		data, err := record.EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > record.Header+maxMessage {
			t.Fatalf("MaxMessageSize %d: the largest entry takes %d bytes, above %d", maxMessage, len(data), record.Header+maxMessage)
		}
	}
	if entryMax != record.Header+MaxMessageSizeLimit {
		t.Fatalf("entryMax %d is not the largest MaxMessageSize, framed", entryMax)
	}
	// Writers refuse what their readers would: nothing is written.
	gs, _, raw := boundedGroupStore(t)
	ls := leaderState{Term: 1, LeaderID: "a", LeaderAddr: "a:1"}
	for i := range 5000 {
		ls.Followers = append(ls.Followers, followerInfo{ID: fmt.Sprintf("%s-%d", id, i), Addr: "host:1", ApplyIndex: 1})
	}
	if _, err := gs.writeLeaderState(t.Context(), ls, ""); err == nil || !strings.Contains(err.Error(), fmt.Sprint(leaderStateMax)) {
		t.Fatalf("writing leader_state.json of 5000 followers: %v; want a refusal naming the bound", err)
	}
	items, err := raw.ListAll(t.Context(), "", 100)
	if err != nil || len(items) != 0 {
		t.Fatalf("objects written: %v, %v", items, err)
	}
}
