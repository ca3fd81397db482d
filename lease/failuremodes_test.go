package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// One test per row of shardcoordinator's failure-mode tables
// (../shared/seeds/shardcoordinator.md, "Failure Modes"), each showing the
// failure cannot happen here, in both modes where the row applies to both.
// Rows about the Route53 and DynamoDB backends themselves are tested with
// those stores (store/route53store, store/dynamostore).

var modes = []struct {
	name string
	mode lease.Mode
}{{"shard-leases", lease.ShardLeases}, {"member-leases", lease.MemberLeases}}

func forModes(t *testing.T, f func(t *testing.T, mode lease.Mode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { f(t, m.mode) }) })
	}
}

// holdsAllFor fails unless n leads every shard continuously for d.
func holdsAllFor(t *testing.T, n *node, shards []string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		if held := n.c.Held(); !slices.Equal(held, shards) {
			t.Fatalf("at %v %s leads %d of %d shards", time.Now().Format("15:04:05"), n.id, len(held), len(shards))
		}
	}
}

// Error-blind renewal: transient errors and throttling on renewals must not
// demote (shardcoordinator demoted on any error). Also covers DynamoDB's
// "throttling causes false demotion".
func TestFailureModeErrorBlindRenewal(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(5)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		n := g.add("a", nil)
		g.settled(shards, time.Minute)
		n.fs.Throttle(faultstore.AllOps, 0.1)
		n.fs.FailRate(faultstore.AllOps, driver.Transient, 0.1)
		holdsAllFor(t, n, shards, time.Hour)
		if c := n.fs.Counts(); c.ResultTotal(faultstore.Throttled) < 50 || c.ResultTotal(faultstore.Transient) < 50 {
			t.Fatalf("too few faults injected: %v", c)
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

// Zombie leader after a loop panic: IsLeader must turn false and the
// shards be released. (ShardLeases runs elections, whose own loop panic
// test is in the election package.)
func TestFailureModeZombieAfterPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(3)
		g := newGroup(t, memberConfig(shards))
		var armed atomic.Bool
		g.steps = map[string]func(){"a": func() {
			if armed.Load() {
				panic("injected")
			}
		}}
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		b := g.add("b", nil)
		g.settled(shards, time.Minute)
		armed.Store(true)
		time.Sleep(lease.DefaultRenewPeriod * 2)
		if held := a.c.Held(); len(held) != 0 {
			t.Fatalf("a panicked loop still leads %v", held)
		}
		var pe *lease.PanicError
		if err := a.c.Stop(context.Background()); !errors.As(err, &pe) {
			t.Fatalf("Stop after a panic = %v; want a PanicError", err)
		}
		for len(b.c.Held()) != len(shards) {
			time.Sleep(time.Second)
		}
		g.stopNode(b)
		g.check(time.Time{})
	})
}

// Stop racing acquire: Stop while writes are in flight must leave nothing
// held and the member's claims removed.
func TestFailureModeStopRacingAcquire(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		for _, delay := range []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second} {
			shards := shardIDs(3)
			g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
			n := g.add("a", func(cfg *lease.Config) {})
			n.fs.SetLatency(faultstore.Writes, faultstore.Fixed(delay))
			time.Sleep(delay / 2)
			g.stopNode(n)
			if held := n.c.Held(); len(held) != 0 {
				t.Fatalf("delay %v: leads %v after Stop", delay, held)
			}
			// A new member takes every shard without waiting for a lease.
			start := time.Now()
			m := g.add("b", nil)
			g.settled(shards, time.Minute)
			if d := time.Since(start); d >= lease.DefaultLeaseDuration {
				t.Fatalf("delay %v: the next member needed %v: Stop left a claim behind", delay, d)
			}
			g.stopNode(m)
			g.check(time.Time{})
		}
	})
}

// Double Start must not run two loops.
func TestFailureModeDoubleStart(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		c, err := lease.New(lease.Config{Mode: mode, Store: store.New(memstore.New()), OwnerID: "a", ShardIDs: []string{"s"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); !errors.Is(err, lease.ErrAlreadyStarted) {
			t.Fatalf("second Start = %v", err)
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); !errors.Is(err, lease.ErrStopped) {
			t.Fatalf("Start after Stop = %v", err)
		}
	})
}

// Parent context cancelled without Stop: leadership must end and be
// released, not linger.
func TestFailureModeParentContextCancelled(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(3)
		inner := memstore.New()
		c, err := lease.New(lease.Config{Mode: mode, Store: store.New(inner), OwnerID: "a", ShardIDs: shards,
			Logger: quiet(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for len(c.Held()) != len(shards) {
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		synctest.Wait()
		for _, s := range shards {
			if c.IsLeader(s) {
				t.Fatalf("still leads %s after its parent context was cancelled", s)
			}
		}
		// A second member takes the shards without waiting a lease.
		d, err := lease.New(lease.Config{Mode: mode, Store: store.New(inner), OwnerID: "b", ShardIDs: shards, Logger: quiet(t)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for len(d.Held()) != len(shards) {
			time.Sleep(100 * time.Millisecond)
		}
		if since := time.Since(start); since >= lease.DefaultLeaseDuration {
			t.Fatalf("took %v: the cancelled member did not release", since)
		}
		_ = d.Stop(context.Background())
		_ = c.Stop(context.Background())
	})
}

// Clock skew between coordinators and NTP jumps: wall clocks are never
// compared; members with wall clocks hours apart, one jumping back and
// forth, keep one leader per shard.
func TestFailureModeClockSkewAndJumps(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(6)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		var jump atomic.Int64
		a := g.add("a", func(cfg *lease.Config) {
			cfg.Clock = clock.NewWallOffset(func() time.Duration { return -3 * time.Hour })
		})
		g.settled(shards, time.Minute)
		g.add("b", func(cfg *lease.Config) {
			cfg.Clock = clock.NewWallOffset(func() time.Duration { return time.Duration(jump.Load()) })
		})
		for i := 0; i < 60; i++ {
			jump.Store(int64(time.Duration(1-2*(i%2)) * 24 * time.Hour))
			time.Sleep(time.Minute)
			for s, owners := range g.holders(shards) {
				if len(owners) != 1 {
					t.Fatalf("shard %s led by %v", s, owners)
				}
			}
		}
		if mode == lease.ShardLeases && len(a.c.Held()) != len(shards) {
			// Without fair share, the first member keeps what it holds.
			t.Fatalf("a clock jump moved shards: a leads %v", a.c.Held())
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

// Slow responses past the lease: a member whose store calls take longer
// than its renew deadline stops acting before anyone else can start.
func TestFailureModeSlowResponses(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(4)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		g.add("b", nil)
		time.Sleep(time.Minute)
		a.fs.SetLatency(faultstore.AllOps, faultstore.Fixed(12*time.Second))
		time.Sleep(3 * time.Minute)
		a.fs.SetLatency(faultstore.AllOps, nil)
		time.Sleep(time.Minute)
		g.stopAll()
		if _, n := g.check(time.Time{}); n < len(shards) {
			t.Fatalf("only %d terms", n)
		}
	})
}

// No jitter: renewals of members started at the same instant must drift
// apart rather than stay in lockstep.
func TestFailureModeJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(3)
		g := newGroup(t, memberConfig(shards))
		var mu sync.Mutex
		times := map[string][]time.Time{}
		for _, id := range []string{"a", "b"} {
			n := g.add(id, nil)
			n.fs.SetObserver(func(c faultstore.Call) {
				if c.Op == faultstore.OpList {
					mu.Lock()
					times[id] = append(times[id], time.Now())
					mu.Unlock()
				}
			})
		}
		time.Sleep(10 * time.Minute)
		g.stopAll()
		mu.Lock()
		defer mu.Unlock()
		var intervals []time.Duration
		for _, ts := range times {
			for i := 1; i < len(ts); i++ {
				intervals = append(intervals, ts[i].Sub(ts[i-1]))
			}
		}
		slices.Sort(intervals)
		if len(intervals) < 100 || intervals[len(intervals)/10] == intervals[len(intervals)*9/10] {
			t.Fatalf("round intervals do not vary: %v … %v", intervals[:3], intervals[len(intervals)-3:])
		}
		same := 0
		n := min(len(times["a"]), len(times["b"]))
		for i := 0; i < n; i++ {
			if times["a"][i].Equal(times["b"][i]) {
				same++
			}
		}
		if same > n/10 {
			t.Fatalf("%d of %d rounds of two members fell on the same instant", same, n)
		}
	})
}

// OwnerIDs with spaces (and other characters) round-trip.
func TestFailureModeOwnerIDWithSpaces(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(4)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		n := g.add("host 1/worker #2 ünïcode", nil)
		g.settled(shards, time.Minute)
		holdsAllFor(t, n, shards, 5*time.Minute)
		g.stopAll()
		g.check(time.Time{})
	})
}

// Partition from the backend: the cut-off member stops acting within its
// deadline, others take over, and after healing exactly one leader per
// shard remains.
func TestFailureModePartitionFromBackend(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(4)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		b := g.add("b", nil)
		time.Sleep(time.Minute)
		a.fs.SetPartition(faultstore.BlackHoled)
		cut := time.Now()
		for len(a.c.Held()) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(cut); d > lease.DefaultLeaseDuration*2/3 {
			t.Fatalf("the cut-off member kept leading for %v", d)
		}
		for len(b.c.Held()) != len(shards) {
			time.Sleep(time.Second)
		}
		a.fs.SetPartition(faultstore.Connected)
		time.Sleep(3 * time.Minute)
		for s, owners := range g.holders(shards) {
			if len(owners) != 1 {
				t.Fatalf("after healing shard %s is led by %v", s, owners)
			}
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

// Stop hangs on a slow Release: Stop honours its context.
func TestFailureModeStopHangsOnSlowRelease(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(2)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		a.fs.SetPartition(faultstore.BlackHoled)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := a.c.Stop(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("Stop = %v after %v; want the caller's deadline", err, time.Since(start))
		}
		if held := a.c.Held(); len(held) != 0 {
			t.Fatalf("leads %v after Stop", held)
		}
		a.fs.SetPartition(faultstore.Connected)
		if err := a.c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Process crash without Stop: the shards are taken after the lease, and
// nobody leads them twice.
func TestFailureModeCrashWithoutStop(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(4)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		b := g.add("b", nil)
		time.Sleep(time.Minute)
		crashed := time.Now()
		g.crashNode(a)
		for len(b.c.Held()) != len(shards) {
			time.Sleep(100 * time.Millisecond)
		}
		// Member leases: a lease plus two rounds. Shard leases: followers
		// poll every 6 renew periods (±20%) while stable; the poll that
		// first sees the dead leader's last version takes it for live, so
		// the worst case is two polls (see the election package).
		limit := lease.DefaultLeaseDuration + 3*lease.DefaultRenewPeriod
		if mode == lease.ShardLeases {
			limit = 2*6*lease.DefaultRenewPeriod*12/10 + lease.DefaultRenewPeriod
		}
		if d := time.Since(crashed); d > limit {
			t.Fatalf("shards taken %v after the crash; the bound is %v", d, limit)
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

// Backend deleted or permissions revoked: permanent errors are reported,
// nothing is held, and the member recovers when access returns.
func TestFailureModePermanentErrors(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		shards := shardIDs(2)
		g := newGroup(t, lease.Config{Mode: mode, ShardIDs: shards})
		a := g.add("a", nil)
		g.settled(shards, time.Minute)
		a.fs.FailRate(faultstore.AllOps, driver.Permanent, 1)
		time.Sleep(time.Minute)
		if held := a.c.Held(); len(held) != 0 {
			t.Fatalf("leads %v with the backend refusing every call", held)
		}
		if mode == lease.MemberLeases {
			if st := a.c.Status(); !strings.Contains(st.LastError, "permanent") {
				t.Fatalf("the error is not reported: %+v", st)
			}
		}
		a.fs.ClearFaults()
		g.settled(shards, 2*time.Minute)
		g.stopAll()
		g.check(time.Time{})
	})
}

func quiet(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

func TestStoreThatIgnoresConditionsIsRefused(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		fs := faultstore.New(memstore.New())
		fs.IgnoreConditions(faultstore.Writes)
		c, err := lease.New(lease.Config{Mode: mode, Store: store.New(fs), OwnerID: "a", ShardIDs: []string{"s"}, Logger: quiet(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); !errors.Is(err, store.ErrConditionsIgnored) {
			t.Fatalf("Start = %v; want ErrConditionsIgnored", err)
		}
	})
}
