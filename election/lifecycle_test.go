package election_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func newElector(t *testing.T, st *store.Store, id string, change func(*election.Config)) *election.Elector {
	t.Helper()
	cfg := election.Config{Store: st, ServerID: id, Logger: quietLogger(t)}
	if change != nil {
		change(&cfg)
	}
	e, err := election.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDoubleStartAndStartAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newElector(t, store.New(memstore.New()), "a", nil)
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); !errors.Is(err, election.ErrAlreadyStarted) {
			t.Fatalf("second Start = %v; want ErrAlreadyStarted", err)
		}
		if err := e.Run(t.Context()); !errors.Is(err, election.ErrAlreadyStarted) {
			t.Fatalf("Run after Start = %v; want ErrAlreadyStarted", err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatalf("second Stop = %v", err)
		}
		if err := e.Start(t.Context()); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("Start after Stop = %v; want ErrStopped", err)
		}
		if err := e.Run(t.Context()); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("Run after Stop = %v; want ErrStopped", err)
		}
		never := newElector(t, store.New(memstore.New()), "b", nil)
		if err := never.Stop(t.Context()); err != nil {
			t.Fatalf("Stop before Start = %v", err)
		}
		if err := never.Run(t.Context()); !errors.Is(err, election.ErrStopped) {
			t.Fatalf("Run after Stop = %v; want ErrStopped", err)
		}
		if e.IsLeader() {
			t.Fatal("leader after Stop")
		}
	})
}

func TestParentContextCancelledWithoutStop(t *testing.T) {
	// shardcoordinator kept reporting leader with an expired lease when
	// its parent context was cancelled without Stop.
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		e := newElector(t, store.New(inner), "a", nil)
		ctx, cancel := context.WithCancel(t.Context())
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait()
		if e.IsLeader() {
			t.Fatal("IsLeader is true after the parent context was cancelled")
		}
		data, _, err := store.New(inner).Get(t.Context(), election.DefaultLockfilePath)
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ := election.DecodeRecord(data); !rec.Released {
			t.Fatalf("the lock was not released: %+v", rec)
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStopWaitsForWorkBeforeRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		raw := store.New(inner)
		var workReturned atomic.Bool
		releasedEarly := make(chan bool, 1)
		e := newElector(t, store.New(inner), "a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				<-ctx.Done()
				// The application takes 3 s to wind down; the lock must
				// stay held (not released) all that time.
				time.Sleep(3 * time.Second)
				data, _, _ := raw.Get(context.Background(), election.DefaultLockfilePath)
				rec, _ := election.DecodeRecord(data)
				releasedEarly <- rec.Released
				workReturned.Store(true)
			}
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !workReturned.Load() {
			t.Fatal("Stop returned before OnStartedLeading did")
		}
		if <-releasedEarly {
			t.Fatal("the lock was released while OnStartedLeading was still running")
		}
		data, _, _ := raw.Get(context.Background(), election.DefaultLockfilePath)
		if rec, _ := election.DecodeRecord(data); !rec.Released {
			t.Fatal("the lock was not released after the work returned")
		}
	})
}

func TestStopDoesNotHangOnSlowRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		e := newElector(t, store.New(fs), "a", nil)
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		fs.SetPartition(faultstore.BlackHoled)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := e.Stop(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("Stop on a black-holed store = %v after %v; want the caller's deadline after 2 s", err, time.Since(start))
		}
		if e.IsLeader() {
			t.Fatal("still leader after Stop")
		}
		// The release gives up on its own, bounded by RenewDeadline.
		if err := e.Stop(context.Background()); err != nil {
			t.Fatalf("waiting for the background release: %v", err)
		}
	})
}

// TestStopDuringAWriteWarnsNothing: a write the stop cuts short (the
// store probe, an acquisition, a renewal) is not a failure to warn about;
// a clean stop logs nothing at WARN or above, and the lock ends released.
func TestStopDuringAWriteWarnsNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		op    faultstore.Op
		probe bool
	}{
		{"probe", faultstore.OpPutCreate, true},
		{"acquire", faultstore.OpPutCreate, false},
		{"renew", faultstore.OpPutCAS, false},
	} {
		op := c.op
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := memstore.New()
				fs := faultstore.New(inner)
				var logs lockedBuffer
				e := newElector(t, store.New(fs), "a", func(cfg *election.Config) {
					cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
					cfg.SkipProbe = !c.probe
				})
				if op == faultstore.OpPutCreate {
					fs.SetLatency(op, faultstore.Fixed(time.Second))
				}
				if err := e.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				if op == faultstore.OpPutCAS {
					if err := e.WaitForLeadership(t.Context()); err != nil {
						t.Fatal(err)
					}
					fs.SetLatency(op, faultstore.Fixed(time.Hour))
					time.Sleep(election.DefaultFrequentInterval + time.Millisecond) // a renewal is in flight
					fs.SetLatency(op, nil)                                          // the release is not slowed
				} else {
					time.Sleep(500 * time.Millisecond) // the create-if-absent is in flight
				}
				if err := e.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				if got := logs.String(); got != "" {
					t.Fatalf("a clean stop during a write logged:\n%s", got)
				}
				data, _, err := store.New(inner).Get(t.Context(), election.DefaultLockfilePath)
				if err == nil {
					if rec, _ := election.DecodeRecord(data); !rec.Released {
						t.Fatalf("the lock is held after Stop: %+v", rec)
					}
				} else if !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestStopRacingAcquire(t *testing.T) {
	// shardcoordinator's Stop could miss an acquisition in flight and
	// leave the lock held until expiry. Here the acquisition is slow and
	// Stop lands in the middle of it: the lock must end released.
	for _, delay := range []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := memstore.New()
				fs := faultstore.New(inner)
				fs.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(delay))
				e := newElector(t, store.New(fs), "a", nil)
				if err := e.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(delay / 2) // the create-if-absent is in flight
				if err := e.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				data, _, err := store.New(inner).Get(t.Context(), election.DefaultLockfilePath)
				if err == nil {
					if rec, _ := election.DecodeRecord(data); !rec.Released {
						t.Fatalf("Stop during an acquisition left the lock held: %+v", rec)
					}
				} else if !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
				if e.IsLeader() {
					t.Fatal("leader after Stop")
				}
			})
		})
	}
}

func TestPanicInLoopDemotesAndReports(t *testing.T) {
	// shardcoordinator's loop panic left IsLeader true forever.
	synctest.Test(t, func(t *testing.T) {
		var stopped atomic.Int32
		var armed atomic.Bool
		e := newElector(t, store.New(memstore.New()), "a", func(cfg *election.Config) {
			cfg.OnStoppedLeading = func() { stopped.Add(1) }
		})
		election.SetHookStep(e, func() {
			if armed.Load() {
				panic("injected")
			}
		})
		done := make(chan error, 1)
		go func() { done <- e.Run(context.Background()) }()
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		err := <-done
		var pe *election.PanicError
		if !errors.As(err, &pe) || pe.Value != "injected" {
			t.Fatalf("Run = %v; want a PanicError", err)
		}
		if e.IsLeader() {
			t.Fatal("IsLeader after the loop panicked")
		}
		if stopped.Load() != 1 {
			t.Fatalf("OnStoppedLeading called %d times", stopped.Load())
		}
		if st := e.Status(); st.Leader || st.LastError == "" {
			t.Fatalf("Status after a panic: %+v", st)
		}
	})
}

func TestCallbackPanicsAreContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		a := c.add("a", func(cfg *election.Config) {
			cfg.OnNewLeader = func(string, string, uint64) { panic("in OnNewLeader") }
		})
		c.waitLeader(time.Minute)
		time.Sleep(time.Minute)
		if !a.e.IsLeader() {
			t.Fatal("a panic in OnNewLeader cost the leadership")
		}
		c.stopAll()
	})
}

func TestOnNewLeaderInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		a := c.add("a", nil)
		c.waitLeader(time.Minute)
		b := c.add("b", nil)
		time.Sleep(time.Minute)
		a.stop(t)
		c.waitLeader(2 * time.Minute)
		time.Sleep(time.Second)
		b.stop(t)
		want := []string{"a@1", "b@2"}
		for _, m := range []*member{a, b} {
			m.mu.Lock()
			got := m.newLead
			m.mu.Unlock()
			if m == a {
				if len(got) < 1 || got[0] != "a@1" {
					t.Errorf("a saw leaders %v", got)
				}
				continue
			}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("b saw leaders %v; want %v", got, want)
			}
		}
		c.checkOverlap()
	})
}

func TestPanicInOnStartedLeadingEndsTheTerm(t *testing.T) {
	// A leader whose work panicked must not keep the lock with no work
	// running: it steps down, and the next term runs the work again.
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		e := newElector(t, store.New(memstore.New()), "a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				if calls.Add(1) == 1 {
					panic("first term's work fails")
				}
				<-ctx.Done()
			}
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if !e.IsLeader() || e.Term() < 2 || calls.Load() != 2 {
			t.Fatalf("after a panic in the work: leader %v, term %d, OnStartedLeading called %d times; want a new term running the work",
				e.IsLeader(), e.Term(), calls.Load())
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTermOfLeadershipContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan uint64, 1)
		e := newElector(t, store.New(memstore.New()), "a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				term, ok := election.TermOf(ctx)
				if !ok {
					term = 0
				}
				got <- term
				<-ctx.Done()
			}
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if term := <-got; term != 1 {
			t.Fatalf("TermOf(leadership ctx) = %d; want 1", term)
		}
		if _, ok := election.TermOf(t.Context()); ok {
			t.Fatal("TermOf found a term in an unrelated context")
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStopWaitsForTheEndedTermsWork: a term is fenced (the store is
// unreachable past RenewDeadline) while its work takes 10 s to return; Stop
// comes in the meantime. The lock must be released only after that work has
// returned, although the term it belongs to had already ended; and no new
// term may be taken while it runs.
func TestStopWaitsForTheEndedTermsWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		raw := store.New(inner)
		fs := faultstore.New(inner)
		type ret struct {
			term     uint64
			released bool
			maxTerm  uint64
		}
		returns := make(chan ret, 10)
		e := newElector(t, store.New(fs), "a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				term, _ := election.TermOf(ctx)
				<-ctx.Done()
				time.Sleep(10 * time.Second)
				data, _, _ := raw.Get(context.Background(), election.DefaultLockfilePath)
				rec, _ := election.DecodeRecord(data)
				returns <- ret{term: term, released: rec.Released, maxTerm: rec.Term}
			}
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		fs.SetPartition(faultstore.BlackHoled)
		time.Sleep(election.DefaultRenewDeadline + time.Second)
		if e.IsLeader() {
			t.Fatal("still leader past the renew deadline")
		}
		fs.SetPartition(faultstore.Connected)
		time.Sleep(7 * time.Second) // the term's work is still winding down
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		var r ret
		select {
		case r = <-returns:
		default:
			t.Fatal("Stop returned before the ended term's work did")
		}
		if r.released {
			t.Errorf("term %d: the lock was released while its work still ran", r.term)
		}
		if r.maxTerm != r.term {
			t.Errorf("term %d: term %d was taken while its work still ran", r.term, r.maxTerm)
		}
		synctest.Wait()
		if n := len(returns); n != 0 {
			t.Fatalf("%d more terms' work returned; want none", n)
		}
		data, _, _ := raw.Get(context.Background(), election.DefaultLockfilePath)
		if rec, _ := election.DecodeRecord(data); !rec.Released {
			t.Fatalf("the lock was not released after the work returned: %+v", rec)
		}
	})
}

// TestStopDoesNotWaitForOnNewLeader: a callback that never returns must not
// keep Stop from returning or the lock from being released.
func TestStopDoesNotWaitForOnNewLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New()
		unblock := make(chan struct{})
		e := newElector(t, store.New(inner), "a", func(cfg *election.Config) {
			cfg.OnNewLeader = func(string, string, uint64) { <-unblock }
		})
		defer close(unblock)
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if !e.IsLeader() {
			t.Fatal("a blocked OnNewLeader cost the leadership")
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Fatalf("Stop with OnNewLeader blocked = %v; want nil within a minute", err)
		}
		data, _, _ := store.New(inner).Get(context.Background(), election.DefaultLockfilePath)
		if rec, _ := election.DecodeRecord(data); !rec.Released {
			t.Fatalf("the lock was not released: %+v", rec)
		}
	})
}

// TestStopWithWorkThatNeverReturns: OnStartedLeading ignores its context.
// Stop must return (ErrWorkStillRunning) instead of hanging, and must not
// release the lock while the work runs: the lock lapses after the lease,
// as after a crash, and only then does another member lead.
func TestStopWithWorkThatNeverReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		unblock := make(chan struct{})
		a := c.add("a", func(cfg *election.Config) {
			cfg.OnStartedLeading = func(ctx context.Context) {
				<-ctx.Done()
				<-unblock
			}
		})
		c.waitLeader(time.Minute)
		b := c.add("b", nil)
		time.Sleep(time.Minute)
		a.cancel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if err := a.e.Stop(ctx); !errors.Is(err, election.ErrWorkStillRunning) {
			t.Fatalf("Stop with work that never returns = %v; want ErrWorkStillRunning", err)
		}
		if rec, _ := c.lockRecord(); rec.Released {
			t.Fatal("the lock was released while the work still ran")
		}
		c.waitLeader(time.Minute)
		if !b.e.IsLeader() {
			t.Fatal("b does not lead")
		}
		close(unblock)
		<-a.done
		a.done <- nil
		c.stopAll()
		c.checkOverlap()
	})
}
