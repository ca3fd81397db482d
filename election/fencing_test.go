package election_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// pausingClock is the real clock (the bubble's under synctest) whose Now
// sleeps once, when told to: the goroutine that calls it is descheduled
// (GC, CPU starvation, SIGSTOP) at that point.
type pausingClock struct {
	clock.Real
	mu    sync.Mutex
	skip  int           // let this many calls pass first
	pause time.Duration // then sleep this long once
}

func (c *pausingClock) arm(skip int, pause time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skip, c.pause = skip, pause
}

func (c *pausingClock) Now() time.Time {
	c.mu.Lock()
	var pause time.Duration
	switch {
	case c.pause == 0:
	case c.skip > 0:
		c.skip--
	default:
		pause, c.pause = c.pause, 0
	}
	c.mu.Unlock()
	time.Sleep(pause)
	return time.Now()
}

// A renewal that comes back just before the deadline is accepted by the
// core, but if the loop reaches sync (which moves the fencing timer) only
// after the deadline, the timer has already fired: the leadership context
// is cancelled and OnStoppedLeading has run. The term must not go on
// without its work (a leader that does nothing while it keeps the lock):
// the member steps down and takes the lock again with a new term.
func TestFencingTimerFiringDuringAcceptedRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &pausingClock{}
		var armNext atomic.Bool
		st := store.New(memstore.New(), store.WithObserver(func(c store.Call) {
			// The first renewal after arming: let write() read the
			// clock, then pause the loop before sync.
			if c.Op == "put" && c.Cond == driver.IfMatch && c.Err == nil && armNext.CompareAndSwap(true, false) {
				clk.arm(1, 7*time.Second)
			}
		}))
		var started, stopped atomic.Int32
		e := newElector(t, st, "a", func(cfg *election.Config) {
			cfg.Clock = clk
			cfg.OnStartedLeading = func(ctx context.Context) { started.Add(1); <-ctx.Done() }
			cfg.OnStoppedLeading = func() { stopped.Add(1) }
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		term := e.Term()
		armNext.Store(true)
		time.Sleep(time.Minute)
		working := started.Load() - stopped.Load()
		if e.IsLeader() && (working != 1 || e.Term() == term) {
			t.Errorf("IsLeader, term %d (was %d), but OnStartedLeading ran %d times and OnStoppedLeading %d: no work runs for this term",
				e.Term(), term, started.Load(), stopped.Load())
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
