package election

import (
	"log/slog"
	"sync"
)

// notifier runs callbacks in order on its own goroutine, so a slow or
// blocking callback never delays a renewal, and no lock is held while a
// callback runs.
type notifier struct {
	log   *slog.Logger
	mu    sync.Mutex
	queue []func()
	ready chan struct{}
	done  chan struct{}
	quit  bool
}

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log, ready: make(chan struct{}, 1), done: make(chan struct{})}
	go n.run()
	return n
}

func (n *notifier) add(f func()) {
	n.mu.Lock()
	n.queue = append(n.queue, f)
	n.mu.Unlock()
	select {
	case n.ready <- struct{}{}:
	default:
	}
}

func (n *notifier) run() {
	defer close(n.done)
	for range n.ready {
		for {
			n.mu.Lock()
			if len(n.queue) == 0 {
				quit := n.quit
				n.mu.Unlock()
				if quit {
					return
				}
				break
			}
			f := n.queue[0]
			n.queue = n.queue[1:]
			n.mu.Unlock()
			if r := callSafely(f); r != nil {
				n.log.Error("OnNewLeader panicked", "panic", r)
			}
		}
	}
}

// close runs what is queued, then stops the goroutine and waits for it.
func (n *notifier) close() {
	n.mu.Lock()
	n.quit = true
	n.mu.Unlock()
	select {
	case n.ready <- struct{}{}:
	default:
	}
	<-n.done
}
