package rsm

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// errSnapshotMoved: an object a manifest referenced is gone and the
// manifest has changed since it was read (a newer snapshot was written and
// the old one's objects collected). Read the snapshot again.
var errSnapshotMoved = errors.New("rsm: the snapshot changed while it was read")

// snapWriter is who writes a snapshot: the leader's identity, its term
// and its leadership's nonce (in its segments' names).
type snapWriter struct {
	id    string
	term  uint64
	nonce string
}

// writeBase writes c as a base in parts of at most partMax bytes, each
// created under a name no other write uses, streaming: no more than one
// part is held besides the state. prev is the previous base's size, if
// known: the part's buffer starts that large (up to a part), not grown
// to it.
func (g *groupStore) writeBase(ctx context.Context, c *captured, w snapWriter, prev uint64) (baseRef, error) {
	b := baseRef{Index: c.head.EndIndex, Term: w.term, Nonce: hex.EncodeToString(g.nonce())}
	max := g.partMax
	if max <= 0 {
		max = basePartMax
	}
	pw := newPartWriter(func(i int, data []byte) error {
		return g.createObject(ctx, basePartKey(g.group, b, i), data)
	}, max, prev)
	if err := encodeCaptured(pw, c); err != nil {
		return b, err
	}
	if err := pw.close(); err != nil {
		return b, err
	}
	b.Parts, b.Bytes = pw.parts, pw.total
	return b, nil
}

// createObject creates an immutable snapshot object (a base part or a
// segment) whose name no other write uses; an ambiguous outcome is
// settled by reading it back.
func (g *groupStore) createObject(ctx context.Context, key string, data []byte) error {
	_, err := store.PutResolved(ctx, g.st, key, data, store.IfAbsent(), g.resolve(func(stored []byte) bool {
		return bytes.Equal(stored, data)
	}, int64(max(len(data), 1))))
	return err
}

// partWriter cuts what is written to it into parts of max bytes and
// hands each to put as it fills. Its buffer grows as needed (a small
// state does not pay for a full part), at least doubling each time, and
// is reused.
type partWriter struct {
	put   func(i int, data []byte) error
	max   int
	buf   []byte
	parts int
	total uint64
	err   error
}

// newPartWriter returns a partWriter whose buffer starts at prev bytes
// (the previous base's size, 0 if none), up to a part.
func newPartWriter(put func(i int, data []byte) error, max int, prev uint64) *partWriter {
	p := &partWriter{put: put, max: max}
	if prev > 0 {
		p.buf = make([]byte, 0, min(uint64(max), prev))
	}
	return p
}

func (p *partWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 && p.err == nil {
		k := min(len(b), p.max-len(p.buf))
		if need := len(p.buf) + k; need > cap(p.buf) {
			// Doubling, not append's quarter for large slices: the
			// buffers outgrown while a part fills are garbage, five
			// full parts' worth with append (BenchmarkWriteBaseParts).
			nb := make([]byte, len(p.buf), min(p.max, max(need, 2*cap(p.buf))))
			copy(nb, p.buf)
			p.buf = nb
		}
		p.buf = append(p.buf, b[:k]...)
		b = b[k:]
		if len(p.buf) == p.max {
			p.flush()
		}
	}
	if p.err != nil {
		return 0, p.err
	}
	return n, nil
}

func (p *partWriter) flush() {
	if p.err != nil || (len(p.buf) == 0 && p.parts > 0) {
		return
	}
	p.err = p.put(p.parts, p.buf)
	p.parts++
	p.total += uint64(len(p.buf))
	p.buf = p.buf[:0]
}

func (p *partWriter) close() error {
	p.flush()
	return p.err
}

// writeSegments writes entries (consecutive, after m's end) as segments of
// at most segmentMax bytes each (an entry larger than that alone), and
// returns m extended by them.
func (g *groupStore) writeSegments(ctx context.Context, m *manifest, entries []*rsmpb.Entry, w snapWriter) (*manifest, error) {
	for len(entries) > 0 {
		n, size := 0, 0
		for n < len(entries) {
			s := segmentSize(entries[n : n+1])
			if n > 0 && size+s > segmentMax {
				break
			}
			n, size = n+1, size+s
		}
		data, err := encodeSegment(entries[:n])
		if err != nil {
			return nil, err
		}
		last := entries[n-1].Index
		if err := g.createObject(ctx, segmentKey(g.group, w.term, w.nonce, last), data); err != nil {
			return nil, err
		}
		m = m.withSegment(w.term, w.nonce, last, len(data))
		entries = entries[n:]
	}
	return m, nil
}

// writeManifest replaces the snapshot at version prev ("" for none) with
// m by compare-and-swap.
func (g *groupStore) writeManifest(ctx context.Context, m *manifest, prev string) (string, error) {
	cond := store.IfAbsent()
	if prev != "" {
		cond = store.IfMatch(prev)
	}
	data := encodeManifest(m)
	if len(data) > manifestMax {
		return "", refuseWrite(g.key(snapshotKey), "manifest", len(data), manifestMax)
	}
	v, err := store.PutResolved(ctx, g.st, g.key(snapshotKey), data, cond, g.resolve(func(stored []byte) bool {
		o, derr := decodeManifest(stored)
		return derr == nil && bytes.Equal(o.Nonce, m.Nonce)
	}, manifestMax))
	if err == nil {
		g.rememberSnap(v, m.End, m, m.WriterTerm)
	}
	return v, err
}

// collect deletes snapshot objects no manifest can reference any more,
// after a swap from old (nil: none, or not a manifest) to cur by a writer
// of term: what old referenced and cur does not, and if sweep, every
// object under {group}/snap/ that cur does not reference and whose
// writer's term is not above term (leftovers of failed writes and of
// earlier leaders; a newer leader's objects may be about to be
// referenced, and an older leader can no longer swap the manifest: cur
// carries term, and no writer swaps over a manifest of a higher term). It
// returns the number of objects deleted of each kind.
func (g *groupStore) collect(ctx context.Context, old, cur *manifest, term uint64, sweep bool) (dropped, swept int, err error) {
	keep := cur.objects()
	var del []string
	if old != nil {
		for k := range old.objects() {
			if !keep[k] {
				del = append(del, k)
			}
		}
		// In a fixed order: the simulator replays a seed the same way.
		slices.Sort(del)
	}
	dropped = len(del)
	if sweep {
		seen := map[string]bool{}
		for _, k := range del {
			seen[k] = true
		}
		keys, err := g.listSnapObjects(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, k := range keys {
			if t, ok := snapObjectTerm(g.group, k); ok && t <= term && !keep[k] && !seen[k] {
				del = append(del, k)
			}
		}
	}
	var first error
	var mu sync.Mutex
	g.each(len(del), func(i int) {
		err := g.do(ctx, func(ctx context.Context) error { return g.st.Delete(ctx, del[i], store.Cond{}) })
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			mu.Lock()
			first = cmpErr(first, err)
			mu.Unlock()
		}
	})
	return dropped, len(del) - dropped, first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// each runs f(0..n-1), par at a time (par 0: in order, in this goroutine).
func (g *groupStore) each(n int, f func(i int)) {
	if g.par <= 0 {
		for i := range n {
			f(i)
		}
		return
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(g.par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// listSnapObjects lists the keys under {group}/snap/.
func (g *groupStore) listSnapObjects(ctx context.Context) ([]string, error) {
	prefix := g.key(snapDir)
	var out []string
	start := ""
	for {
		var keys []string
		err := g.do(ctx, func(ctx context.Context) error {
			var e error
			keys, e = g.st.ListKeys(ctx, prefix, start, 1000)
			return e
		})
		if err != nil {
			return nil, err
		}
		out = append(out, keys...)
		if len(keys) < 1000 {
			return out, nil
		}
		start = keys[len(keys)-1]
	}
}

// loadManifest brings a replica whose state is at applied up to the state
// snap (a manifest) describes: its base, streamed part by part into
// restore (which must call finish on the stream), unless applied has
// reached the base already; then the entries of its segments after
// applied, handed to apply in index order with what the Preparers
// returned for their commands (nil if none). Objects are read once each, up
// to par at a time. An object missing while the manifest is unchanged is
// refused (a *CorruptError naming it, rule 12); missing because the
// manifest has moved on since it was read, errSnapshotMoved. An object
// refused as corrupt by an earlier load of the same manifest is refused
// again unread while a listing shows it unchanged (refusedObject).
func (g *groupStore) loadManifest(ctx context.Context, snap *storedSnapshot, applied uint64,
	restore func(cs *chunkedStream) error, apply func(e *rsmpb.Entry, prepared []any) error) error {
	if err := g.stillRefused(ctx, snap, applied); err != nil {
		return err
	}
	err := g.loadManifestOnce(ctx, snap, applied, restore, apply)
	var c *CorruptError
	if errors.As(err, &c) && !errors.Is(c.Err, errMissing) && c.Key != g.key(snapshotKey) {
		g.refuseObject(ctx, snap.version, c)
	}
	return err
}

// refusedObject is a base part or segment a load refused as corrupt: the
// manifest version that referenced it, its own version as listed after
// the refusal, and the error.
type refusedObject struct {
	snapVersion, key, version string
	err                       *CorruptError
}

// refuseObject remembers c's object, refused by a load of the manifest
// at snapVersion, at the version a listing gives it now (not at all if
// the listing fails or finds nothing: the next load reads it again).
func (g *groupStore) refuseObject(ctx context.Context, snapVersion string, c *CorruptError) {
	if snapVersion == "" {
		return
	}
	items, err := g.st.List(ctx, c.Key, "", 1)
	if err != nil || len(items) == 0 || items[0].Key != c.Key {
		return
	}
	g.mu.Lock()
	g.refusedObj = &refusedObject{snapVersion: snapVersion, key: c.Key, version: items[0].Version, err: c}
	g.mu.Unlock()
}

// stillRefused returns the error of the object an earlier load of snap
// refused, if this load would read it and a listing shows it unchanged;
// else nil, and what was remembered is dropped.
func (g *groupStore) stillRefused(ctx context.Context, snap *storedSnapshot, applied uint64) error {
	g.mu.Lock()
	r := g.refusedObj
	g.mu.Unlock()
	if r == nil || r.snapVersion != snap.version {
		return nil
	}
	m := snap.man
	reads := applied < m.Base.Index && slices.Contains(m.baseKeys(), r.key)
	for _, s := range m.segments() {
		reads = reads || s.last > applied && s.key == r.key
	}
	if reads {
		items, err := g.st.List(ctx, r.key, "", 1)
		if err == nil && len(items) > 0 && items[0].Key == r.key && items[0].Version == r.version {
			return r.err
		}
	}
	g.mu.Lock()
	if g.refusedObj == r {
		g.refusedObj = nil
	}
	g.mu.Unlock()
	return nil
}

// loadManifestOnce is loadManifest's load.
func (g *groupStore) loadManifestOnce(ctx context.Context, snap *storedSnapshot, applied uint64,
	restore func(cs *chunkedStream) error, apply func(e *rsmpb.Entry, prepared []any) error) error {
	m := snap.man
	var baseRead uint64 // the base's bytes, if this load restores it
	if applied < m.Base.Index {
		baseRead = m.Base.Bytes
		keys := m.baseKeys()
		or := g.openObjects(ctx, keys, objectBound{"base part", int64(min(basePartObjectMax, max(m.Base.Bytes, 1)))}, true, 0)
		pr := &partsReader{or: or}
		var decodeErr error
		err := func() error {
			cs, err := openChunked(pr)
			if err == nil && (cs.head.EndIndex != m.Base.Index || (cs.head.Group != "" && cs.head.Group != g.group)) {
				err = fmt.Errorf("base of group %q ending at %d, referenced as %q at %d", cs.head.Group, cs.head.EndIndex, g.group, m.Base.Index)
			}
			if err != nil {
				decodeErr = err
				return err
			}
			err = restore(cs)
			decodeErr = cs.err
			return err
		}()
		or.close()
		switch {
		case pr.err != nil:
			return g.objectErr(ctx, snap, pr.key, pr.err)
		case decodeErr != nil:
			return &CorruptError{Key: pr.key, Err: decodeErr}
		case err != nil:
			return err
		}
		applied = m.Base.Index
	}
	var segs []segRef
	for _, s := range m.segments() {
		if s.last > applied {
			segs = append(segs, s)
		}
	}
	// After the base, not beside it: decoded ahead while a base is
	// restored, segments raised a 100k-key cold start's peak RSS past
	// twice the data, for no time saved on two cores (tenure bench kv).
	feed := g.startSegments(ctx, snap, segs, baseRead)
	defer feed.close()
	for {
		entries, prepared, err := feed.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for k, e := range entries {
			if e.Index <= applied {
				continue
			}
			var p []any
			if prepared != nil {
				p = prepared[k]
			}
			if err := apply(e, p); err != nil {
				return err
			}
			applied = e.Index
		}
	}
}

// segmentsAhead bounds the segments a cold start decodes ahead of the
// entries it applies, each up to segmentMax bytes.
const segmentsAhead = 2

// reuseSegmentsFrom is the segments' bytes from which a load reads them
// into reused memory (decoded entries do not alias it). Into fresh memory,
// a gigabyte of segments is a gigabyte cleared by the allocator and
// collected, a tenth of a 1M-key cold start (tenure bench kv); reused, the
// buffers kept (readAheadMax) raised a 100k-key cold start's peak RSS by
// 10 MiB, past 1.9 times the data. Machines that are all Borrowers are
// lent their commands in the segments' memory, which is always reused.
const reuseSegmentsFrom = 16 * readAheadMax

// lendAhead bounds the bytes of segments a load holds when it lends their
// commands: one segment, or two once the load (the base it restores, if
// any, and the segments) reaches lendTwoFrom bytes. From there the load
// also prepares the commands of Preparers (prepareFrom). Held alone, a
// segment is read, decoded and prepared only once the previous one is
// applied, and the applying goroutine and the decoding ones take turns; a
// second lets them overlap: a 1M-key cold start 17% faster, and the
// segments after a 1M-key base applied in a quarter to a third less time
// (the one goroutine that applies them no longer copies values). A 100k-key
// cold start's peak, near twice the data, would grow by the segment and
// the values prepared ahead of their apply, about 15 MiB (tenure bench
// kv, when it was introduced: docs/BENCHMARKS.md in git history).
func lendAhead(load uint64) int {
	if load >= lendTwoFrom {
		return 2 * segmentMax
	}
	return segmentMax
}

// lendTwoFrom is the bytes of a load from which it holds two segments: a
// segment more is then at most 1/64 of what it loads.
const lendTwoFrom = 64 * segmentMax

// prepareFrom is the bytes of a load (base and segments) from which it
// prepares commands (Preparer): where it holds a segment ahead of the one
// applied, the one place preparing saves time. Tests lower it.
var prepareFrom uint64 = lendTwoFrom

// segFeed hands out the decoded entries of a manifest's segments in
// order; with reads ahead (par > 0) they are read and decoded in a
// goroutine of their own, up to segmentsAhead ahead of next, each by up
// to decodeWorkers goroutines: a cold start decodes as many bytes as it
// applies, and decoding is the larger part. With g.borrow the entries'
// commands are parts of their segment's memory, which is read into again
// only once the entries are applied (the caller asked for the next ones).
type segFeed struct {
	g      *groupStore
	ctx    context.Context
	cancel context.CancelFunc
	snap   *storedSnapshot
	segs   []segRef
	or     *objectReader
	i      int             // par 0: the next segment
	out    chan segDecoded // par > 0
	wg     sync.WaitGroup
	lent   []byte              // with g.borrow: the segment whose entries next handed out last
	prep   map[string]Preparer // the machines whose commands are prepared (g.prep, for a large load)
}

type segDecoded struct {
	entries  []*rsmpb.Entry
	prepared [][]any // with f.prep: per entry, what Prepare returned for each command
	data     []byte  // the segment, with g.borrow
	err      error
}

// decodeWorkers is how many goroutines decode one segment's entries.
func decodeWorkers() int { return min(4, runtime.GOMAXPROCS(0)) }

// startSegments starts the load of segs, the segments of snap to apply;
// baseRead is the bytes of the base the load restored before them (0 if
// none): with the segments', the size of the load.
func (g *groupStore) startSegments(ctx context.Context, snap *storedSnapshot, segs []segRef, baseRead uint64) *segFeed {
	ctx, cancel := context.WithCancel(ctx)
	keys := make([]string, len(segs))
	for i, s := range segs {
		keys[i] = s.key
	}
	// Lent, a segment is given back once its entries are applied, not
	// when the decoder reads the next; and the next is read once there
	// is room for it (lendAhead).
	var segBytes uint64
	if snap.man != nil {
		segBytes = snap.man.SegBytes
	}
	load := segBytes + baseRead
	reuse := segBytes >= reuseSegmentsFrom
	lend := 0
	if g.borrow {
		lend = lendAhead(load)
	}
	// A segment is bounded by what a writer puts in one, and by the
	// segments' bytes all together.
	bound := objectBound{"segment", int64(segmentObjectMax)}
	if snap.man != nil {
		bound.max = int64(min(uint64(bound.max), max(snap.man.SegBytes, 1)))
	}
	f := &segFeed{g: g, ctx: ctx, cancel: cancel, snap: snap, segs: segs, or: g.openObjects(ctx, keys, bound, reuse, lend)}
	if load >= prepareFrom {
		f.prep = g.prep
	}
	if g.par <= 0 {
		return f
	}
	f.out = make(chan segDecoded, segmentsAhead-1)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(f.out)
		for _, s := range segs {
			d := f.decode(s, decodeWorkers())
			select {
			case f.out <- d:
			case <-ctx.Done():
				return
			}
			if d.err != nil {
				return
			}
		}
	}()
	return f
}

// decode reads and decodes the next segment, s, and prepares its commands
// for the machines that are Preparers, on the goroutines that decode; with
// g.borrow it returns the segment's memory too, to be given back once the
// entries are applied.
func (f *segFeed) decode(s segRef, workers int) segDecoded {
	data, err := f.or.next()
	if err != nil {
		return segDecoded{err: f.g.objectErr(f.ctx, f.snap, s.key, err)}
	}
	var prepared [][]any
	var each func(k int, e *rsmpb.Entry)
	if f.prep != nil {
		prepared = make([][]any, s.last-s.first+1)
		each = func(k int, e *rsmpb.Entry) { prepared[k] = prepare(f.prep, e) }
	}
	entries, err := decodeSegmentEach(data, f.g.group, s.first, s.last, workers, f.g.borrow, each)
	if !f.g.borrow {
		data = nil
	}
	if err != nil {
		return segDecoded{data: data, err: &CorruptError{Key: s.key, Err: err}}
	}
	return segDecoded{entries: entries, prepared: prepared, data: data}
}

// prepare returns what the Preparers in prep return for e's commands (nil
// for the others), or nil if none of them is for a Preparer.
func prepare(prep map[string]Preparer, e *rsmpb.Entry) []any {
	var out []any
	for i, c := range e.Commands {
		if c.Register {
			continue
		}
		if p := prep[c.Machine]; p != nil {
			if out == nil {
				out = make([]any, len(e.Commands))
			}
			out[i] = p.Prepare(c.Data)
		}
	}
	return out
}

// next returns the next segment's entries, with what was prepared for
// them (nil, or one per entry); io.EOF after the last. The caller is done
// with the entries it had before.
func (f *segFeed) next() ([]*rsmpb.Entry, [][]any, error) {
	if f.lent != nil {
		f.or.give(f.lent)
		f.lent = nil
	}
	if f.out == nil {
		if f.i >= len(f.segs) {
			return nil, nil, io.EOF
		}
		f.i++
		d := f.decode(f.segs[f.i-1], 1)
		f.lent = d.data
		return d.entries, d.prepared, d.err
	}
	select {
	case d, ok := <-f.out:
		if !ok {
			if err := f.ctx.Err(); err != nil {
				return nil, nil, err
			}
			return nil, nil, io.EOF
		}
		f.lent = d.data
		return d.entries, d.prepared, d.err
	case <-f.ctx.Done():
		return nil, nil, f.ctx.Err()
	}
}

// close stops the reads and decoding ahead and waits for them.
func (f *segFeed) close() {
	f.cancel()
	f.wg.Wait() // before or.close: the decoder uses or
	f.or.close()
}

// objectErr reports an error reading a referenced object: if it is
// missing, the snapshot key is listed again; a manifest changed since snap
// was read gives errSnapshotMoved, an unchanged one a *CorruptError
// naming the object (an operator deleted it, rule 12).
func (g *groupStore) objectErr(ctx context.Context, snap *storedSnapshot, key string, err error) error {
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	v, lerr := g.snapshotVersion(ctx)
	if lerr != nil {
		return lerr
	}
	if v != snap.version {
		return errSnapshotMoved
	}
	return &CorruptError{Key: key, Err: fmt.Errorf("%w: the snapshot manifest ending at %d references it", errMissing, snap.EndIndex)}
}

// snapshotVersion lists the snapshot's key: its version, "" if absent.
func (g *groupStore) snapshotVersion(ctx context.Context) (string, error) {
	key := g.key(snapshotKey)
	var items []store.Item
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		items, e = g.st.List(ctx, key, "", 1)
		return e
	})
	if err != nil || len(items) == 0 || items[0].Key != key {
		return "", err
	}
	return items[0].Version, nil
}

// readAheadMax bounds the bytes of the objects an objectReader holds:
// those read and not yet handed out, the one handed out last (its reader
// is still decoding it) and, counted at the largest size seen, those being
// read. Each is retained until decoded, and the collector's headroom
// applies to them too: 8 base parts of 8 MiB read ahead were 64 MiB more
// at a cold start's peak, where 3 keep the decoder fed (it is slower than
// the store's reads).
const readAheadMax = 3 * basePartMax

// objectReader hands out objects in order, reading up to par of them
// ahead within readAheadMax bytes (par 0: each when asked, in the
// caller's goroutine). With reuse, an object's memory is read into again
// once its reader is done with it (it asked for the next one): a base's
// parts are copied out as they are decoded, and fresh buffers would be
// cleared by the allocator and collected, a gigabyte of each for a
// gigabyte of state. Lending, its reader gives each object back (give)
// once nothing uses its memory, within lendAhead bytes.
type objectReader struct {
	g      *groupStore
	ctx    context.Context
	cancel context.CancelFunc
	keys   []string
	bound  objectBound
	i      int
	res    []chan fetched
	slots  chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	held     int           // bytes read and not yet released
	reading  int           // reads in flight
	largest  int           // the largest object read so far
	released chan struct{} // signalled when held bytes are released
	budget   int           // readAheadMax; tests set less
	last     []byte        // the object handed out last
	reuse    bool
	lending  bool     // each object is given back (give), not released at next
	free     [][]byte // with reuse, a buffer whose object was released
}

type fetched struct {
	data []byte
	err  error
}

// objectBound is what an objectReader's objects are, and the bytes each
// may take.
type objectBound struct {
	what string
	max  int64
}

func (g *groupStore) openObjects(ctx context.Context, keys []string, bound objectBound, reuse bool, lend int) *objectReader {
	ctx, cancel := context.WithCancel(ctx)
	o := &objectReader{g: g, ctx: ctx, cancel: cancel, keys: keys, bound: bound, released: make(chan struct{}, 1), budget: readAheadMax,
		reuse: reuse || lend > 0, lending: lend > 0}
	switch {
	case g.readAhead > 0:
		o.budget = g.readAhead
	case lend > 0:
		o.budget = lend
	}
	if g.par <= 0 || len(keys) == 0 {
		return o
	}
	o.res = make([]chan fetched, len(keys))
	for i := range o.res {
		o.res[i] = make(chan fetched, 1)
	}
	o.slots = make(chan struct{}, g.par)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for i := range keys {
			select {
			case o.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if !o.waitRoom(ctx) {
				return
			}
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				data, err := g.readObject(ctx, keys[i], o.bound, o.buffer())
				o.mu.Lock()
				o.reading--
				o.held += len(data)
				o.largest = max(o.largest, len(data))
				o.mu.Unlock()
				o.res[i] <- fetched{data, err}
			}()
		}
	}()
	return o
}

// waitRoom waits until one more read fits in the budget, counting the
// reads in flight at the largest size seen (until a first read is back,
// one read at a time), and counts it; false if ctx ended.
func (o *objectReader) waitRoom(ctx context.Context) bool {
	for {
		o.mu.Lock()
		fits := o.held+o.reading == 0 ||
			o.largest > 0 && o.held+(o.reading+1)*o.largest <= o.budget
		if fits {
			o.reading++
		}
		o.mu.Unlock()
		if fits {
			return true
		}
		select {
		case <-o.released:
		case <-ctx.Done():
			return false
		}
	}
}

// release gives back the bytes of the object handed out last: its reader
// asked for the next one, so it is done with it. Lending, objects are
// given back by give instead.
func (o *objectReader) release() {
	if o.lending {
		return
	}
	o.mu.Lock()
	o.putBack(o.last)
	o.last = nil
	o.mu.Unlock()
	o.signal()
}

// give gives back an object handed out while lending: nothing uses its
// memory any more.
func (o *objectReader) give(b []byte) {
	o.mu.Lock()
	o.putBack(b)
	o.mu.Unlock()
	o.signal()
}

// putBack releases b's bytes from the budget and, with reuse, keeps its
// memory as the spare; under o.mu.
func (o *objectReader) putBack(b []byte) {
	o.held -= len(b)
	if o.reuse && cap(b) > 0 && len(o.free) == 0 {
		// One spare: the reads in flight hold the others, within the
		// budget, and a read takes the spare as it starts.
		o.free = append(o.free, b[:0])
	}
}

// signal wakes a read waiting for room.
func (o *objectReader) signal() {
	select {
	case o.released <- struct{}{}:
	default:
	}
}

// buffer returns memory to read an object into: a released object's with
// reuse, else nil (a new slice).
func (o *objectReader) buffer() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.free)
	if n == 0 {
		return nil
	}
	b := o.free[n-1]
	o.free = o.free[:n-1]
	return b
}

// readObject reads an immutable snapshot object, into buf's memory if it
// fits: without its version, which the loader does not need. One larger
// than b allows is refused as corrupt.
func (g *groupStore) readObject(ctx context.Context, key string, b objectBound, buf []byte) ([]byte, error) {
	var data []byte
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		data, e = g.st.Read(ctx, key, buf, b.max)
		return e
	})
	return data, tooLarge(err, key, b.what, b.max)
}

// next returns the next object; io.EOF after the last. The caller is done
// with the object it had before.
func (o *objectReader) next() ([]byte, error) {
	o.release()
	if o.i >= len(o.keys) {
		return nil, io.EOF
	}
	i := o.i
	o.i++
	if o.res == nil {
		data, err := o.g.readObject(o.ctx, o.keys[i], o.bound, o.buffer())
		o.mu.Lock()
		o.held += len(data)
		o.last = data
		o.mu.Unlock()
		return data, err
	}
	select {
	case r := <-o.res[i]:
		<-o.slots
		o.mu.Lock()
		o.last = r.data
		o.mu.Unlock()
		return r.data, r.err
	case <-o.ctx.Done():
		return nil, o.ctx.Err()
	}
}

// close stops the reads ahead and waits for them.
func (o *objectReader) close() {
	o.cancel()
	o.wg.Wait()
	o.mu.Lock()
	o.free, o.last = nil, nil // the memory goes with the reader
	o.mu.Unlock()
}

// partsReader is the concatenation of a base's parts.
type partsReader struct {
	or  *objectReader
	cur []byte
	key string // the part being read
	err error  // the first error reading a part
}

func (p *partsReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		if p.or.i >= len(p.or.keys) {
			return 0, io.EOF
		}
		p.key = p.or.keys[p.or.i]
		data, err := p.or.next()
		if err != nil {
			p.err = err
			return 0, err
		}
		p.cur = data
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// take hands out the next n bytes in place if the current part holds
// them: they stay valid until Read asks for the next part.
func (p *partsReader) take(n int) []byte {
	if n <= 0 || len(p.cur) < n {
		return nil
	}
	b := p.cur[:n:n]
	p.cur = p.cur[n:]
	return b
}

// snapOutcome is what writeSnapshot did.
type snapOutcome struct {
	end     uint64    // the end index of the snapshot now stored (0 if unknown)
	version string    // and its version
	man     *manifest // its manifest, if known
	prev    *manifest // the manifest it replaced, if it was one
}

// stats returns the size of the stored manifest.
func (o snapOutcome) stats() snapStats { return o.man.stats() }

func (m *manifest) stats() snapStats {
	if m == nil {
		return snapStats{}
	}
	n := 0
	for _, r := range m.Runs {
		n += len(r.Lasts)
	}
	return snapStats{base: m.Base.Bytes, segs: m.SegBytes, count: n}
}

// manifestStats returns the size of the manifest this store last read or
// wrote at version (zero if it is not one).
func (g *groupStore) manifestStats(version string) snapStats {
	v, m, _ := g.heldSnapshot()
	if v != version {
		return snapStats{}
	}
	return m.stats()
}

// writeSnapshot writes j (rule 7: every index it covers is confirmed) over
// the stored snapshot it names, by compare-and-swap: a base in parts and a
// manifest of it alone, or the entries from..end as segments and the
// stored manifest extended by them. It never writes over a snapshot that
// ends at or after j, nor over one written by a higher term. After the
// swap the caller deletes what the new manifest no longer references
// (collect). A base whose swap lost the race is swapped
// again once over the snapshot found; a segment is not (it follows the
// snapshot it was cut from). On error the outcome names the snapshot
// found, if one was read.
func (g *groupStore) writeSnapshot(ctx context.Context, j *snapJob, w snapWriter) (snapOutcome, error) {
	prevEnd, prevVersion := j.prevEnd, j.prevVersion
	hv, held, hterm := g.heldSnapshot()
	if hv != prevVersion {
		held, hterm = nil, 0
		if prevVersion != "" {
			// Not the snapshot this store knows: read it again.
			end, v, _, err := g.snapshotEnd(ctx)
			if err != nil {
				return snapOutcome{}, err
			}
			if v != prevVersion {
				_, m, _ := g.heldSnapshot()
				return snapOutcome{end: end, version: v, man: m}, fmt.Errorf("the stored snapshot changed (now ends at %d)", end)
			}
			_, held, hterm = g.heldSnapshot()
		}
	}
	var base *baseRef
	for attempt := 0; ; attempt++ {
		found := snapOutcome{end: prevEnd, version: prevVersion, man: held}
		switch {
		case prevEnd >= j.end:
			return found, fmt.Errorf("the stored snapshot already ends at %d", prevEnd)
		case hterm > w.term:
			return found, fmt.Errorf("the stored snapshot was written by term %d, above ours (%d)", hterm, w.term)
		}
		var m *manifest
		if j.base != nil {
			if base == nil {
				h := j.base.head
				if prevEnd > 0 {
					h.StartIndex = prevEnd + 1
				}
				h.Writer, h.WriterTerm, h.Nonce, h.Group = w.id, w.term, g.nonce(), g.group
				var prev uint64
				if held != nil {
					prev = held.Base.Bytes
				}
				b, err := g.writeBase(ctx, j.base, w, prev)
				if err != nil {
					return snapOutcome{}, err
				}
				base = &b
			}
			m = &manifest{End: base.Index, Base: *base}
		} else {
			if held == nil || held.End != j.from-1 {
				return found, fmt.Errorf("the stored snapshot (ending at %d) is not the manifest the segment from %d follows", prevEnd, j.from)
			}
			entries, err := g.segmentEntries(ctx, j)
			if err != nil {
				return snapOutcome{}, err
			}
			if m, err = g.writeSegments(ctx, held, entries, w); err != nil {
				return snapOutcome{}, err
			}
		}
		m.Group, m.Nonce, m.Writer, m.WriterTerm = g.group, g.nonce(), w.id, w.term
		v, err := g.writeManifest(ctx, m, prevVersion)
		if err == nil {
			return snapOutcome{end: m.End, version: v, man: m, prev: held}, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || store.IsAmbiguous(err) {
			return snapOutcome{}, err
		}
		// Another writer moved the snapshot: read it again.
		end, cv, _, rerr := g.snapshotEnd(ctx)
		if rerr != nil {
			return snapOutcome{}, rerr
		}
		_, held, hterm = g.heldSnapshot()
		prevEnd, prevVersion = end, cv
		if j.base == nil || attempt > 0 {
			return snapOutcome{end: end, version: cv, man: held}, err
		}
	}
}

// segmentEntries returns the entries j.from..j.end: those the leader's
// cache held, and before them those read from the log under rule 8.
func (g *groupStore) segmentEntries(ctx context.Context, j *snapJob) ([]*rsmpb.Entry, error) {
	to := j.end
	if len(j.entries) > 0 {
		to = j.entries[0].Index - 1
	}
	if to < j.from {
		return j.entries, nil
	}
	c, err := g.readLog(ctx, j.from, to, int(to-j.from+1))
	if err != nil {
		return nil, err
	}
	if c.superseded {
		return nil, fmt.Errorf("a snapshot ending at %d was written meanwhile", c.snapEnd)
	}
	if uint64(len(c.entries)) != to-j.from+1 {
		return nil, fmt.Errorf("confirmed entry %d is missing from the log", j.from+uint64(len(c.entries)))
	}
	return append(c.entries, j.entries...), nil
}
