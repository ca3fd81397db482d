package rsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// stopNode ends n's goroutines (its leadership).
func stopNode(n *testNode) {
	n.Node.cancel()
	n.wg.Wait()
}

// readManifestT reads the group's snapshot, which must be a manifest.
func readManifestT(t *testing.T, gs *groupStore) (*snapshot.Stored, *snapshot.Manifest) {
	t.Helper()
	s, _, err := gs.snap.Read(t.Context())
	if err != nil || s == nil || s.Man == nil {
		t.Fatalf("snapshot %+v: %v", s, err)
	}
	return s, s.Man
}

// groupWithSegment leaves in mem a group whose snapshot is a manifest of a
// base and at least one segment, with entries after it. It returns the
// manifest and the writer's term and count of commands applied.
func groupWithSegment(t *testing.T, mem driver.Store) (*snapshot.Manifest, uint64, uint64) {
	t.Helper()
	opts := testOptions()
	opts.SnapshotThreshold = 4
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	for i := uint64(1); i <= 9; i++ {
		mustCommand(t, a, i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Status().SnapshotIndex == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot")
		}
		time.Sleep(time.Millisecond)
	}
	term := a.Status().Term
	stopNode(a)
	// Entries after the snapshot, written as leader a would, then a
	// segment of them, as its next snapshot would be.
	_, m := readManifestT(t, a.gs)
	idx, err := a.gs.listLog(t.Context(), m.End, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := m.End + 1
	if len(idx) > 0 {
		next = idx[len(idx)-1] + 1
	}
	for i := next; i < next+3; i++ {
		e := &rsmpb.Entry{Index: i, Term: term, Writer: "a", Nonce: record.NewNonce(), Noop: true, Commit: i - 1, Group: testGroup}
		if found, err := a.gs.createEntry(t.Context(), e); err != nil || found != nil {
			t.Fatalf("entry %d: %v %v", i, found, err)
		}
	}
	v, _, _ := a.gs.snap.Held()
	j := &snapshot.Job{From: m.End + 1, End: next + 2, PrevEnd: m.End, PrevVersion: v}
	out, err := a.gs.snap.Write(t.Context(), j, snapshot.Writer{ID: "a", Term: term, Nonce: "5e9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Man.SegmentKeys()) == 0 || out.Man.End != next+2 {
		t.Fatalf("manifest %+v", out.Man)
	}
	// A segment adds to the manifest: its collection deletes nothing.
	dropped, _, err := a.gs.snap.Collect(t.Context(), out.Prev, out.Man, term, false)
	if err != nil || dropped != 0 {
		t.Fatalf("collection after a segment deleted %d: %v", dropped, err)
	}
	for k := range out.Man.Objects() {
		if absent(t, mem, k) {
			t.Fatalf("%s, referenced by the manifest, is gone", k)
		}
	}
	return out.Man, term, 9
}

// TestDeletedSnapshotObjectIsRefused: a base part or a segment that the
// stored manifest references, deleted while the manifest is unchanged, is
// refused under rule 12: the object is named, nothing is served, and it
// is never taken as an empty state or a shorter log.
func TestDeletedSnapshotObjectIsRefused(t *testing.T) {
	for _, which := range []string{"base part", "segment"} {
		t.Run(which, func(t *testing.T) {
			mem := memstore.New()
			m, _, _ := groupWithSegment(t, mem)
			key := m.BaseKeys()[0]
			if which == "segment" {
				segs := m.SegmentKeys()
				key = segs[len(segs)-1]
			}
			deleteT(t, mem, key)
			b := newTestNode(t, mem, "b", testOptions())
			b.attempt(t)
			assertRefused(t, b, key, "snapshot")
		})
	}
}

// TestLoadFromBaseAndSegments: a fresh node reaches the state the writer
// had from the base and the segments (the segments' entries applied under
// rule 1 like the log's), reading each object once; one already past the
// base reads only the segments.
func TestLoadFromBaseAndSegments(t *testing.T) {
	mem := memstore.New()
	m, _, want := groupWithSegment(t, mem)
	count, applied := fresh(t, mem)
	if count != want || applied != m.End {
		t.Fatalf("fresh node: count %d at %d, want %d at %d", count, applied, want, m.End)
	}
	// A replica at the base's index reads no part of the base.
	r := newTestNode(t, mem, "r", testOptions())
	snap, _ := readManifestT(t, r.gs)
	var mu sync.Mutex // the loader reads several objects at once
	var gets []string
	r.hooks.set(nil, func(key string) { mu.Lock(); gets = append(gets, key); mu.Unlock() })
	r.onReplica(func(rep *replica) { rep.applied = m.Base.Index }) // the state at the base: the counter's is m.Base.Index's
	var applies []uint64
	err := r.gs.snap.Load(t.Context(), snap, m.Base.Index, func(*snapshot.Stream) error {
		t.Fatal("the base was read by a replica already at it")
		return nil
	}, func(e *rsmpb.Entry, _ []any) error { applies = append(applies, e.Index); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(applies) == 0 || applies[0] != m.Base.Index+1 || applies[len(applies)-1] != m.End {
		t.Fatalf("applied %v, want %d..%d", applies, m.Base.Index+1, m.End)
	}
	for _, k := range gets {
		if strings.Contains(k, "/snap/b") {
			t.Fatalf("read %s", k)
		}
	}
}

// TestReaderRacingCollectionStartsOver: a reader holding a manifest whose
// objects a newer snapshot's collection deleted finds one missing, sees
// the manifest changed, and starts over from the new one (never failing,
// never taking a partial state); and the collection deleted nothing the
// new manifest references.
func TestReaderRacingCollectionStartsOver(t *testing.T) {
	mem := memstore.New()
	m1, term, want := groupWithSegment(t, mem)
	b := newTestNode(t, mem, "b", testOptions())
	_, _, snap, err := b.gs.snap.End(t.Context())
	if err != nil || snap == nil || snap.Man == nil {
		t.Fatalf("%+v %v", snap, err)
	}

	// A writer (the same leader, as after a restart of its worker) writes
	// a new base over it and collects.
	c := newTestNode(t, mem, "c", testOptions())
	if _, _, err := c.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	entry := &rsmpb.Entry{Index: m1.End + 1, Term: term, Writer: "a", Nonce: record.NewNonce(), Noop: true, Commit: m1.End, Group: testGroup}
	if _, err := c.gs.createEntry(t.Context(), entry); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	var capt *snapshot.Captured
	c.onReplica(func(r *replica) { capt, err = r.capture() })
	if err != nil {
		t.Fatal(err)
	}
	v1, _, _ := c.gs.snap.Held()
	j := &snapshot.Job{Base: capt, From: m1.End + 1, End: m1.End + 1, PrevEnd: m1.End, PrevVersion: v1}
	out, err := c.gs.snap.Write(t.Context(), j, snapshot.Writer{ID: "a", Term: term, Nonce: "77"})
	if err != nil {
		t.Fatal(err)
	}
	// A leftover of an older term, and an object of a newer one.
	segment := func(term uint64, nonce string) string {
		return fmt.Sprintf("%s/%ss%020d-%s-%020d", testGroup, snapshot.Dir, term, nonce, 5)
	}
	older, newer := segment(term-1, "aa"), segment(term+1, "bb")
	for _, k := range []string{older, newer} {
		if _, err := c.gs.st.Put(t.Context(), k, []byte("x"), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	dropped, swept, err := c.gs.snap.Collect(t.Context(), out.Prev, out.Man, term, true)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != len(m1.Objects()) || swept != 1 {
		t.Fatalf("dropped %d of %d, swept %d", dropped, len(m1.Objects()), swept)
	}
	keys, err := c.gs.st.ListKeys(t.Context(), c.gs.key(snapshot.Dir), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := append(out.Man.BaseKeys(), newer)
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("after collection: %v, want the new manifest's %v", keys, wantKeys)
	}

	// The reader's manifest is gone from under it.
	err = b.gs.snap.Load(t.Context(), snap, 0, func(cs *snapshot.Stream) error {
		var err error
		b.onReplica(func(r *replica) { err = r.restoreFrom(cs.Head, cs.Machine) })
		return err
	}, func(*rsmpb.Entry, []any) error { return nil })
	if !errors.Is(err, snapshot.ErrMoved) {
		t.Fatalf("reading a collected manifest: %v, want snapshot.ErrMoved", err)
	}
	if err := b.resetAndLoad(t, snap); err != nil {
		t.Fatal(err)
	}
	if b.count(t) != want {
		t.Fatalf("count %d after starting over, want %d", b.count(t), want)
	}
}

// resetAndLoad loads snap as a catch-up would (Node.loadSnapshotAt).
func (n *testNode) resetAndLoad(t *testing.T, snap *snapshot.Stored) error {
	n.resetReplica()
	return n.loadSnapshotAt(t.Context(), snap.EndIndex, snap)
}

// TestEarlierSnapshotFormatsReplacedByManifest: a group whose snapshot is
// in an earlier format (one chunked object, or the v1 protobuf) loads it,
// and its next snapshot is a manifest with a base, from which a fresh
// node reaches the same state.
func TestEarlierSnapshotFormatsReplacedByManifest(t *testing.T) {
	for _, format := range []string{"chunked", "v1"} {
		t.Run(format, func(t *testing.T) {
			mem := memstore.New()
			a := newTestNode(t, mem, "a", testOptions())
			a.leadInBackground(t)
			for i := uint64(1); i <= 6; i++ {
				mustCommand(t, a, i)
			}
			stopNode(a)
			r := newTestNode(t, mem, "r", testOptions())
			if _, _, err := r.catchUp(t.Context()); err != nil {
				t.Fatal(err)
			}
			var data []byte
			if format == "chunked" {
				var c *snapshot.Captured
				var err error
				r.onReplica(func(rep *replica) { c, err = rep.capture() })
				if err != nil {
					t.Fatal(err)
				}
				c.Head.Nonce, c.Head.Group, c.Head.WriterTerm = record.NewNonce(), testGroup, 1
				var buf bytes.Buffer
				if err := snapshot.Encode(&buf, c); err != nil {
					t.Fatal(err)
				}
				data = buf.Bytes()
			} else {
				var s *rsmpb.Snapshot
				var err error
				r.onReplica(func(rep *replica) { s, err = rep.snapshot() })
				if err != nil {
					t.Fatal(err)
				}
				s.Nonce, s.Group, s.WriterTerm = record.NewNonce(), testGroup, 1
				if data, err = record.EncodeSnapshot(s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := mem.Put(t.Context(), testGroup+"/"+snapshotKey, data, driver.Cond{Kind: driver.IfAbsent}); err != nil {
				t.Fatal(err)
			}

			opts := testOptions()
			opts.SnapshotThreshold = 4
			b := newTestNode(t, mem, "b", opts)
			b.leadInBackground(t)
			for i := uint64(7); i <= 16; i++ {
				mustCommand(t, b, i)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				raw, _, err := mem.Get(t.Context(), testGroup+"/"+snapshotKey)
				if err != nil {
					t.Fatal(err)
				}
				if raw[len(record.Magic)] == record.KindManifest {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the earlier format was never replaced")
				}
				time.Sleep(time.Millisecond)
			}
			stopNode(b)
			if count, _ := fresh(t, mem); count != 16 {
				t.Fatalf("fresh node: count %d, want 16", count)
			}
		})
	}
}

// lender is a tape that is a Borrower.
type lender struct{ tape }

func (lender) BorrowsCommands() {}

// TestBorrowsAll: a group lends its segments' commands only if every
// machine it hosts is a Borrower.
func TestBorrowsAll(t *testing.T) {
	for _, c := range []struct {
		machines map[string]StateMachine
		want     bool
	}{
		{map[string]StateMachine{"a": &lender{}}, true},
		{map[string]StateMachine{"a": &lender{}, "b": &lender{}}, true},
		{map[string]StateMachine{"a": &lender{}, "b": &tape{}}, false},
		{map[string]StateMachine{"a": &tape{}}, false},
		{map[string]StateMachine{}, false},
	} {
		if got := borrowsAll(c.machines); got != c.want {
			t.Errorf("borrowsAll(%d machines) = %v, want %v", len(c.machines), got, c.want)
		}
	}
}
