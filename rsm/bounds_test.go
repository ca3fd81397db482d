package rsm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// boundRecorder is a driver that records, for every read, the limit it
// was made with (math.MaxInt64 for an unbounded Get) and the bytes it
// handed back; and that holds objects of any size without their bytes
// (huge), as a store that reports a size before sending the value does.
type boundRecorder struct {
	driver.Store
	mu    sync.Mutex
	reads map[string][]readRec
	huge  map[string]hugeObject
}

type readRec struct {
	max, got int64
}

// hugeObject is an object of size bytes: prefix, then zeros.
type hugeObject struct {
	prefix []byte
	size   int64
}

var _ driver.Reader = (*boundRecorder)(nil)

func newBoundRecorder(inner driver.Store) *boundRecorder {
	return &boundRecorder{Store: inner, reads: map[string][]readRec{}, huge: map[string]hugeObject{}}
}

func (d *boundRecorder) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	d.mu.Lock()
	h, ok := d.huge[key]
	d.mu.Unlock()
	var data []byte
	var v string
	var err error
	switch {
	case !ok:
		data, v, err = d.Store.GetLimited(ctx, key, max)
	case h.size > max:
		err = driver.TooLargeError(h.size, max)
	default:
		data, v = make([]byte, h.size), "huge"
		copy(data, h.prefix)
	}
	d.mu.Lock()
	d.reads[key] = append(d.reads[key], readRec{max: max, got: int64(len(data))})
	d.mu.Unlock()
	return data, v, err
}

func (d *boundRecorder) Get(ctx context.Context, key string) ([]byte, string, error) {
	return d.GetLimited(ctx, key, math.MaxInt64)
}

func (d *boundRecorder) ReadInto(ctx context.Context, key string, _ []byte, max int64) ([]byte, error) {
	data, _, err := d.GetLimited(ctx, key, max)
	return data, err
}

func (d *boundRecorder) of(key string) []readRec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]readRec(nil), d.reads[key]...)
}

// putHuge makes key hold an object of size bytes starting with prefix.
func (d *boundRecorder) putHuge(key string, prefix []byte, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.huge[key] = hugeObject{prefix: prefix, size: size}
}

// assertBounded fails unless key was read, every read with a limit of at
// most bound, and no read handed back more than its limit.
func (d *boundRecorder) assertBounded(t *testing.T, key string, bound int64) {
	t.Helper()
	recs := d.of(key)
	if len(recs) == 0 {
		t.Fatalf("%s was never read", key)
	}
	for i, r := range recs {
		if r.max > bound || r.got > r.max {
			t.Fatalf("read %d of %s: limit %d, %d bytes; want a limit of at most %d", i, key, r.max, r.got, bound)
		}
	}
}

// assertTooLarge fails unless err is a *CorruptError naming key as larger
// than tenure writes there, with the bound.
func assertTooLarge(t *testing.T, err error, key string, bound int64) {
	t.Helper()
	var c *CorruptError
	if !errors.As(err, &c) || c.Key != key || !errors.Is(err, ErrCorrupt) || !errors.Is(err, errTooLarge) {
		t.Fatalf("read of an oversized %s: %v; want a *CorruptError naming it as too large", key, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(bound)) || !strings.Contains(err.Error(), key) {
		t.Fatalf("refusal %q does not name the object and its bound %d", err, bound)
	}
}

func boundedGroupStore(t *testing.T) (*groupStore, *boundRecorder, *store.Store) {
	mem := memstore.New()
	d := newBoundRecorder(mem)
	gs := &groupStore{st: store.New(d), group: "g", retry: RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, now: time.Now}
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
		d.putHuge(key, []byte(`{"term":1,"leaderID":"a","followers":[`), int64(leaderStateMax)+1)
		_, _, err := gs.readLeaderState(t.Context())
		assertTooLarge(t, err, key, leaderStateMax)
		d.assertBounded(t, key, leaderStateMax)
		if n := len(d.of(key)); n != 1 {
			t.Fatalf("%d reads of %s; want 1: an oversized object is not retried", n, key)
		}
	})
	t.Run("log entry", func(t *testing.T) {
		gs, d, _ := boundedGroupStore(t)
		key := logKey(gs.group, 7)
		d.putHuge(key, []byte(frameMagic+"E"), int64(entryMax)+1)
		_, err := gs.readEntry(t.Context(), 7)
		assertTooLarge(t, err, key, int64(entryMax))
		d.assertBounded(t, key, int64(entryMax))
		// The same through the log reader that catch-up and takeover use.
		_, err = gs.readLog(t.Context(), 7, 0, 10)
		assertTooLarge(t, err, key, int64(entryMax))
	})
	t.Run("manifest", func(t *testing.T) {
		gs, d, _ := boundedGroupStore(t)
		key := gs.key(snapshotKey)
		d.putHuge(key, []byte(frameMagic+"M"), int64(manifestMax)+1)
		_, _, err := gs.readSnapshot(t.Context())
		var c *CorruptError
		if !errors.As(err, &c) || c.Key != key || !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(manifestMax)) {
			t.Fatalf("read of an oversized manifest: %v; want a *CorruptError naming it and the bound %d", err, manifestMax)
		}
		// Read as a manifest first, then as a snapshot of the earlier
		// formats: never without a bound.
		d.assertBounded(t, key, earlierSnapshotMax)
		if recs := d.of(key); recs[0].max != manifestMax {
			t.Fatalf("first read of the snapshot with limit %d; want the manifest's %d", recs[0].max, manifestMax)
		}
	})
	t.Run("snapshot of the earlier formats", func(t *testing.T) {
		gs, d, _ := boundedGroupStore(t)
		key := gs.key(snapshotKey)
		d.putHuge(key, []byte(frameMagic+"C"), int64(earlierSnapshotMax)+1)
		_, _, err := gs.readSnapshot(t.Context())
		assertTooLarge(t, err, key, earlierSnapshotMax)
		d.assertBounded(t, key, earlierSnapshotMax)
		if n := len(d.of(key)); n != 2 {
			t.Fatalf("%d reads of the snapshot; want 2 (as a manifest, then as an earlier format)", n)
		}
	})

	// A manifest of a base at 10 in one part and a segment from 11 to 20.
	man := func(baseBytes, segBytes uint64) *storedSnapshot {
		m := &manifest{Group: "g", Nonce: []byte{1}, Writer: "a", WriterTerm: 1, End: 20,
			Base:     baseRef{Index: 10, Term: 1, Nonce: "0a", Parts: 1, Bytes: baseBytes},
			SegBytes: segBytes, Runs: []segRun{{Term: 1, Nonce: "0b", Lasts: []uint64{20}}}}
		return &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: 20, Group: "g"}, man: m}
	}
	restore := func(cs *chunkedStream) error { return cs.finish() }
	apply := func(*rsmpb.Entry, []any) error { return nil }
	for _, tc := range []struct {
		name  string
		bytes uint64 // the base's bytes in the manifest
		bound int64
	}{
		{"base part beyond the base's bytes", 1000, 1000},
		{"base part beyond a part's size", 1 << 40, basePartObjectMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, d, _ := boundedGroupStore(t)
			snap := man(tc.bytes, 100)
			key := snap.man.baseKeys()[0]
			d.putHuge(key, []byte(frameMagic+"C"), int64(tc.bound)+1)
			err := gs.loadManifest(t.Context(), snap, 0, restore, apply)
			assertTooLarge(t, err, key, tc.bound)
			d.assertBounded(t, key, tc.bound)
		})
	}
	for _, tc := range []struct {
		name  string
		bytes uint64 // the segments' bytes in the manifest
		bound int64
	}{
		{"segment beyond the segments' bytes", 1000, 1000},
		{"segment beyond what a writer puts in one", 1 << 40, int64(segmentObjectMax)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, d, _ := boundedGroupStore(t)
			snap := man(100, tc.bytes)
			key := snap.man.segments()[0].key
			d.putHuge(key, []byte(frameMagic+"G"), int64(tc.bound)+1)
			// The replica has the base: only the segment is read.
			err := gs.loadManifest(t.Context(), snap, 10, restore, apply)
			assertTooLarge(t, err, key, tc.bound)
			d.assertBounded(t, key, tc.bound)
		})
	}
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
		data, err := encodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > frameHeader+maxMessage {
			t.Fatalf("MaxMessageSize %d: the largest entry takes %d bytes, above %d", maxMessage, len(data), frameHeader+maxMessage)
		}
	}
	if entryMax != frameHeader+MaxMessageSizeLimit {
		t.Fatalf("entryMax %d is not the largest MaxMessageSize, framed", entryMax)
	}
	// A segment holds entries up to segmentMax bytes together, or one
	// larger entry alone, behind its length.
	if segmentObjectMax < len(frameMagic)+1+segmentMax || segmentObjectMax < len(frameMagic)+1+4+entryMax {
		t.Fatalf("segmentObjectMax %d is below a segment's largest size", segmentObjectMax)
	}

	hex := strings.Repeat("f", 64)
	m := &manifest{Group: strings.Repeat("g", 200), Nonce: make([]byte, 64), Writer: id, WriterTerm: math.MaxUint64,
		Base:     baseRef{Index: 1, Term: math.MaxUint64, Nonce: hex, Parts: 1 << 20, Bytes: math.MaxUint64},
		SegBytes: math.MaxUint64}
	// The fixed fields at their largest, then segments each in a run of
	// its own with the largest numbers: what maxSegments of them take.
	fixed := len(encodeManifest(m))
	const k = 1000
	last := uint64(1)
	for i := range k {
		last += uint64(1) << 62
		m.Runs = append(m.Runs, segRun{Term: math.MaxUint64 - uint64(i), Nonce: hex, Lasts: []uint64{last}})
	}
	m.End = last
	perSegment := (len(encodeManifest(m)) - fixed + k - 1) / k
	if fixed > 1<<10 || perSegment > 105 || fixed+maxSegments*perSegment > manifestMax {
		t.Fatalf("a manifest takes %d bytes and %d per segment: %d segments take %d, above manifestMax %d",
			fixed, perSegment, maxSegments, fixed+maxSegments*perSegment, manifestMax)
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
	m.Writer = strings.Repeat("w", manifestMax) // no writer has such an ID: only the size matters here
	if _, err := gs.writeManifest(t.Context(), m, ""); err == nil || !strings.Contains(err.Error(), fmt.Sprint(manifestMax)) {
		t.Fatalf("writing a manifest of %d bytes: %v; want a refusal naming the bound", len(encodeManifest(m)), err)
	}
	items, err := raw.ListAll(t.Context(), "", 100)
	if err != nil || len(items) != 0 {
		t.Fatalf("objects written: %v, %v", items, err)
	}
}

// TestRefusedObjectNotReadAgain: a base part or segment refused as
// corrupt is not read again by the next load of the same manifest (a
// node's next join attempt): the load lists the object, finds the
// version it refused, and refuses it unread. One an operator replaced is
// read again.
func TestRefusedObjectNotReadAgain(t *testing.T) {
	gs, d, raw := boundedGroupStore(t)
	m := &manifest{Group: "g", Nonce: []byte{1}, Writer: "a", WriterTerm: 1, End: 10,
		Base: baseRef{Index: 10, Term: 1, Nonce: "0a", Parts: 2, Bytes: 200}}
	snap := &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: 10, Group: "g"}, man: m, version: "v1"}
	keys := m.baseKeys()
	// The first part is damaged: the base does not decode.
	for i, k := range keys {
		if _, err := raw.Put(t.Context(), k, []byte(fmt.Sprintf("damaged part %d", i)), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	restore := func(cs *chunkedStream) error { return cs.finish() }
	apply := func(*rsmpb.Entry, []any) error { return nil }
	for attempt := range 3 {
		err := gs.loadManifest(t.Context(), snap, 0, restore, apply)
		var c *CorruptError
		if !errors.As(err, &c) || c.Key != keys[0] {
			t.Fatalf("load %d: %v; want a *CorruptError naming %s", attempt, err, keys[0])
		}
	}
	if n := len(d.of(keys[0])); n != 1 {
		t.Fatalf("the refused part was read %d times in 3 loads; want once", n)
	}
	// The operator puts other bytes there: the next load reads them.
	v, err := raw.Put(t.Context(), keys[0], []byte("another damaged part"), store.IfMatch(listedVersion(t, raw, keys[0])))
	if err != nil || v == "" {
		t.Fatal(err)
	}
	if err := gs.loadManifest(t.Context(), snap, 0, restore, apply); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("load after the repair: %v; want the new bytes read and refused", err)
	}
	if n := len(d.of(keys[0])); n != 2 {
		t.Fatalf("the replaced part was read %d times in all; want 2", n)
	}
	// Another manifest (a newer snapshot) reads its objects afresh.
	other := *snap
	other.version = "v2"
	if err := gs.loadManifest(t.Context(), &other, 0, restore, apply); !errors.Is(err, ErrCorrupt) {
		t.Fatal(err)
	}
	if n := len(d.of(keys[0])); n != 3 {
		t.Fatalf("a newer manifest's load did not read the part: %d reads", n)
	}
}

func listedVersion(t *testing.T, st *store.Store, key string) string {
	t.Helper()
	items, err := st.List(t.Context(), key, "", 1)
	if err != nil || len(items) == 0 {
		t.Fatalf("list %s: %v, %v", key, items, err)
	}
	return items[0].Version
}
