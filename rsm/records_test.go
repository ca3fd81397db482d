package rsm

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// A confirmation read decodes leader_state.json only when its bytes
// changed; whatever it returns is what a fresh decode of the bytes read
// returns: corruption and another group's record are still refused after
// a good record was read, and a caller's changes to what it got do not
// reach the next read.
func TestLeaderStateReadDecodesOnlyChangedBytes(t *testing.T) {
	ctx := t.Context()
	mem := memstore.New()
	gs := newGroupStore(store.New(mem), testGroup, testOptions().withDefaults().Retry, 0, snapshot.Options{})
	want := leaderState{Term: 3, LeaderID: "a", LeaderAddr: "a:1", Followers: []followerInfo{{ID: "b", Addr: "b:1", ApplyIndex: 5}}}
	v, err := gs.writeLeaderState(ctx, want, "")
	if err != nil {
		t.Fatal(err)
	}
	key := testGroup + "/" + leaderStateKey

	first, _, err := gs.readLeaderState(ctx)
	if err != nil || first.Term != 3 || len(first.Followers) != 1 {
		t.Fatalf("first read: %+v, %v", first, err)
	}
	cached := gs.lastLeaderState.Load()
	first.Followers[0].ApplyIndex = 99 // the caller's copy
	second, _, err := gs.readLeaderState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gs.lastLeaderState.Load() != cached {
		t.Fatal("the same bytes were decoded again")
	}
	if second.Followers[0].ApplyIndex != 5 || second.Checksum == "" || second.Group != testGroup {
		t.Fatalf("second read: %+v, want the stored record", second)
	}

	second.Followers[0].ApplyIndex = 99
	if third, _, err := gs.readLeaderState(ctx); err != nil || third.Followers[0].ApplyIndex != 5 {
		t.Fatalf("third read: %+v, %v; want the stored record", third, err)
	}

	// Bytes that differ are decoded: a bad checksum is refused.
	good, _, err := mem.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte(string(good))
	bad[len(bad)-3] ^= 1 // inside the checksum's digits
	v2, err := mem.Put(ctx, key, bad, driver.Cond{Kind: driver.IfMatch, Version: v})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gs.readLeaderState(ctx); !errors.As(err, new(*CorruptError)) {
		t.Fatalf("a corrupt record after a good one: %v, want a *CorruptError", err)
	}

	// Another group's record, copied here, is refused too.
	other := newGroupStore(store.New(mem), "other", gs.retry, 0, snapshot.Options{})
	if _, err := other.writeLeaderState(ctx, want, ""); err != nil {
		t.Fatal(err)
	}
	foreign, _, err := mem.Get(ctx, "other/"+leaderStateKey)
	if err != nil {
		t.Fatal(err)
	}
	v3, err := mem.Put(ctx, key, foreign, driver.Cond{Kind: driver.IfMatch, Version: v2})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gs.readLeaderState(ctx); !errors.As(err, new(*CorruptError)) {
		t.Fatalf("another group's record: %v, want a *CorruptError", err)
	}

	if _, err := mem.Put(ctx, key, good, driver.Cond{Kind: driver.IfMatch, Version: v3}); err != nil {
		t.Fatal(err)
	}
	ls, _, err := gs.readLeaderState(ctx)
	if err != nil || ls.Term != 3 || ls.Followers[0].ApplyIndex != 5 {
		t.Fatalf("the good record again: %+v, %v", ls, err)
	}
}

// encodeEntry writes the format frame does (readers of either agree): the
// header, then the entry's protobuf encoding, for a batch, a seal and an
// entry with nothing set but its index.
func TestEncodeEntryIsTheFramedEncoding(t *testing.T) {
	seal := &rsmpb.Entry{Index: 9, Term: 4, Writer: "node-b", Nonce: []byte("nonce"), Noop: true}
	for _, e := range []*rsmpb.Entry{sampleEntry(), seal, {Index: 1}} {
		p, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := record.EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if want := record.Frame(record.KindEntry, p); !bytes.Equal(got, want) {
			t.Fatalf("entry %d: encodeEntry gave\n%x\nwant\n%x", e.Index, got, want)
		}
		if e.Term == 0 {
			continue // not a valid entry, only an encoding
		}
		back, err := record.DecodeEntry(got, e.Index)
		if err != nil || !proto.Equal(back, e) {
			t.Fatalf("entry %d decodes to %v, %v", e.Index, back, err)
		}
	}
}
