package rsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

func testManifest() *manifest {
	return &manifest{Group: "g", Nonce: []byte{1, 2}, Writer: "a", WriterTerm: 3, End: 130,
		Base:     baseRef{Index: 100, Term: 2, Nonce: "0a0b", Parts: 3, Bytes: 1 << 20},
		SegBytes: 999,
		Runs: []segRun{{Term: 2, Nonce: "01", Lasts: []uint64{110, 120}},
			{Term: 3, Nonce: "02", Lasts: []uint64{130}}}}
}

func TestManifestRoundTrip(t *testing.T) {
	m := testManifest()
	got, err := decodeManifest(encodeManifest(m))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encodeManifest(got), encodeManifest(m)) || got.End != 130 || len(got.Runs) != 2 {
		t.Fatalf("round trip: %+v", got)
	}
	// Segments of equal length take a few bytes, however many.
	big := testManifest()
	big.Runs = []segRun{{Term: 2, Nonce: "01"}}
	for i := uint64(1); i <= 10000; i++ {
		big.Runs[0].Lasts = append(big.Runs[0].Lasts, 100+i*100)
	}
	big.End = 100 + 10000*100
	if b := encodeManifest(big); len(b) > 100 {
		t.Fatalf("a manifest of 10000 equal segments takes %d bytes", len(b))
	} else if got, err := decodeManifest(b); err != nil || len(got.segments()) != 10000 {
		t.Fatalf("%v", err)
	}
	segs := got.segments()
	if len(segs) != 3 || segs[0].first != 101 || segs[1].first != 111 || segs[2].first != 121 || segs[2].last != 130 {
		t.Fatalf("segments %+v", segs)
	}
	for _, k := range append(got.baseKeys(), segs[0].key, segs[2].key) {
		if term, ok := snapObjectTerm("g", k); !ok || (term != 2 && term != 3) {
			t.Fatalf("%s: term %d %v", k, term, ok)
		}
	}
	if _, ok := snapObjectTerm("g", "g/snap/x"); ok {
		t.Fatal("a name this package does not write has a term")
	}
}

func TestManifestRejects(t *testing.T) {
	for name, mut := range map[string]func(m *manifest){
		"no nonce":            func(m *manifest) { m.Nonce = nil },
		"no base":             func(m *manifest) { m.Base.Index = 0 },
		"no parts":            func(m *manifest) { m.Base.Parts = 0 },
		"end before the base": func(m *manifest) { m.End = 99; m.Runs = nil },
		"segments short":      func(m *manifest) { m.End = 140 },
		"segments past end":   func(m *manifest) { m.Runs[1].Lasts = []uint64{140} },
		"empty run":           func(m *manifest) { m.Runs[1].Lasts = nil; m.End = 120 },
		"bad nonce in a name": func(m *manifest) { m.Base.Nonce = "../x" },
		"bad run nonce":       func(m *manifest) { m.Runs[0].Nonce = "XY" },
		"segments backwards":  func(m *manifest) { m.Runs[0].Lasts = []uint64{120, 110}; m.End = 110; m.Runs = m.Runs[:1] },
		"too many segments": func(m *manifest) {
			m.Runs = []segRun{{Term: 2, Nonce: "01"}}
			for i := uint64(1); i <= maxManifestSegments+1; i++ {
				m.Runs[0].Lasts = append(m.Runs[0].Lasts, 100+i)
			}
			m.End = 100 + maxManifestSegments + 1
		},
	} {
		m := testManifest()
		mut(m)
		if _, err := decodeManifest(encodeManifest(m)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	b := encodeManifest(testManifest())
	if _, err := decodeManifest(append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1)); err == nil {
		t.Error("a damaged manifest decoded")
	}
}

func testEntries(group string, first, last uint64) []*rsmpb.Entry {
	var out []*rsmpb.Entry
	for i := first; i <= last; i++ {
		out = append(out, &rsmpb.Entry{Index: i, Term: 2, Writer: "a", Nonce: []byte{byte(i), 1}, Group: group,
			Commands: []*rsmpb.Command{{Machine: "c", Data: []byte("x"), Client: "cl", Seq: i}}})
	}
	return out
}

func TestSegmentRoundTrip(t *testing.T) {
	es := testEntries("g", 11, 15)
	b, err := encodeSegment(es)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSegment(b, "g", 11, 15)
	if err != nil || len(got) != 5 || got[4].Index != 15 {
		t.Fatalf("%v %v", got, err)
	}
	for name, c := range map[string]struct {
		b           []byte
		group       string
		first, last uint64
	}{
		"short range":   {b, "g", 11, 14},
		"long range":    {b, "g", 11, 16},
		"shifted":       {b, "g", 12, 16},
		"other group":   {b, "h", 11, 15},
		"truncated":     {b[:len(b)-3], "g", 11, 15},
		"damaged entry": {append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1), "g", 11, 15},
	} {
		if _, err := decodeSegment(c.b, c.group, c.first, c.last); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestSegmentDecodedByWorkers: decoding a segment's entries in several
// goroutines gives the entries one goroutine gives, in order, and a
// damaged segment the error of its first damaged entry, whatever the
// number of workers.
func TestSegmentDecodedByWorkers(t *testing.T) {
	es := testEntries("g", 11, 40)
	b, err := encodeSegment(es)
	if err != nil {
		t.Fatal(err)
	}
	// The offsets of entries 17 and 33's last byte: each entry is framed
	// with its own CRC-32C, so flipping a byte damages that entry only.
	frames, err := splitSegment(b, 11, 40)
	if err != nil {
		t.Fatal(err)
	}
	end := func(i uint64) int {
		f := frames[i-11] // a part of b: its offset is what their capacities differ by
		return cap(b) - cap(f) + len(f) - 1
	}
	damaged := bytes.Clone(b)
	damaged[end(33)] ^= 1
	damaged[end(17)] ^= 1
	onlyLate := bytes.Clone(b)
	onlyLate[end(33)] ^= 1
	for _, borrow := range []bool{false, true} {
		for workers := 1; workers <= 5; workers++ {
			got, err := decodeSegmentPar(b, "g", 11, 40, workers, borrow)
			if err != nil || len(got) != len(es) {
				t.Fatalf("%d workers, borrow %v: %d entries, %v", workers, borrow, len(got), err)
			}
			for k, e := range got {
				if !proto.Equal(e, es[k]) {
					t.Fatalf("%d workers, borrow %v: entry %d is %v, want %v", workers, borrow, k, e, es[k])
				}
			}
			if _, err := decodeSegmentPar(damaged, "g", 11, 40, workers, borrow); err == nil || !strings.Contains(err.Error(), "segment entry 17:") {
				t.Fatalf("%d workers, borrow %v, entries 17 and 33 damaged: %v, want entry 17's error", workers, borrow, err)
			}
			if _, err := decodeSegmentPar(onlyLate, "g", 11, 40, workers, borrow); err == nil || !strings.Contains(err.Error(), "segment entry 33:") {
				t.Fatalf("%d workers, borrow %v, entry 33 damaged: %v, want its error", workers, borrow, err)
			}
		}
	}
}

// stopNode ends n's goroutines (its leadership).
func stopNode(n *testNode) {
	n.Node.cancel()
	n.wg.Wait()
}

// readManifestT reads the group's snapshot, which must be a manifest.
func readManifestT(t *testing.T, gs *groupStore) (*storedSnapshot, *manifest) {
	t.Helper()
	s, _, err := gs.readSnapshot(t.Context())
	if err != nil || s == nil || s.man == nil {
		t.Fatalf("snapshot %+v: %v", s, err)
	}
	return s, s.man
}

// groupWithSegment leaves in mem a group whose snapshot is a manifest of a
// base and at least one segment, with entries after it. It returns the
// manifest and the writer's term and count of commands applied.
func groupWithSegment(t *testing.T, mem driver.Store) (*manifest, uint64, uint64) {
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
		e := &rsmpb.Entry{Index: i, Term: term, Writer: "a", Nonce: newNonce(), Noop: true, Commit: i - 1, Group: testGroup}
		if found, err := a.gs.createEntry(t.Context(), e); err != nil || found != nil {
			t.Fatalf("entry %d: %v %v", i, found, err)
		}
	}
	v, _, _ := a.gs.heldSnapshot()
	j := &snapJob{from: m.End + 1, end: next + 2, prevEnd: m.End, prevVersion: v}
	out, err := a.gs.writeSnapshot(t.Context(), j, snapWriter{id: "a", term: term, nonce: "5e9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.man.segments()) == 0 || out.man.End != next+2 {
		t.Fatalf("manifest %+v", out.man)
	}
	// A segment adds to the manifest: its collection deletes nothing.
	dropped, _, err := a.gs.collect(t.Context(), out.prev, out.man, term, false)
	if err != nil || dropped != 0 {
		t.Fatalf("collection after a segment deleted %d: %v", dropped, err)
	}
	for k := range out.man.objects() {
		if absent(t, mem, k) {
			t.Fatalf("%s, referenced by the manifest, is gone", k)
		}
	}
	return out.man, term, 9
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
			key := m.baseKeys()[0]
			if which == "segment" {
				segs := m.segments()
				key = segs[len(segs)-1].key
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
	r.repMu.Lock()
	r.rep.applied = m.Base.Index // the state at the base: the counter's is m.Base.Index's
	r.repMu.Unlock()
	var applies []uint64
	err := r.gs.loadManifest(t.Context(), snap, m.Base.Index, func(*chunkedStream) error {
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
	_, _, snap, err := b.gs.snapshotEnd(t.Context())
	if err != nil || snap == nil || snap.man == nil {
		t.Fatalf("%+v %v", snap, err)
	}

	// A writer (the same leader, as after a restart of its worker) writes
	// a new base over it and collects.
	c := newTestNode(t, mem, "c", testOptions())
	if _, _, err := c.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	entry := &rsmpb.Entry{Index: m1.End + 1, Term: term, Writer: "a", Nonce: newNonce(), Noop: true, Commit: m1.End, Group: testGroup}
	if _, err := c.gs.createEntry(t.Context(), entry); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.repMu.Lock()
	capt, err := c.rep.capture()
	c.repMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	v1, _, _ := c.gs.heldSnapshot()
	j := &snapJob{base: capt, from: m1.End + 1, end: m1.End + 1, prevEnd: m1.End, prevVersion: v1}
	out, err := c.gs.writeSnapshot(t.Context(), j, snapWriter{id: "a", term: term, nonce: "77"})
	if err != nil {
		t.Fatal(err)
	}
	// A leftover of an older term, and an object of a newer one.
	older := segmentKey(testGroup, term-1, "aa", 5)
	newer := segmentKey(testGroup, term+1, "bb", 5)
	for _, k := range []string{older, newer} {
		if err := c.gs.createObject(t.Context(), k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	dropped, swept, err := c.gs.collect(t.Context(), out.prev, out.man, term, true)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != len(m1.objects()) || swept != 1 {
		t.Fatalf("dropped %d of %d, swept %d", dropped, len(m1.objects()), swept)
	}
	keys, err := c.gs.listSnapObjects(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := append(out.man.baseKeys(), newer)
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("after collection: %v, want the new manifest's %v", keys, wantKeys)
	}

	// The reader's manifest is gone from under it.
	err = b.gs.loadManifest(t.Context(), snap, 0, func(cs *chunkedStream) error {
		return b.rep.restoreFrom(cs.head, cs.machine)
	}, func(*rsmpb.Entry, []any) error { return nil })
	if !errors.Is(err, errSnapshotMoved) {
		t.Fatalf("reading a collected manifest: %v, want errSnapshotMoved", err)
	}
	if err := b.resetAndLoad(t, snap); err != nil {
		t.Fatal(err)
	}
	if b.count(t) != want {
		t.Fatalf("count %d after starting over, want %d", b.count(t), want)
	}
}

// resetAndLoad loads snap as a catch-up would (Node.loadSnapshotAt).
func (n *testNode) resetAndLoad(t *testing.T, snap *storedSnapshot) error {
	n.resetReplica()
	return n.loadSnapshotAt(t.Context(), snap.EndIndex, snap)
}

// TestBaseInPartsStreams: a base is written in parts of at most the part
// size and read back part by part into the same state.
func TestBaseInPartsStreams(t *testing.T) {
	mem := memstore.New()
	gs := &groupStore{st: store.New(mem), group: "g", retry: RetryOptions{MaxAttempts: 1}, partMax: 100, par: 3}
	a, _ := newSessionReplica(t, 8, 2, "a", "b", "c")
	big := strings.Repeat("x", 3*snapChunkMax/2)
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", big), sCmd(2, 1, "b", "y"), sCmd(1, 2, "a", "z")))
	c, err := a.capture()
	if err != nil {
		t.Fatal(err)
	}
	c.head.Nonce, c.head.Group = []byte{1}, "g"
	b, err := gs.writeBase(t.Context(), c, snapWriter{id: "a", term: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// With the previous base's size as a hint, smaller or larger than a
	// part: the same parts.
	for _, prev := range []uint64{1, 60, b.Bytes} {
		b2, err := gs.writeBase(t.Context(), c, snapWriter{id: "a", term: 1}, prev)
		if err != nil || b2.Parts != b.Parts || b2.Bytes != b.Bytes {
			t.Fatalf("previous base of %d bytes: %+v, %v; without: %+v", prev, b2, err, b)
		}
		for i := range b.Parts {
			want, _, err1 := mem.Get(t.Context(), basePartKey("g", b, i))
			got, _, err2 := mem.Get(t.Context(), basePartKey("g", b2, i))
			if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
				t.Fatalf("previous base of %d bytes: part %d differs (%v, %v)", prev, i, err1, err2)
			}
		}
	}
	if b.Parts < int(b.Bytes/100) || b.Bytes < uint64(len(big)) {
		t.Fatalf("%d parts of at most 100 bytes for %d bytes", b.Parts, b.Bytes)
	}
	m := &manifest{Group: "g", Nonce: []byte{1}, End: b.Index, Base: b}
	for _, k := range m.baseKeys() {
		data, _, err := mem.Get(t.Context(), k)
		if err != nil || len(data) > 100 {
			t.Fatalf("%s: %d bytes, %v", k, len(data), err)
		}
	}
	r, _ := newSessionReplica(t, 8, 2, "a", "b", "c")
	err = gs.loadManifest(t.Context(), &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: b.Index}, man: m}, 0, func(cs *chunkedStream) error {
		if err := r.restoreFrom(cs.head, cs.machine); err != nil {
			return err
		}
		return cs.finish()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapBytes(t, r), snapBytes(t, a)) || r.applied != 4 {
		t.Fatalf("restored state differs (applied %d)", r.applied)
	}
}

func FuzzDecodeManifest(f *testing.F) {
	b := encodeManifest(testManifest())
	f.Add(b)
	for _, c := range corruptions(b) {
		f.Add(c)
	}
	f.Add(encodeManifest(&manifest{Nonce: []byte{1}, End: 1, Base: baseRef{Index: 1, Nonce: "0", Parts: 1}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		// Every reference it makes is well formed and in order, and it
		// encodes back to the same bytes.
		prev := m.Base.Index
		for _, s := range m.segments() {
			if s.first != prev+1 || s.last < s.first || s.last > m.End {
				t.Fatalf("segment %+v after %d, end %d", s, prev, m.End)
			}
			prev = s.last
		}
		if prev != m.End {
			t.Fatalf("segments end at %d, manifest at %d", prev, m.End)
		}
		for k := range m.objects() {
			if _, ok := snapObjectTerm(m.Group, k); !ok {
				t.Fatalf("referenced object %q has no term", k)
			}
		}
		if !bytes.Equal(encodeManifest(m), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeSegment(f *testing.F) {
	b, err := encodeSegment(testEntries("g", 5, 7))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, uint64(5), uint64(7))
	for _, c := range corruptions(b) {
		f.Add(c, uint64(5), uint64(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, first, last uint64) {
		es, err := decodeSegment(b, "g", first, last)
		par, perr := decodeSegmentPar(b, "g", first, last, 3, false)
		if (err == nil) != (perr == nil) || err != nil && err.Error() != perr.Error() || len(es) != len(par) {
			t.Fatalf("one goroutine: %d entries, %v; three: %d, %v", len(es), err, len(par), perr)
		}
		// Lent commands (a Borrower's): the same entries, the same error.
		lent, lerr := decodeSegmentPar(bytes.Clone(b), "g", first, last, 3, true)
		if (err == nil) != (lerr == nil) || err != nil && err.Error() != lerr.Error() || len(es) != len(lent) {
			t.Fatalf("copied: %d entries, %v; lent: %d, %v", len(es), err, len(lent), lerr)
		}
		for i := range lent {
			if !proto.Equal(es[i], lent[i]) {
				t.Fatalf("entry %d copied %v, lent %v", i, es[i], lent[i])
			}
		}
		if err != nil {
			return
		}
		if uint64(len(es)) != last-first+1 {
			t.Fatalf("%d entries for %d..%d", len(es), first, last)
		}
		for i, e := range es {
			if e.Index != first+uint64(i) || (e.Group != "" && e.Group != "g") {
				t.Fatalf("entry %d: index %d group %q", i, e.Index, e.Group)
			}
		}
		again, err := encodeSegment(es)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeSegment(again, "g", first, last); err != nil {
			t.Fatalf("re-encoded segment does not decode: %v", err)
		}
	})
}

// FuzzChunkedStream: the streaming decoder of a base never hands a
// machine a byte of a chunk that fails its checksum, and agrees with the
// whole-object decoder on what is valid.
func FuzzChunkedStream(f *testing.F) {
	a, _ := newSessionReplica(f, 8, 2, "a", "b")
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", "x"), sCmd(2, 1, "b", strings.Repeat("y", 300))))
	b := encodeCapturedT(f, a)
	f.Add(b)
	for _, c := range corruptions(b) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > len(frameMagic) && b[len(frameMagic)] != kindChunked {
			return // the v1 format is not streamed
		}
		whole, werr := decodeStoredSnapshot(b)
		if werr == nil {
			for _, chunks := range whole.parts {
				for _, c := range chunks {
					if len(c) > snapChunkMax {
						return // the writer's bound, which only the stream enforces
					}
				}
			}
		}
		// As one stream, and as a base cut in parts, whose chunks are
		// read in place where a part holds them whole.
		size := 1 + len(b)%97
		if len(b) > 0 {
			size += int(b[len(b)-1]) * 16
		}
		pr, closeParts := partsOf(t, b, size)
		defer closeParts()
		for _, r := range []io.Reader{bytes.NewReader(b), pr} {
			got, err := readChunked(r)
			if (err == nil) != (werr == nil) {
				t.Fatalf("stream (%T): %v; whole object: %v", r, err, werr)
			}
			if err != nil {
				continue
			}
			for i := range got {
				want, _ := io.ReadAll(whole.machineReader(i))
				if !bytes.Equal(got[i], want) {
					t.Fatalf("machine %d differs (%T)", i, r)
				}
			}
		}
	})
}

// readChunked reads every machine's bytes from a chunked stream.
func readChunked(r io.Reader) ([][]byte, error) {
	cs, err := openChunked(r)
	if err != nil {
		return nil, err
	}
	var got [][]byte
	for i := range cs.head.Machines {
		mr, err := cs.machine(i)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(mr)
		if err != nil {
			return nil, err
		}
		got = append(got, data)
	}
	return got, cs.finish()
}

// partsOf stores b as parts of size bytes and returns the loader's reader
// of their concatenation, and a function that stops it.
func partsOf(t testing.TB, b []byte, size int) (*partsReader, func()) {
	mem := memstore.New()
	var keys []string
	for i := 0; i*size < len(b); i++ {
		k := fmt.Sprintf("g/snap/b/%05d", i)
		if _, err := mem.Put(context.Background(), k, b[i*size:min(len(b), (i+1)*size)], driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	gs := &groupStore{st: store.New(mem), group: "g", retry: RetryOptions{MaxAttempts: 1}}
	or := gs.openObjects(context.Background(), keys, testBound, true, 0)
	return &partsReader{or: or}, or.close
}

// TestChunksReadInPlaceAreChecked: a base whose chunks lie whole inside
// its parts (read in place, not copied) restores the state, and a byte
// changed inside such a chunk is refused by its checksum.
func TestChunksReadInPlaceAreChecked(t *testing.T) {
	a, _ := newSessionReplica(t, 8, 2, "a", "b")
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", strings.Repeat("x", 5*snapChunkMax)), sCmd(2, 1, "b", "y")))
	b := encodeCapturedT(t, a)
	whole, err := decodeStoredSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	pr, closeParts := partsOf(t, b, 3*snapChunkMax)
	defer closeParts()
	got, err := readChunked(pr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if want, _ := io.ReadAll(whole.machineReader(i)); !bytes.Equal(got[i], want) {
			t.Fatalf("machine %d differs", i)
		}
	}
	// A byte in the middle of the second chunk, inside the first part.
	at := bytes.Index(b, []byte("xxxx")) + snapChunkMax + 8 + snapChunkMax/2
	bad := bytes.Clone(b)
	bad[at] = 'z'
	pr, closeParts = partsOf(t, bad, 3*snapChunkMax)
	defer closeParts()
	if _, err := readChunked(pr); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("a changed byte inside a part: %v; want a checksum mismatch", err)
	}
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
				c, err := r.rep.capture()
				if err != nil {
					t.Fatal(err)
				}
				c.head.Nonce, c.head.Group, c.head.WriterTerm = newNonce(), testGroup, 1
				var buf bytes.Buffer
				if err := encodeCaptured(&buf, c); err != nil {
					t.Fatal(err)
				}
				data = buf.Bytes()
			} else {
				s, err := r.rep.snapshot()
				if err != nil {
					t.Fatal(err)
				}
				s.Nonce, s.Group, s.WriterTerm = newNonce(), testGroup, 1
				if data, err = encodeSnapshot(s); err != nil {
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
				if raw[len(frameMagic)] == kindManifest {
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

// startCountingDriver counts the reads started.
type startCountingDriver struct {
	driver.Store
	mu      sync.Mutex
	started int
}

func (d *startCountingDriver) Get(ctx context.Context, key string) ([]byte, string, error) {
	return d.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited is how the objects are read (bounded).
func (d *startCountingDriver) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	d.mu.Lock()
	d.started++
	d.mu.Unlock()
	return d.Store.GetLimited(ctx, key, max)
}

func (d *startCountingDriver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.started
}

// TestReadAheadBoundedInBytes: objects are read ahead within the byte
// budget, however many reads par allows, and handed out in order.
func TestReadAheadBoundedInBytes(t *testing.T) {
	mem := memstore.New()
	var keys []string
	for i := range 20 {
		k := fmt.Sprintf("g/snap/%02d", i)
		if _, err := mem.Put(t.Context(), k, bytes.Repeat([]byte{byte(i)}, 1000), driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	d := &startCountingDriver{Store: mem}
	// 2,500 bytes: the object being decoded and one more of 1,000.
	gs := &groupStore{st: store.New(d), group: "g", retry: RetryOptions{MaxAttempts: 1}, par: 8, readAhead: 2500}
	or := gs.openObjects(t.Context(), keys, testBound, false, 0)
	defer or.close()
	for i := range keys {
		data, err := or.next()
		if err != nil || len(data) != 1000 || data[0] != byte(i) {
			t.Fatalf("object %d: %d bytes starting %v, %v", i, len(data), data[:min(1, len(data))], err)
		}
		// Give reads ahead the time to start, as they would while this
		// object is decoded.
		time.Sleep(5 * time.Millisecond)
		if n := d.count(); n > i+2 {
			t.Fatalf("%d reads started while object %d is held: more than it and one more within 2,500 bytes", n, i)
		}
	}
	if _, err := or.next(); err != io.EOF {
		t.Fatalf("after the last object: %v, want io.EOF", err)
	}
}

// bufferRecordingDriver reads through driver.Reader and records the
// memory each read was given.
type bufferRecordingDriver struct {
	driver.Store
	mu   sync.Mutex
	bufs []*byte // the first byte of each buffer given, nil for none
}

func (d *bufferRecordingDriver) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	var first *byte
	if cap(buf) > 0 {
		first = &buf[:1][0]
	}
	d.mu.Lock()
	d.bufs = append(d.bufs, first)
	d.mu.Unlock()
	data, _, err := d.GetLimited(ctx, key, max)
	if err != nil {
		return nil, err
	}
	if len(data) > cap(buf) {
		return data, nil
	}
	return append(buf[:0], data...), nil
}

// TestObjectReaderReusesBuffers: a base's parts are read into the memory
// of parts already decoded, a few buffers for any number of parts, and
// an object handed out is not overwritten before its reader asks for the
// next; segments are read into memory of their own.
func TestObjectReaderReusesBuffers(t *testing.T) {
	mem := memstore.New()
	var keys []string
	for i := range 20 {
		k := fmt.Sprintf("g/snap/%02d", i)
		if _, err := mem.Put(t.Context(), k, bytes.Repeat([]byte{byte(i)}, 1000), driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for _, tc := range []struct {
		name  string
		par   int
		reuse bool
	}{
		{"reuse, read ahead", 8, true},
		{"reuse, in order", 0, true},
		{"no reuse", 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &bufferRecordingDriver{Store: mem}
			gs := &groupStore{st: store.New(d), group: "g", retry: RetryOptions{MaxAttempts: 1}, par: tc.par, readAhead: 3500}
			or := gs.openObjects(t.Context(), keys, testBound, tc.reuse, 0)
			defer or.close()
			for i := range keys {
				data, err := or.next()
				if err != nil || len(data) != 1000 {
					t.Fatalf("object %d: %d bytes, %v", i, len(data), err)
				}
				time.Sleep(time.Millisecond) // reads ahead land meanwhile
				if !bytes.Equal(data, bytes.Repeat([]byte{byte(i)}, 1000)) {
					t.Fatalf("object %d was overwritten while its reader held it", i)
				}
			}
			or.close()
			d.mu.Lock()
			defer d.mu.Unlock()
			distinct := map[*byte]bool{}
			given := 0
			for _, b := range d.bufs {
				if b != nil {
					given++
					distinct[b] = true
				}
			}
			if !tc.reuse {
				if given > 0 {
					t.Fatalf("%d reads were given memory without reuse", given)
				}
				return
			}
			// Within 3,500 bytes at most 4 objects of 1,000 are held or
			// being read: the others reuse their memory.
			if given < len(keys)-4 || len(distinct) > 4 {
				t.Fatalf("%d of %d reads given a buffer, %d distinct buffers", given, len(keys), len(distinct))
			}
		})
	}
}

// readsInto is a driver that reads into the memory it is given, as
// filestore does.
type readsInto struct{ driver.Store }

var (
	_ driver.Reader = readsInto{}
	_ driver.Reader = (*bufferRecordingDriver)(nil)
)

func (r readsInto) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	data, _, err := r.GetLimited(ctx, key, max)
	if err != nil || cap(buf) < len(data) {
		return data, err
	}
	return append(buf[:0], data...), nil
}

// TestLentSegmentsStayUntilApplied: for Borrowers (g.borrow) a segment's
// commands are parts of the memory it was read into, and that memory is
// read into again (reuse) only once its entries are applied: however far
// the reads could go ahead, every command is intact when applied.
func TestLentSegmentsStayUntilApplied(t *testing.T) {
	gs := &groupStore{st: store.New(readsInto{memstore.New()}), group: "g", retry: RetryOptions{MaxAttempts: 1}, par: 4, borrow: true}
	m := &manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: baseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := snapWriter{id: "a", term: 2, nonce: "cd"}
	value := func(i uint64) string { return strings.Repeat(fmt.Sprintf("%04d/", i), 100) } // one length: segments fit each other's memory
	// 40 segments, several times what a load holds at once (the reads in
	// flight, the segments decoded ahead and the one applied), so that
	// their memory is reused however the goroutines are scheduled.
	for first := uint64(11); first <= 210; first += 5 {
		var entries []*rsmpb.Entry
		for i := first; i < first+5; i++ {
			entries = append(entries, mkEntry(i, 2, sCmd(1, i, "a", value(i))))
		}
		var err error
		if m, err = gs.writeSegments(t.Context(), m, entries, w); err != nil {
			t.Fatal(err)
		}
	}
	segs := m.segments()
	small := &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, man: m}
	large := *m
	large.SegBytes = lendTwoFrom // as if the segments were that many bytes: two lent
	for _, c := range []struct {
		budget int
		snap   *storedSnapshot
	}{
		{0, small}, // one segment lent (the default)
		{0, &storedSnapshot{Snapshot: small.Snapshot, man: &large}},
		{1 << 20, small}, // all of them read ahead
	} {
		budget, snap := c.budget, c.snap
		gs.readAhead = budget
		feed := gs.startSegments(t.Context(), snap, segs, 0)
		mems := map[*byte]bool{}
		applied := 0
		for {
			entries, _, err := feed.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if feed.lent == nil {
				t.Fatalf("budget %d: entry %d handed out with no segment lent", budget, entries[0].Index)
			}
			// The memory the segment was read into.
			mems[unsafe.SliceData(feed.lent)] = true
			time.Sleep(2 * time.Millisecond) // room for reads ahead to overwrite what they should not
			for _, e := range entries {
				if got := string(e.Commands[0].Data); got != value(e.Index) {
					t.Fatalf("budget %d: entry %d applied with %.20q..., want %.20q...", budget, e.Index, got, value(e.Index))
				}
				applied++
			}
		}
		feed.close()
		if applied != 200 {
			t.Fatalf("budget %d: %d entries applied, want 200", budget, applied)
		}
		// Lent from reused memory: far fewer buffers than segments.
		if len(mems) > len(segs)/2 {
			t.Fatalf("budget %d: %d segments lent from %d buffers: not reused", budget, len(segs), len(mems))
		}
	}
}

func TestLendAhead(t *testing.T) {
	if got := lendAhead(lendTwoFrom - 1); got != segmentMax {
		t.Errorf("below lendTwoFrom: %d bytes lent ahead, want one segment", got)
	}
	if got := lendAhead(lendTwoFrom); got != 2*segmentMax {
		t.Errorf("at lendTwoFrom: %d bytes lent ahead, want two segments", got)
	}
}

// TestSegmentsDecodedAhead: with reads ahead, segments are decoded
// ahead of the applies (for Borrowers, as far as lendAhead lets them) and
// their entries handed out in order; a corrupt
// segment stops the load after the entries before it with a
// *CorruptError naming it, an apply's error stops it at once, and either
// way no decoding goroutine is left behind.
func TestSegmentsDecodedAhead(t *testing.T) {
	for _, borrow := range []bool{false, true} {
		t.Run(fmt.Sprintf("borrow=%v", borrow), func(t *testing.T) { testSegmentsDecodedAhead(t, borrow) })
	}
}

func testSegmentsDecodedAhead(t *testing.T, borrow bool) {
	mem := memstore.New()
	gs := &groupStore{st: store.New(readsInto{mem}), group: "g", retry: RetryOptions{MaxAttempts: 1}, par: 4, borrow: borrow}
	m := &manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: baseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := snapWriter{id: "a", term: 2, nonce: "cd"}
	for first := uint64(11); first <= 60; first += 5 {
		var entries []*rsmpb.Entry
		for i := first; i < first+5; i++ {
			entries = append(entries, mkEntry(i, 2, sCmd(1, i, "a", strings.Repeat("v", 100))))
		}
		var err error
		if m, err = gs.writeSegments(t.Context(), m, entries, w); err != nil {
			t.Fatal(err)
		}
	}
	segs := m.segments()
	if len(segs) != 10 {
		t.Fatalf("%d segments, want 10", len(segs))
	}
	snap := &storedSnapshot{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, man: m}
	run := func(stopAt uint64) ([]uint64, error) {
		var got []uint64
		err := func() error {
			feed := gs.startSegments(t.Context(), snap, segs, 0)
			defer feed.close()
			for {
				entries, _, err := feed.next()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				for _, e := range entries {
					if e.Index == stopAt {
						return errors.New("apply failed")
					}
					got = append(got, e.Index)
				}
			}
		}()
		// A goroutine that has signalled its end may not have returned yet:
		// one still there after a while has leaked.
		buf := make([]byte, 1<<20)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			st := string(buf[:runtime.Stack(buf, true)])
			if !strings.Contains(st, "startSegments") && !strings.Contains(st, "decodeSegmentPar") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a decoding goroutine outlived the load:\n%s", st)
			}
		}
		return got, err
	}
	got, err := run(0)
	if err != nil || len(got) != 50 || got[0] != 11 || !slices.IsSorted(got) {
		t.Fatalf("applied %v, %v; want 11..60 in order", got, err)
	}
	if got, err = run(33); err == nil || err.Error() != "apply failed" || len(got) != 22 {
		t.Fatalf("an apply failing at 33: applied %d entries, %v", len(got), err)
	}
	data, _, err := mem.Get(t.Context(), segs[5].key)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 0x10
	deleteT(t, mem, segs[5].key)
	if _, err := mem.Put(t.Context(), segs[5].key, data, driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	got, err = run(0)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Key != segs[5].key || len(got) != 25 {
		t.Fatalf("a corrupt sixth segment: applied %d entries, %v; want 25 and a *CorruptError naming it", len(got), err)
	}
}

// TestPartWriterCuts: whatever the sizes written and the buffer it starts
// with, a partWriter hands out the bytes in order, in parts of max bytes
// but the last, and its buffer never grows past a part.
func TestPartWriterCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 200 {
		max := 1 + rng.IntN(300)
		data := make([]byte, rng.IntN(2000))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		var parts [][]byte
		var prev uint64 // odd rounds: a previous base smaller or larger than a part
		if round%2 == 1 {
			prev = uint64(1 + rng.IntN(2*max))
		}
		pw := newPartWriter(func(i int, b []byte) error {
			if i != len(parts) {
				t.Fatalf("round %d: part %d handed out after %d parts", round, i, len(parts))
			}
			parts = append(parts, bytes.Clone(b))
			return nil
		}, max, prev)
		for rest := data; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(700))
			if n, err := pw.Write(rest[:k]); n != k || err != nil {
				t.Fatalf("round %d: wrote %d of %d: %v", round, n, k, err)
			}
			rest = rest[k:]
			if cap(pw.buf) > max {
				t.Fatalf("round %d: buffer of %d bytes for parts of %d", round, cap(pw.buf), max)
			}
		}
		if err := pw.close(); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, data) {
			t.Fatalf("round %d: parts join to %d bytes, want the %d written", round, len(got), len(data))
		}
		for i, p := range parts {
			if len(p) > max || i < len(parts)-1 && len(p) != max {
				t.Fatalf("round %d: part %d of %d bytes (max %d, %d parts)", round, i, len(p), max, len(parts))
			}
		}
		if pw.total != uint64(len(data)) || pw.parts != len(parts) {
			t.Fatalf("round %d: counted %d bytes in %d parts", round, pw.total, pw.parts)
		}
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

// testBound is an objectReader's bound for tests of its reads ahead.
var testBound = objectBound{"test object", 1 << 30}
