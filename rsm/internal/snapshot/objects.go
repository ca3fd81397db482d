package snapshot

import (
	"context"
	"io"
	"sync"

	"github.com/tenure-io/tenure/rsm/internal/record"
)

// Reading the immutable objects a manifest references, in order, ahead of
// their reader within a byte budget, into reused memory.

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
	g      *Store
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

func (g *Store) openObjects(ctx context.Context, keys []string, bound objectBound, reuse bool, lend int) *objectReader {
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

// readObject reads an immutable snapshot object, into buf's memory if it
// fits: without its version, which the loader does not need. One larger
// than b allows is refused as corrupt.
func (g *Store) readObject(ctx context.Context, key string, b objectBound, buf []byte) ([]byte, error) {
	var data []byte
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		data, e = g.st.Read(ctx, key, buf, b.max)
		return e
	})
	return data, record.TooLarge(err, key, b.what, b.max)
}
