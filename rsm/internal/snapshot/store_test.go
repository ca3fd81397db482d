package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestBaseInPartsStreams: a base is written in parts of at most the part
// size and read back part by part into the same state.
func TestBaseInPartsStreams(t *testing.T) {
	mem := memstore.New()
	gs := newTestStore(store.New(mem), Options{PartMax: 100, Par: 3})
	big := strings.Repeat("x", 3*snapChunkMax/2)
	state := []string{big, "y", "z"}
	c := testCaptured(state...)
	b, err := gs.writeBase(t.Context(), c, Writer{ID: "a", Term: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// With the previous base's size as a hint, smaller or larger than a
	// part: the same parts.
	for _, prev := range []uint64{1, 60, b.Bytes} {
		b2, err := gs.writeBase(t.Context(), c, Writer{ID: "a", Term: 1}, prev)
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
	m := &Manifest{Group: "g", Nonce: []byte{1}, End: b.Index, Base: b}
	for _, k := range m.BaseKeys() {
		data, _, err := mem.Get(t.Context(), k)
		if err != nil || len(data) > 100 {
			t.Fatalf("%s: %d bytes, %v", k, len(data), err)
		}
	}
	var got []string
	var head *rsmpb.Snapshot
	err = gs.Load(t.Context(), &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: b.Index}, Man: m}, 0, func(cs *Stream) error {
		head = cs.Head
		for i := range cs.Head.Machines {
			mr, err := cs.Machine(i)
			if err != nil {
				return err
			}
			data, err := io.ReadAll(mr)
			if err != nil {
				return err
			}
			got = append(got, string(data))
		}
		return cs.Finish()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, state) || head.EndIndex != 4 || len(head.Machines) != 3 {
		t.Fatalf("restored state differs (end %d)", head.EndIndex)
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
	gs := newTestStore(store.New(d), Options{Par: 8, ReadAhead: 2500})
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
			gs := newTestStore(store.New(d), Options{Par: tc.par, ReadAhead: 3500})
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
	gs := newTestStore(store.New(readsInto{memstore.New()}), Options{Par: 4, Borrow: true})
	m := &Manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: BaseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := Writer{ID: "a", Term: 2, Nonce: "cd"}
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
	small := &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, Man: m}
	large := *m
	large.SegBytes = lendTwoFrom // as if the segments were that many bytes: two lent
	for _, c := range []struct {
		budget int
		snap   *Stored
	}{
		{0, small}, // one segment lent (the default)
		{0, &Stored{Snapshot: small.Snapshot, Man: &large}},
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
	gs := newTestStore(store.New(readsInto{mem}), Options{Par: 4, Borrow: borrow})
	m := &Manifest{Group: "g", Nonce: []byte{1}, End: 10, Base: BaseRef{Index: 10, Term: 1, Nonce: "ab", Parts: 1}}
	w := Writer{ID: "a", Term: 2, Nonce: "cd"}
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
	snap := &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: m.End}, Man: m}
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
	var ce *record.CorruptError
	if !errors.As(err, &ce) || ce.Key != segs[5].key || len(got) != 25 {
		t.Fatalf("a corrupt sixth segment: applied %d entries, %v; want 25 and a *CorruptError naming it", len(got), err)
	}
}

// testBound is an objectReader's bound for tests of its reads ahead.
var testBound = objectBound{"test object", 1 << 30}

var (
	_ driver.Reader = readsInto{}
	_ driver.Reader = (*bufferRecordingDriver)(nil)
)
