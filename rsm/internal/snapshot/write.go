package snapshot

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// Writing a snapshot (rule 7): a base in parts or segments, each under a
// name no other write uses, then the manifest by compare-and-swap, never
// backwards; then collecting what no manifest can reference any more.

// Write writes j (rule 7: every index it covers is confirmed) over the
// stored snapshot it names, by compare-and-swap: a base in parts and a
// manifest of it alone, or the entries From..End as segments and the
// stored manifest extended by them. After the swap the caller deletes what
// the new manifest no longer references (Collect). A base whose swap lost
// the race is swapped again once over the snapshot found; a segment is not
// (it follows the snapshot it was cut from). On error the outcome names
// the snapshot found, if one was read.
//
// Rule 7, the snapshot only moves forward (docs/rsm.md): it never writes
// over a snapshot that ends at or after j, nor over one written by a
// higher term, and every object the manifest references is written, under
// a name no other write uses, before the manifest's swap.
func (g *Store) Write(ctx context.Context, j *Job, w Writer) (Outcome, error) {
	prevEnd, prevVersion := j.PrevEnd, j.PrevVersion
	hv, held, hterm := g.Held()
	if hv != prevVersion {
		held, hterm = nil, 0
		if prevVersion != "" {
			// Not the snapshot this store knows: read it again.
			end, v, _, err := g.End(ctx)
			if err != nil {
				return Outcome{}, err
			}
			if v != prevVersion {
				_, m, _ := g.Held()
				return Outcome{End: end, Version: v, Man: m}, fmt.Errorf("the stored snapshot changed (now ends at %d)", end)
			}
			_, held, hterm = g.Held()
		}
	}
	var base *BaseRef
	for attempt := 0; ; attempt++ {
		found := Outcome{End: prevEnd, Version: prevVersion, Man: held}
		switch {
		case prevEnd >= j.End:
			return found, fmt.Errorf("the stored snapshot already ends at %d", prevEnd)
		case hterm > w.Term:
			return found, fmt.Errorf("the stored snapshot was written by term %d, above ours (%d)", hterm, w.Term)
		}
		var m *Manifest
		if j.Base != nil {
			if base == nil {
				h := j.Base.Head
				if prevEnd > 0 {
					h.StartIndex = prevEnd + 1
				}
				h.Writer, h.WriterTerm, h.Nonce, h.Group = w.ID, w.Term, g.nonces(), g.group
				var prev uint64
				if held != nil {
					prev = held.Base.Bytes
				}
				b, err := g.writeBase(ctx, j.Base, w, prev)
				if err != nil {
					return Outcome{}, err
				}
				base = &b
			}
			m = &Manifest{End: base.Index, Base: *base}
		} else {
			if held == nil || held.End != j.From-1 {
				return found, fmt.Errorf("the stored snapshot (ending at %d) is not the manifest the segment from %d follows", prevEnd, j.From)
			}
			entries, err := g.segmentEntries(ctx, j)
			if err != nil {
				return Outcome{}, err
			}
			if m, err = g.writeSegments(ctx, held, entries, w); err != nil {
				return Outcome{}, err
			}
		}
		m.Group, m.Nonce, m.Writer, m.WriterTerm = g.group, g.nonces(), w.ID, w.Term
		v, err := g.writeManifest(ctx, m, prevVersion)
		if err == nil {
			return Outcome{End: m.End, Version: v, Man: m, Prev: held}, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || store.IsAmbiguous(err) {
			return Outcome{}, err
		}
		// Another writer moved the snapshot: read it again.
		end, cv, _, rerr := g.End(ctx)
		if rerr != nil {
			return Outcome{}, rerr
		}
		_, held, hterm = g.Held()
		prevEnd, prevVersion = end, cv
		if j.Base == nil || attempt > 0 {
			return Outcome{End: end, Version: cv, Man: held}, err
		}
	}
}

// segmentEntries returns the entries j.From..j.End: those the leader's
// cache held, and before them those read from the log under rule 8
// (Options.ReadLog).
func (g *Store) segmentEntries(ctx context.Context, j *Job) ([]*rsmpb.Entry, error) {
	to := j.End
	if len(j.Entries) > 0 {
		to = j.Entries[0].Index - 1
	}
	if to < j.From {
		return j.Entries, nil
	}
	entries, err := g.readLog(ctx, j.From, to)
	if err != nil {
		return nil, err
	}
	return append(entries, j.Entries...), nil
}

// Outcome is what Write did.
type Outcome struct {
	End     uint64    // the end index of the snapshot now stored (0 if unknown)
	Version string    // and its version
	Man     *Manifest // its manifest, if known
	Prev    *Manifest // the manifest it replaced, if it was one
}

// Stats returns the size of the stored manifest.
func (o Outcome) Stats() Stats { return o.Man.Stats() }

// Stats returns the size of the manifest this store last read or
// wrote at version (zero if it is not one).
func (g *Store) Stats(version string) Stats {
	v, m, _ := g.Held()
	if v != version {
		return Stats{}
	}
	return m.Stats()
}

// writeBase writes c as a base in parts of at most partMax bytes, each
// created under a name no other write uses, streaming: no more than one
// part is held besides the state. prev is the previous base's size, if
// known: the part's buffer starts that large (up to a part), not grown
// to it.
func (g *Store) writeBase(ctx context.Context, c *Captured, w Writer, prev uint64) (BaseRef, error) {
	b := BaseRef{Index: c.Head.EndIndex, Term: w.Term, Nonce: hex.EncodeToString(g.nonces())}
	max := g.partMax
	if max <= 0 {
		max = basePartMax
	}
	pw := newPartWriter(func(i int, data []byte) error {
		return g.createObject(ctx, basePartKey(g.group, b, i), data)
	}, max, prev)
	if err := Encode(pw, c); err != nil {
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
func (g *Store) createObject(ctx context.Context, key string, data []byte) error {
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
func (g *Store) writeSegments(ctx context.Context, m *Manifest, entries []*rsmpb.Entry, w Writer) (*Manifest, error) {
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
		if err := g.createObject(ctx, segmentKey(g.group, w.Term, w.Nonce, last), data); err != nil {
			return nil, err
		}
		m = m.withSegment(w.Term, w.Nonce, last, len(data))
		entries = entries[n:]
	}
	return m, nil
}

// writeManifest replaces the snapshot at version prev ("" for none) with
// m by compare-and-swap; a manifest above manifestMax, which no reader
// would accept, is not written (bounded reads).
func (g *Store) writeManifest(ctx context.Context, m *Manifest, prev string) (string, error) {
	cond := store.IfAbsent()
	if prev != "" {
		cond = store.IfMatch(prev)
	}
	data := encodeManifest(m)
	if len(data) > manifestMax {
		return "", record.RefuseWrite(g.key(Key), "manifest", len(data), manifestMax)
	}
	v, err := store.PutResolved(ctx, g.st, g.key(Key), data, cond, g.resolve(func(stored []byte) bool {
		o, derr := DecodeManifest(stored)
		return derr == nil && bytes.Equal(o.Nonce, m.Nonce)
	}, manifestMax))
	if err == nil {
		g.rememberSnap(v, m.End, m, m.WriterTerm)
	}
	return v, err
}

// Collect deletes snapshot objects no manifest can reference any more,
// after a swap from old (nil: none, or not a manifest) to cur by a writer
// of term: what old referenced and cur does not, and if sweep, every
// object under {group}/snap/ that cur does not reference and whose
// writer's term is not above term (leftovers of failed writes and of
// earlier leaders; a newer leader's objects may be about to be
// referenced, and an older leader can no longer swap the manifest: cur
// carries term, and no writer swaps over a manifest of a higher term). It
// returns the number of objects deleted of each kind. This is rule 7's
// collection (docs/rsm.md): a reader whose manifest's objects it deleted
// starts over (ErrMoved, rule 8).
func (g *Store) Collect(ctx context.Context, old, cur *Manifest, term uint64, sweep bool) (dropped, swept int, err error) {
	keep := cur.Objects()
	var del []string
	if old != nil {
		for k := range old.Objects() {
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
func (g *Store) each(n int, f func(i int)) {
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
func (g *Store) listSnapObjects(ctx context.Context) ([]string, error) {
	prefix := g.key(Dir)
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
