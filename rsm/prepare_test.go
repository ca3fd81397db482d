package rsm

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// preparer is a tape that prepares its commands: Prepare returns a copy
// of the command, which ApplyPrepared checks it is given back with.
type preparer struct {
	tape
	prepares, applied atomic.Int64
	mismatch          atomic.Value // a string: what ApplyPrepared was given against its command
}

func (*preparer) BorrowsCommands() {}

func (p *preparer) Prepare(cmd []byte) any {
	p.prepares.Add(1)
	return "prepared:" + string(cmd)
}

func (p *preparer) ApplyPrepared(cmd []byte, prepared any) []byte {
	p.applied.Add(1)
	if want := "prepared:" + string(cmd); prepared != want {
		p.mismatch.Store(fmt.Sprintf("%q given %v", cmd, prepared))
	}
	return p.Apply(cmd)
}

// TestPreparers: a cold start prepares commands only for the Preparers of
// a group whose machines all borrow their commands.
func TestPreparers(t *testing.T) {
	p := &preparer{}
	for _, c := range []struct {
		machines map[string]StateMachine
		want     []string
	}{
		{map[string]StateMachine{"a": p}, []string{"a"}},
		{map[string]StateMachine{"a": p, "b": &lender{}}, []string{"a"}},
		{map[string]StateMachine{"a": p, "b": &tape{}}, nil},
		{map[string]StateMachine{"b": &lender{}}, nil},
	} {
		got := preparers(c.machines)
		var names []string
		for name := range got {
			names = append(names, name)
		}
		if fmt.Sprint(names) != fmt.Sprint(c.want) {
			t.Errorf("preparers(%d machines) = %v, want %v", len(c.machines), names, c.want)
		}
	}
}

// TestSegmentCommandsPrepared: the entries a cold start decodes from
// segments come with what the Preparers returned for their commands, and
// nothing for registrations or other machines' commands.
func TestSegmentCommandsPrepared(t *testing.T) {
	p := &preparer{}
	gs := &groupStore{st: store.New(readsInto{memstore.New()}), group: "g", retry: RetryOptions{MaxAttempts: 1}, par: 4,
		borrow: true, prep: map[string]Preparer{"a": p}}
	m := &manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: baseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := snapWriter{id: "a", term: 2, nonce: "cd"}
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
	large.SegBytes = prepareFrom // as if the segments were that many bytes
	snap := &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, man: &large}
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
	feed = gs.startSegments(t.Context(), &storedSnapshot{Snapshot: snap.Snapshot, man: m}, m.segments(), 0)
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
	feed = gs.startSegments(t.Context(), &storedSnapshot{Snapshot: snap.Snapshot, man: m}, m.segments(), prepareFrom)
	defer feed.close()
	for {
		entries, prepared, err := feed.next()
		if err == io.EOF {
			break
		}
		if err != nil || len(prepared) != len(entries) {
			t.Fatalf("segments after a base of %d bytes: %d entries, %d prepared, %v; want all prepared", prepareFrom, len(entries), len(prepared), err)
		}
	}
	if p.prepares.Load() != 100 {
		t.Fatalf("%d prepared after a large base, want 100", p.prepares.Load())
	}
}

// TestReplicaAppliesPrepared: a prepared command goes to ApplyPrepared
// with what was prepared for it; one the session table finds applied
// already is not applied again, prepared or not.
func TestReplicaAppliesPrepared(t *testing.T) {
	p := &preparer{}
	r, err := newReplica(map[string]StateMachine{"tape": p}, 8)
	if err != nil {
		t.Fatal(err)
	}
	r.apply(settingsSeal(1, 1, 8, "tape"))
	r.apply(mkEntry(2, 1, regCmd("node-0")))
	_, res := r.applyPrepared(mkEntry(3, 1, sCmd(1, 1, "tape", "x"), sCmd(1, 2, "tape", "y")), []any{"prepared:x", nil})
	if !equalResults(res, []result{okResult("1:x"), okResult("2:y")}) {
		t.Fatalf("results %+v", res)
	}
	if p.applied.Load() != 1 {
		t.Fatalf("ApplyPrepared called %d times; want once, for the prepared command", p.applied.Load())
	}
	_, res = r.applyPrepared(mkEntry(4, 1, sCmd(1, 2, "tape", "y")), []any{"prepared:y"}) // a retry
	if !equalResults(res, []result{okResult("2:y")}) || p.applied.Load() != 1 || len(p.cmds) != 2 {
		t.Fatalf("a retry: results %+v, ApplyPrepared %d times, %d applied", res, p.applied.Load(), len(p.cmds))
	}
	if v := p.mismatch.Load(); v != nil {
		t.Fatal(v)
	}
}
