package snapshot

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/objtest"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func boundedStore(t *testing.T) (*Store, *objtest.Recorder, *store.Store) {
	mem := memstore.New()
	d := objtest.NewRecorder(mem)
	return newTestStore(store.New(d), Options{}), d, store.New(mem)
}

// TestOversizedObjectsRefused: every snapshot object is read within the
// bound of what a leader writes at its key, and one larger than that is
// refused as corrupt, naming it, without reading more of it than the
// bound: the snapshot (a manifest, or an object of the earlier formats), a
// base part and a segment. (rsm's test of the same name reads
// leader_state.json and log entries.)
func TestOversizedObjectsRefused(t *testing.T) {
	t.Run("manifest", func(t *testing.T) {
		gs, d, _ := boundedStore(t)
		key := gs.key(Key)
		d.PutHuge(key, []byte(record.Magic+"M"), int64(manifestMax)+1)
		_, _, err := gs.Read(t.Context())
		var c *record.CorruptError
		if !errors.As(err, &c) || c.Key != key || !errors.Is(err, record.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(manifestMax)) {
			t.Fatalf("read of an oversized manifest: %v; want a *CorruptError naming it and the bound %d", err, manifestMax)
		}
		// Read as a manifest first, then as a snapshot of the earlier
		// formats: never without a bound.
		d.AssertBounded(t, key, earlierSnapshotMax)
		if recs := d.Of(key); recs[0].Max != manifestMax {
			t.Fatalf("first read of the snapshot with limit %d; want the manifest's %d", recs[0].Max, manifestMax)
		}
	})
	t.Run("snapshot of the earlier formats", func(t *testing.T) {
		gs, d, _ := boundedStore(t)
		key := gs.key(Key)
		d.PutHuge(key, []byte(record.Magic+"C"), int64(earlierSnapshotMax)+1)
		_, _, err := gs.Read(t.Context())
		objtest.AssertTooLarge(t, err, key, earlierSnapshotMax)
		d.AssertBounded(t, key, earlierSnapshotMax)
		if n := len(d.Of(key)); n != 2 {
			t.Fatalf("%d reads of the snapshot; want 2 (as a manifest, then as an earlier format)", n)
		}
	})

	// A manifest of a base at 10 in one part and a segment from 11 to 20.
	man := func(baseBytes, segBytes uint64) *Stored {
		m := &Manifest{Group: "g", Nonce: []byte{1}, Writer: "a", WriterTerm: 1, End: 20,
			Base:     BaseRef{Index: 10, Term: 1, Nonce: "0a", Parts: 1, Bytes: baseBytes},
			SegBytes: segBytes, Runs: []SegRun{{Term: 1, Nonce: "0b", Lasts: []uint64{20}}}}
		return &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: 20, Group: "g"}, Man: m}
	}
	restore := func(cs *Stream) error { return cs.Finish() }
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
			gs, d, _ := boundedStore(t)
			snap := man(tc.bytes, 100)
			key := snap.Man.BaseKeys()[0]
			d.PutHuge(key, []byte(record.Magic+"C"), int64(tc.bound)+1)
			err := gs.Load(t.Context(), snap, 0, restore, apply)
			objtest.AssertTooLarge(t, err, key, tc.bound)
			d.AssertBounded(t, key, tc.bound)
		})
	}
	for _, tc := range []struct {
		name  string
		bytes uint64 // the segments' bytes in the manifest
		bound int64
	}{
		{"segment beyond the segments' bytes", 1000, 1000},
		{"segment beyond what a writer puts in one", 1 << 40, int64(segmentObjectMax(testEntryMax))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, d, _ := boundedStore(t)
			snap := man(100, tc.bytes)
			key := snap.Man.segments()[0].key
			d.PutHuge(key, []byte(record.Magic+"G"), int64(tc.bound)+1)
			// The replica has the base: only the segment is read.
			err := gs.Load(t.Context(), snap, 10, restore, apply)
			objtest.AssertTooLarge(t, err, key, tc.bound)
			d.AssertBounded(t, key, tc.bound)
		})
	}
}

// TestBoundsHoldWhatTenureWrites: the bounds hold the largest objects a
// writer makes, so nothing tenure wrote is refused: a segment of one
// entry of the largest batch and one of entries up to segmentMax, a
// manifest of MaxSegments segments each of a run of its own with the
// longest names; and the writer refuses a manifest that would exceed its
// bound. (rsm's test of the same name checks log entries and
// leader_state.json.)
func TestBoundsHoldWhatTenureWrites(t *testing.T) {
	id := strings.Repeat("n", 200)
	// A segment holds entries up to segmentMax bytes together, or one
	// larger entry alone, behind its length.
	if m := segmentObjectMax(testEntryMax); m < len(record.Magic)+1+segmentMax || m < len(record.Magic)+1+4+testEntryMax {
		t.Fatalf("segmentObjectMax %d is below a segment's largest size", m)
	}

	hex := strings.Repeat("f", 64)
	m := &Manifest{Group: strings.Repeat("g", 200), Nonce: make([]byte, 64), Writer: id, WriterTerm: math.MaxUint64,
		Base:     BaseRef{Index: 1, Term: math.MaxUint64, Nonce: hex, Parts: 1 << 20, Bytes: math.MaxUint64},
		SegBytes: math.MaxUint64}
	// The fixed fields at their largest, then segments each in a run of
	// its own with the largest numbers: what maxSegments of them take.
	fixed := len(encodeManifest(m))
	const k = 1000
	last := uint64(1)
	for i := range k {
		last += uint64(1) << 62
		m.Runs = append(m.Runs, SegRun{Term: math.MaxUint64 - uint64(i), Nonce: hex, Lasts: []uint64{last}})
	}
	m.End = last
	perSegment := (len(encodeManifest(m)) - fixed + k - 1) / k
	if fixed > 1<<10 || perSegment > 105 || fixed+MaxSegments*perSegment > manifestMax {
		t.Fatalf("a manifest takes %d bytes and %d per segment: %d segments take %d, above manifestMax %d",
			fixed, perSegment, MaxSegments, fixed+MaxSegments*perSegment, manifestMax)
	}

	gs, _, raw := boundedStore(t)
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
	gs, d, raw := boundedStore(t)
	m := &Manifest{Group: "g", Nonce: []byte{1}, Writer: "a", WriterTerm: 1, End: 10,
		Base: BaseRef{Index: 10, Term: 1, Nonce: "0a", Parts: 2, Bytes: 200}}
	snap := &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: 10, Group: "g"}, Man: m, Version: "v1"}
	keys := m.BaseKeys()
	// The first part is damaged: the base does not decode.
	for i, k := range keys {
		if _, err := raw.Put(t.Context(), k, []byte(fmt.Sprintf("damaged part %d", i)), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	restore := func(cs *Stream) error { return cs.Finish() }
	apply := func(*rsmpb.Entry, []any) error { return nil }
	for attempt := range 3 {
		err := gs.Load(t.Context(), snap, 0, restore, apply)
		var c *record.CorruptError
		if !errors.As(err, &c) || c.Key != keys[0] {
			t.Fatalf("load %d: %v; want a *CorruptError naming %s", attempt, err, keys[0])
		}
	}
	if n := len(d.Of(keys[0])); n != 1 {
		t.Fatalf("the refused part was read %d times in 3 loads; want once", n)
	}
	// The operator puts other bytes there: the next load reads them.
	v, err := raw.Put(t.Context(), keys[0], []byte("another damaged part"), store.IfMatch(listedVersion(t, raw, keys[0])))
	if err != nil || v == "" {
		t.Fatal(err)
	}
	if err := gs.Load(t.Context(), snap, 0, restore, apply); !errors.Is(err, record.ErrCorrupt) {
		t.Fatalf("load after the repair: %v; want the new bytes read and refused", err)
	}
	if n := len(d.Of(keys[0])); n != 2 {
		t.Fatalf("the replaced part was read %d times in all; want 2", n)
	}
	// Another manifest (a newer snapshot) reads its objects afresh.
	other := *snap
	other.Version = "v2"
	if err := gs.Load(t.Context(), &other, 0, restore, apply); !errors.Is(err, record.ErrCorrupt) {
		t.Fatal(err)
	}
	if n := len(d.Of(keys[0])); n != 3 {
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
