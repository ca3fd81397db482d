package snapshot

import (
	"fmt"
	"io"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestSegmentCommandsPrepared: the entries a cold start decodes from
// segments come with what the Preparers returned for their commands, and
// nothing for registrations or other machines' commands.
func TestSegmentCommandsPrepared(t *testing.T) {
	p := &preparer{}
	gs := newTestStore(store.New(readsInto{memstore.New()}), Options{Par: 4,
		Borrow: true, Prep: map[string]Preparer{"a": p}, PrepareFrom: DefaultPrepareFrom})
	m := &Manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: BaseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := Writer{ID: "a", Term: 2, Nonce: "cd"}
	for first := uint64(11); first <= 60; first += 5 {
		var entries []*rsmpb.Entry
		for i := first; i < first+5; i++ {
			entries = append(entries, mkEntry(i, 2, regCmd(fmt.Sprint(i)), sCmd(1, i, "a", fmt.Sprint("a", i)), sCmd(1, i, "b", "b")))
		}
		var err error
		if m, err = gs.writeSegments(t.Context(), m, entries, w); err != nil {
			t.Fatal(err)
		}
	}
	large := *m
	large.SegBytes = DefaultPrepareFrom // as if the segments were that many bytes
	snap := &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, Man: &large}
	feed := gs.startSegments(t.Context(), snap, m.segments(), 0)
	defer feed.close()
	n := 0
	for {
		entries, prepared, err := feed.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(prepared) != len(entries) {
			t.Fatalf("%d entries, %d prepared", len(entries), len(prepared))
		}
		for k, e := range entries {
			want := []any{nil, fmt.Sprint("prepared:a", e.Index), nil}
			if fmt.Sprint(prepared[k]) != fmt.Sprint(want) {
				t.Fatalf("entry %d prepared %v, want %v", e.Index, prepared[k], want)
			}
			n++
		}
	}
	if n != 50 || p.prepares.Load() != 50 {
		t.Fatalf("%d entries, %d prepared; want 50 of each", n, p.prepares.Load())
	}
	// A smaller load prepares nothing.
	feed = gs.startSegments(t.Context(), &Stored{Snapshot: snap.Snapshot, Man: m}, m.segments(), 0)
	defer feed.close()
	for {
		entries, prepared, err := feed.next()
		if err == io.EOF {
			break
		}
		if err != nil || prepared != nil || len(entries) == 0 {
			t.Fatalf("a load of %d bytes of segments: %d entries, prepared %v, %v; want none prepared", m.SegBytes, len(entries), prepared, err)
		}
	}
	if p.prepares.Load() != 50 {
		t.Fatalf("%d prepared after a small load, want the 50 before", p.prepares.Load())
	}
	// The same segments after a large base: the load is large.
	feed = gs.startSegments(t.Context(), &Stored{Snapshot: snap.Snapshot, Man: m}, m.segments(), DefaultPrepareFrom)
	defer feed.close()
	for {
		entries, prepared, err := feed.next()
		if err == io.EOF {
			break
		}
		if err != nil || len(prepared) != len(entries) {
			t.Fatalf("segments after a base of %d bytes: %d entries, %d prepared, %v; want all prepared", DefaultPrepareFrom, len(entries), len(prepared), err)
		}
	}
	if p.prepares.Load() != 100 {
		t.Fatalf("%d prepared after a large base, want 100", p.prepares.Load())
	}
}
