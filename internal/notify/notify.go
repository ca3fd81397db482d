// Package notify runs callbacks in order on one goroutine of their own, so
// that a slow or blocking callback never delays the loop that queues it
// (an election's renewals, a coordinator's rounds), and no lock is held
// while a callback runs.
package notify

import (
	"log/slog"
	"sync"
	"time"
)

// Queue is an ordered queue of callbacks with its own goroutine. It is safe
// for concurrent use.
type Queue struct {
	log   *slog.Logger
	mu    sync.Mutex
	queue []func()
	ready chan struct{}
	done  chan struct{}
	quit  bool
}

// New starts a queue; a callback that panics is logged to log.
func New(log *slog.Logger) *Queue {
	q := &Queue{log: log, ready: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Add queues f.
func (q *Queue) Add(f func()) {
	q.mu.Lock()
	q.queue = append(q.queue, f)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *Queue) run() {
	defer close(q.done)
	for range q.ready {
		for {
			q.mu.Lock()
			if len(q.queue) == 0 {
				quit := q.quit
				q.mu.Unlock()
				if quit {
					return
				}
				break
			}
			f := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()
			if r := Safely(f); r != nil {
				q.log.Error("callback panicked", "panic", r)
			}
		}
	}
}

// Close runs what is queued, then stops the goroutine and waits for it.
// It is idempotent.
func (q *Queue) Close() {
	q.mu.Lock()
	if q.quit {
		q.mu.Unlock()
		<-q.done
		return
	}
	q.quit = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	<-q.done
}

// CloseWithin is Close with a bound, for owners whose own shutdown must not
// wait on a callback that blocks: it runs what is queued until timeout
// fires, then drops what has not started and returns false without waiting
// for a callback still running (the goroutine ends when that returns).
func (q *Queue) CloseWithin(timeout <-chan time.Time) bool {
	q.mu.Lock()
	q.quit = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	select {
	case <-q.done:
		return true
	case <-timeout:
		q.mu.Lock()
		q.queue = nil
		q.mu.Unlock()
		return false
	}
}

// Safely calls f and returns what it panicked with, or nil.
func Safely(f func()) (recovered any) {
	defer func() { recovered = recover() }()
	f()
	return nil
}
