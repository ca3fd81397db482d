package election_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
)

func withPriority(p int) func(*election.Config) {
	return func(cfg *election.Config) { cfg.Priority = p }
}

// handoverBound: the asking member's copy is found at the leader's next
// renewal (within FrequentInterval), the release follows once the work has
// returned, and the asking member reads every FrequentInterval/10.
const handoverBound = election.DefaultFrequentInterval + election.DefaultFrequentInterval/10*12/10 + time.Second

func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		name   string
		joins  []int // priorities of the members that join the leader (priority 0)
		change bool  // whether one of them takes over
	}{
		{"preferred member takes over once", []int{1}, true},
		{"equal priorities never hand over", []int{0, 0}, false},
		{"two preferred of equal priority: exactly one takes over", []int{2, 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, election.Config{})
				c.add("a", nil)
				c.waitLeader(time.Minute)
				joined := time.Now()
				for i, p := range tc.joins {
					c.add(string(rune('b'+i)), withPriority(p))
				}
				time.Sleep(30 * time.Minute)
				c.stopAll()
				n := c.checkOverlap()
				want := 1
				if tc.change {
					want = 2
				}
				if n != want {
					t.Fatalf("%d terms; want %d (no flapping)", n, want)
				}
				if tc.change {
					iv := c.firstAfter("a", joined)
					if iv == nil || iv.start.Sub(joined) > defPollMax+handoverBound {
						t.Fatalf("the preferred member took over at %v; want within %v of joining", iv, defPollMax+handoverBound)
					}
				}
			})
		})
	}
}

// TestPriorityWorkThatDoesNotReturn: asked to hand over, a leader whose
// work ignores its cancelled context never releases the lock; the
// preferred member takes it only once it has lapsed, and never while the
// old leader believes it leads.
func TestPriorityWorkThatDoesNotReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		stuck := make(chan struct{})
		var cancelledAt atomic.Int64
		c.add("a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				<-ctx.Done()
				cancelledAt.Store(time.Now().UnixNano())
				<-stuck
			}
		})
		c.waitLeader(time.Minute)
		c.add("b", withPriority(1))
		time.Sleep(2 * time.Minute)
		if rec, _ := c.lockRecord(); rec.Released {
			t.Fatal("released the lock while the work was still running")
		}
		iv := c.firstAfter("a", time.Time{})
		cancelled := time.Unix(0, cancelledAt.Load())
		if cancelledAt.Load() == 0 || iv == nil {
			t.Fatalf("handover did not happen: cancelled %v, new term %v", cancelled, iv)
		}
		if iv.start.Sub(cancelled) < election.DefaultLeaderTimeout-election.DefaultRenewDeadline {
			t.Fatalf("b took over %v after a's work was cancelled: before the lock could lapse", iv.start.Sub(cancelled))
		}
		close(stuck)
		c.stopAll()
		c.checkOverlap()
	})
}
