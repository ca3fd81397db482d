package rsm

import (
	"container/heap"
	"math/rand/v2"
	"runtime"
	"time"
)

// The simulator's scheduler: virtual time, an event queue and processes
// that run one at a time (the store is simstore_test.go's). Every
// choice is drawn from one seeded generator, and only one goroutine runs at
// a time (the scheduler hands control to a process and waits for it to
// block again), so a run is a function of its seed.

type simEvent struct {
	at  int64
	seq uint64
	f   func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }

func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}

func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *simQueue) Push(x any) { *q = append(*q, x.(simEvent)) }

func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simProc is a simulated thread: a goroutine that runs only while the
// scheduler waits for it, and blocks (returning control) on every store
// call, message or sleep.
type simProc struct {
	s       *sim
	resume  chan struct{}
	gen     uint64 // bumped at every block: a wake-up names the block it ends
	waiting bool
	killed  bool
	done    bool
}

type simSched struct {
	rng   *rand.Rand
	now   int64
	seq   uint64
	q     simQueue
	yield chan struct{}
	procs []*simProc
}

// clock is the virtual time as a time.Time, one tick a millisecond.
func (s *sim) clock() time.Time { return time.UnixMilli(s.now) }

func (s *sim) after(d int64, f func()) {
	s.seq++
	heap.Push(&s.q, simEvent{at: s.now + d, seq: s.seq, f: f})
}

// between draws a delay in [lo, hi].
func (s *sim) between(lo, hi int64) int64 { return lo + s.rng.Int64N(hi-lo+1) }

func (s *sim) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }

// spawn starts f as a process; it first runs at the current time.
func (s *sim) spawn(f func(p *simProc)) *simProc {
	p := &simProc{s: s, resume: make(chan struct{})}
	s.procs = append(s.procs, p)
	p.waiting = true
	gen := p.gen
	go func() {
		defer func() {
			p.done = true
			s.yield <- struct{}{}
		}()
		<-p.resume
		if p.killed {
			return
		}
		f(p)
	}()
	s.after(0, func() { s.wake(p, gen) })
	return p
}

// wake runs p until it blocks again, if it is still in the block gen.
func (s *sim) wake(p *simProc, gen uint64) {
	if !p.waiting || p.gen != gen || p.done {
		return
	}
	p.waiting = false
	p.resume <- struct{}{}
	<-s.yield
}

// block gives control back to the scheduler until the wake-up armed by arm
// fires. A killed process unwinds here (runtime.Goexit), so simulated
// code needs no error path for its own death.
func (p *simProc) block(arm func(wake func())) {
	if p.killed {
		runtime.Goexit()
	}
	p.gen++
	gen := p.gen
	arm(func() { p.s.wake(p, gen) })
	p.waiting = true
	p.s.yield <- struct{}{}
	<-p.resume
	if p.killed {
		runtime.Goexit()
	}
}

func (p *simProc) sleep(d int64) { p.block(func(w func()) { p.s.after(d, w) }) }

// kill ends p at its current block.
func (p *simProc) kill() {
	if p.killed || p.done {
		return
	}
	p.killed = true
	if p.waiting {
		gen := p.gen
		p.s.after(0, func() { p.s.wake(p, gen) })
	}
}

func heapPop(q *simQueue) simEvent { return heap.Pop(q).(simEvent) }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
