package rsm

import (
	"sync"
	"sync/atomic"
)

// replicaOwner is the goroutine that owns a node's replica: the state
// machines, their session table and the index applied. No other goroutine
// touches the replica, and no lock guards it: the others send the owner a
// job (do) and wait for it to end.
//
//   - The leader's loop: apply an entry it wrote, answer a batch of
//     reads, capture a base for a snapshot.
//   - The run goroutine (join, follow, catch-up, takeover): apply the
//     entries a catch-up or a seal read from the log, load a snapshot,
//     empty the replica.
//   - The Synchronize handler: apply the entries a heartbeat carries.
//   - Status: the index applied.
//
// The store reads and writes that produce what is applied stay with the
// sender, with one exception: a snapshot's load. Its base and then its
// segments' entries must reach the replica with nothing in between (a
// heartbeat's entries applied mid-load would be overwritten by the rest
// of the base), so the load is one job that streams from the store, and
// the others wait for it. The waits of the join and follow loop — a
// Follow call, an attempt's rank delay, a takeover's store reads and seal
// write — are not the owner's: they happen on the run goroutine, so a
// heartbeat is answered during them.
//
// A job runs to its end, one at a time, in the order the owner takes
// them; a job must not call do (it would wait for itself). The owner
// starts with the node and ends after the node's goroutines have (close,
// called by Leave's finish): the run goroutine and the leader's loop
// always find it. Only a request arriving after that (a late RPC, Status)
// finds it gone: do reports false and index the last index applied.
type replicaOwner struct {
	jobs    chan replicaJob
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when the goroutine has ended
	once    sync.Once
	// applied is the index applied after the last job, for index once the
	// goroutine has ended.
	applied atomic.Uint64
}

type replicaJob struct {
	f    func(*replica)
	done chan struct{}
}

// startReplica starts r's owner. Every replica use goes through it from
// now on.
func startReplica(r *replica) *replicaOwner {
	o := &replicaOwner{jobs: make(chan replicaJob), stop: make(chan struct{}), stopped: make(chan struct{})}
	o.applied.Store(r.applied)
	go o.run(r)
	return o
}

func (o *replicaOwner) run(r *replica) {
	defer close(o.stopped)
	if assertOwner != nil {
		r.owner = assertOwner()
	}
	for {
		select {
		case j := <-o.jobs:
			j.f(r)
			o.applied.Store(r.applied)
			close(j.done)
		case <-o.stop:
			return
		}
	}
}

// do runs f on the replica's goroutine and returns when f has returned. It
// reports false, without running f, if the owner has ended (the node is
// gone).
func (o *replicaOwner) do(f func(r *replica)) bool {
	done := make(chan struct{})
	select {
	case o.jobs <- replicaJob{f: f, done: done}:
	case <-o.stopped:
		return false
	}
	<-done
	return true
}

// index returns the index applied: after every job sent before it, once
// the one running has ended.
func (o *replicaOwner) index() uint64 {
	var i uint64
	if !o.do(func(r *replica) { i = r.applied }) {
		return o.applied.Load()
	}
	return i
}

// close ends the owner and waits for it; later calls do nothing. The
// node's goroutines must have ended.
func (o *replicaOwner) close() {
	o.once.Do(func() { close(o.stop) })
	<-o.stopped
}

// assertOwner is nil but in the package's tests: there it returns, on the
// owner's goroutine, a check that the replica calls at every use, which
// fails unless it runs on that goroutine.
var assertOwner func() (check func())
