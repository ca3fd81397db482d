package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// Loading a replica from a manifest: the base streamed part by part and
// checked chunk by chunk, then the segments' entries, decoded ahead by
// workers and lent to Borrowers; a reader whose manifest moved on starts
// over (ErrMoved), and an object missing under an unchanged manifest is
// refused (rule 12).

// Load brings a replica whose state is at applied up to the state
// snap (a manifest) describes: its base, streamed part by part into
// restore (which must call finish on the stream), unless applied has
// reached the base already; then the entries of its segments after
// applied, handed to apply in index order with what the Preparers
// returned for their commands (nil if none). Objects are read once each, up
// to par at a time. An object missing while the manifest is unchanged is
// refused (a *CorruptError naming it, rule 12); missing because the
// manifest has moved on since it was read, ErrMoved. An object
// refused as corrupt by an earlier load of the same manifest is refused
// again unread while a listing shows it unchanged (refusedObject).
func (g *Store) Load(ctx context.Context, snap *Stored, applied uint64,
	restore func(cs *Stream) error, apply func(e *rsmpb.Entry, prepared []any) error) error {
	if err := g.stillRefused(ctx, snap, applied); err != nil {
		return err
	}
	err := g.loadManifestOnce(ctx, snap, applied, restore, apply)
	var c *record.CorruptError
	if errors.As(err, &c) && !errors.Is(c.Err, record.ErrMissing) && c.Key != g.key(Key) {
		g.refuseObject(ctx, snap.Version, c)
	}
	return err
}

// refusedObject is a base part or segment a load refused as corrupt: the
// manifest version that referenced it, its own version as listed after
// the refusal, and the error.
type refusedObject struct {
	snapVersion, key, version string
	err                       *record.CorruptError
}

// refuseObject remembers c's object, refused by a load of the manifest
// at snapVersion, at the version a listing gives it now (not at all if
// the listing fails or finds nothing: the next load reads it again).
func (g *Store) refuseObject(ctx context.Context, snapVersion string, c *record.CorruptError) {
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
func (g *Store) stillRefused(ctx context.Context, snap *Stored, applied uint64) error {
	g.mu.Lock()
	r := g.refusedObj
	g.mu.Unlock()
	if r == nil || r.snapVersion != snap.Version {
		return nil
	}
	m := snap.Man
	reads := applied < m.Base.Index && slices.Contains(m.BaseKeys(), r.key)
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

// loadManifestOnce is Load's load.
func (g *Store) loadManifestOnce(ctx context.Context, snap *Stored, applied uint64,
	restore func(cs *Stream) error, apply func(e *rsmpb.Entry, prepared []any) error) error {
	m := snap.Man
	var baseRead uint64 // the base's bytes, if this load restores it
	if applied < m.Base.Index {
		baseRead = m.Base.Bytes
		keys := m.BaseKeys()
		or := g.openObjects(ctx, keys, objectBound{"base part", int64(min(basePartObjectMax, max(m.Base.Bytes, 1)))}, true, 0)
		pr := &partsReader{or: or}
		var decodeErr error
		err := func() error {
			cs, err := openChunked(pr)
			if err == nil && (cs.Head.EndIndex != m.Base.Index || (cs.Head.Group != "" && cs.Head.Group != g.group)) {
				err = fmt.Errorf("base of group %q ending at %d, referenced as %q at %d", cs.Head.Group, cs.Head.EndIndex, g.group, m.Base.Index)
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
			return &record.CorruptError{Key: pr.key, Err: decodeErr}
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
// also prepares the commands of Preparers (Options.PrepareFrom). Held alone, a
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

// DefaultPrepareFrom is the bytes of a load (base and segments) from which
// it prepares commands (Preparer): where it holds a segment ahead of the
// one applied, the one place preparing saves time.
const DefaultPrepareFrom = lendTwoFrom

// segFeed hands out the decoded entries of a manifest's segments in
// order; with reads ahead (par > 0) they are read and decoded in a
// goroutine of their own, up to segmentsAhead ahead of next, each by up
// to decodeWorkers goroutines: a cold start decodes as many bytes as it
// applies, and decoding is the larger part. With g.borrow the entries'
// commands are parts of their segment's memory, which is read into again
// only once the entries are applied (the caller asked for the next ones).
type segFeed struct {
	g      *Store
	ctx    context.Context
	cancel context.CancelFunc
	snap   *Stored
	segs   []segRef
	or     *objectReader
	i      int             // par 0: the next segment
	out    chan segDecoded // par > 0
	wg     sync.WaitGroup
	lent   []byte              // with g.borrow: the segment whose entries next handed out last
	prep   map[string]Preparer // the machines whose commands are prepared (g.prep, for a large load)
}

type segDecoded struct {
	Entries  []*rsmpb.Entry
	prepared [][]any // with f.prep: per entry, what Prepare returned for each command
	data     []byte  // the segment, with g.borrow
	err      error
}

// decodeWorkers is how many goroutines decode one segment's entries.
func decodeWorkers() int { return min(4, runtime.GOMAXPROCS(0)) }

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
		return segDecoded{data: data, err: &record.CorruptError{Key: s.key, Err: err}}
	}
	return segDecoded{Entries: entries, prepared: prepared, data: data}
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
		return d.Entries, d.prepared, d.err
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
		return d.Entries, d.prepared, d.err
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

// startSegments starts the load of segs, the segments of snap to apply;
// baseRead is the bytes of the base the load restored before them (0 if
// none): with the segments', the size of the load.
func (g *Store) startSegments(ctx context.Context, snap *Stored, segs []segRef, baseRead uint64) *segFeed {
	ctx, cancel := context.WithCancel(ctx)
	keys := make([]string, len(segs))
	for i, s := range segs {
		keys[i] = s.key
	}
	// Lent, a segment is given back once its entries are applied, not
	// when the decoder reads the next; and the next is read once there
	// is room for it (lendAhead).
	var segBytes uint64
	if snap.Man != nil {
		segBytes = snap.Man.SegBytes
	}
	load := segBytes + baseRead
	reuse := segBytes >= reuseSegmentsFrom
	lend := 0
	if g.borrow {
		lend = lendAhead(load)
	}
	// A segment is bounded by what a writer puts in one, and by the
	// segments' bytes all together.
	bound := objectBound{"segment", int64(g.segMax)}
	if snap.Man != nil {
		bound.max = int64(min(uint64(bound.max), max(snap.Man.SegBytes, 1)))
	}
	f := &segFeed{g: g, ctx: ctx, cancel: cancel, snap: snap, segs: segs, or: g.openObjects(ctx, keys, bound, reuse, lend)}
	if load >= g.prepFrom {
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

// objectErr reports an error reading a referenced object: if it is
// missing, the snapshot key is listed again; a manifest changed since snap
// was read gives ErrMoved, an unchanged one a *CorruptError
// naming the object (an operator deleted it, rule 12).
func (g *Store) objectErr(ctx context.Context, snap *Stored, key string, err error) error {
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	v, lerr := g.snapshotVersion(ctx)
	if lerr != nil {
		return lerr
	}
	if v != snap.Version {
		return ErrMoved
	}
	return &record.CorruptError{Key: key, Err: fmt.Errorf("%w: the snapshot manifest ending at %d references it", record.ErrMissing, snap.EndIndex)}
}

// snapshotVersion lists the snapshot's key: its version, "" if absent.
func (g *Store) snapshotVersion(ctx context.Context) (string, error) {
	key := g.key(Key)
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
