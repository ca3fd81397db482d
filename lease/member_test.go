package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// group is a set of coordinators in one process over one memstore, each
// through its own faultstore, with an overlap checker per shard.
type group struct {
	t      *testing.T
	inner  *memstore.Store
	base   lease.Config
	mu     sync.Mutex
	ivs    map[string][]*span // shard -> intervals
	nodes  []*node
	nextID int
	// steps, if set for an owner, runs at the top of its every round.
	steps map[string]func()
	// beforeNotify, if set for an owner in ShardLeases mode, runs before
	// it queues each change of its held set.
	beforeNotify map[string]func(held []string)
}

type node struct {
	id   string
	fs   *faultstore.Store
	c    *lease.Coordinator
	stop context.CancelFunc
}

type span struct {
	owner      string
	term       uint64
	start, end time.Time
	open       bool
}

func newGroup(t *testing.T, base lease.Config) *group {
	return &group{t: t, inner: memstore.New(), base: base, ivs: map[string][]*span{}}
}

func (g *group) add(owner string, change func(*lease.Config)) *node {
	g.t.Helper()
	g.nextID++
	n := &node{id: owner, fs: faultstore.New(g.inner, faultstore.WithSeed(uint64(g.nextID)))}
	cfg := g.base
	cfg.Store = store.New(n.fs)
	cfg.OwnerID = owner
	cfg.Logger = slog.New(checkKeys(g.t, slog.NewTextHandler(g.t.Output(), &slog.HandlerOptions{Level: testLogLevel})))
	if cfg.Mode == lease.ShardLeases {
		// Elections have no per-shard hook: record what the application
		// sees, from OnStartedLeading to its context's end (cancelled at
		// the renew deadline at the latest).
		cfg.OnStartedLeading = func(ctx context.Context, shard string, term uint64) {
			g.record(owner, shard, true, term, time.Now(), time.Now().Add(time.Hour))
			<-ctx.Done()
			g.record(owner, shard, false, term, time.Now(), time.Time{})
		}
	}
	if change != nil {
		change(&cfg)
	}
	c, err := lease.New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	n.c = c
	if cfg.Mode == lease.MemberLeases {
		lease.SetHook(c, func(shard string, leading bool, term uint64, at, deadline time.Time) {
			g.record(owner, shard, leading, term, at, deadline)
		})
		if f := g.steps[owner]; f != nil {
			lease.SetHookStep(c, f)
		}
	} else if f := g.beforeNotify[owner]; f != nil {
		lease.SetBeforeNotify(c, f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	if err := c.Start(ctx); err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.nodes = append(g.nodes, n)
	g.mu.Unlock()
	return n
}

func (g *group) record(owner, shard string, leading bool, term uint64, at, deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var open *span
	for _, s := range g.ivs[shard] {
		if s.owner == owner && s.open {
			open = s
		}
	}
	switch {
	case leading && open == nil:
		g.ivs[shard] = append(g.ivs[shard], &span{owner: owner, term: term, start: at, end: deadline, open: true})
	case leading:
		open.end = deadline
	case open != nil:
		if at.Before(open.end) || deadline.IsZero() {
			open.end = at
		}
		open.open = false
	}
}

// stopNode stops a member gracefully.
func (g *group) stopNode(n *node) {
	g.t.Helper()
	if err := n.c.Stop(context.Background()); err != nil {
		g.t.Errorf("%s: Stop: %v", n.id, err)
	}
	g.mu.Lock()
	g.nodes = slices.DeleteFunc(g.nodes, func(x *node) bool { return x == n })
	g.mu.Unlock()
}

// crashNode cuts a member off from the store, then stops it.
func (g *group) crashNode(n *node) {
	n.fs.SetPartition(faultstore.Partitioned)
	g.stopNode(n)
}

func (g *group) stopAll() {
	g.mu.Lock()
	nodes := slices.Clone(g.nodes)
	g.mu.Unlock()
	for _, n := range nodes {
		g.stopNode(n)
	}
}

// holders returns, for each shard, the members that lead it now.
func (g *group) holders(shards []string) map[string][]string {
	g.mu.Lock()
	nodes := slices.Clone(g.nodes)
	g.mu.Unlock()
	out := map[string][]string{}
	for _, s := range shards {
		for _, n := range nodes {
			if n.c.IsLeader(s) {
				out[s] = append(out[s], n.id)
			}
		}
	}
	return out
}

// settled waits until every shard has exactly one leader and no member
// leads more than its share.
func (g *group) settled(shards []string, limit time.Duration) {
	g.t.Helper()
	end := time.Now().Add(limit)
	for {
		h := g.holders(shards)
		ok := len(h) == len(shards)
		per := map[string]int{}
		for _, owners := range h {
			ok = ok && len(owners) == 1
			for _, o := range owners {
				per[o]++
			}
		}
		g.mu.Lock()
		members := len(g.nodes)
		g.mu.Unlock()
		share := (len(shards) + members - 1) / members
		for _, n := range per {
			ok = ok && n <= share
		}
		if ok {
			return
		}
		if time.Now().After(end) {
			for _, n := range g.nodes {
				g.t.Logf("%s: %+v", n.id, n.c.Status())
			}
			g.t.Fatalf("not settled after %v: %d of %d shards led, per member %v", limit, len(h), len(shards), per)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check fails on overlapping intervals or terms that do not grow, per
// shard, and returns the longest gap between consecutive intervals of a
// shard that started after from.
func (g *group) check(from time.Time) (longestGap time.Duration, n int) {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for shard, ivs := range g.ivs {
		ivs = slices.Clone(ivs)
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
		n += len(ivs)
		for i := 1; i < len(ivs); i++ {
			prev, cur := ivs[i-1], ivs[i]
			if cur.start.Before(prev.end) {
				g.t.Errorf("shard %s: %s term %d [%s, %s] overlaps %s term %d from %s", shard,
					prev.owner, prev.term, prev.start.Format("15:04:05.000"), prev.end.Format("15:04:05.000"),
					cur.owner, cur.term, cur.start.Format("15:04:05.000"))
			}
			if cur.term <= prev.term {
				g.t.Errorf("shard %s: term %d after term %d", shard, cur.term, prev.term)
			}
			if cur.start.After(from) && cur.start.Sub(prev.end) > longestGap {
				longestGap = cur.start.Sub(prev.end)
			}
		}
	}
	return longestGap, n
}

func memberConfig(shards []string) lease.Config {
	return lease.Config{Mode: lease.MemberLeases, ShardIDs: shards}
}

func TestMemberLeasesSpreadJoinLeaveAndDie(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(30)
		g := newGroup(t, memberConfig(shards))
		a := g.add("a", nil)
		g.add("b", nil)
		g.settled(shards, time.Minute)

		// A member joins: it receives its share; no shard goes without a
		// leader for longer than a lease.
		joined := time.Now()
		c := g.add("c c", nil) // an owner ID with a space
		g.settled(shards, 2*time.Minute)
		if n := len(c.c.Held()); n != 10 {
			t.Fatalf("the new member leads %d shards; want its share, 10", n)
		}
		gap, _ := g.check(joined)
		if gap > lease.DefaultLeaseDuration {
			t.Fatalf("a shard went %v without a leader when a member joined; the bound is one lease (%v)", gap, lease.DefaultLeaseDuration)
		}
		t.Logf("join: longest gap %v", gap)

		// A member leaves gracefully: its shards move without waiting
		// for its lease.
		left := time.Now()
		g.stopNode(a)
		g.settled(shards, time.Minute)
		gap, _ = g.check(left)
		t.Logf("leave: longest gap %v", gap)
		if gap > lease.DefaultLeaseDuration {
			t.Fatalf("a shard went %v without a leader after a graceful leave", gap)
		}

		// A member dies: its shards are taken a lease after the others
		// last saw it renew, plus the time for the new owners to list the
		// new assignment (one renew period each, with jitter).
		died := time.Now()
		g.crashNode(c)
		g.settled(shards, 2*time.Minute)
		gap, _ = g.check(died)
		t.Logf("death: longest gap %v", gap)
		if limit := lease.DefaultLeaseDuration + 2*lease.DefaultRenewPeriod*11/10; gap > limit {
			t.Fatalf("a dead member's shard went %v without a leader; the bound is %v", gap, limit)
		}
		st := g.nodes[0].c.Status()
		if st.Mode != "member-leases" || len(st.Members) != 1 || len(st.Held) != 30 {
			t.Fatalf("status %+v", st)
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

func TestMemberLeasesAddAndRemoveShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(4)
		g := newGroup(t, memberConfig(shards))
		a := g.add("a", nil)
		g.add("b", nil)
		g.settled(shards, time.Minute)
		if err := a.c.AddShard("new"); err != nil {
			t.Fatal(err)
		}
		shards = append(shards, "new")
		g.settled(shards, time.Minute)
		if err := a.c.RemoveShard("s000"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		if h := g.holders([]string{"s000"}); len(h["s000"]) != 0 {
			t.Fatalf("a removed shard is still led by %v", h["s000"])
		}
		if err := a.c.RemoveShard("never-heard-of"); err == nil {
			t.Fatal("removing an unknown shard succeeded")
		}
		if err := a.c.AddShard(""); err == nil {
			t.Fatal("adding an empty shard ID succeeded")
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

func TestMemberLeasesDuplicateOwnerStaysIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(6)
		g := newGroup(t, memberConfig(shards))
		first := g.add("same", nil)
		g.settled(shards, time.Minute)
		second := g.add("same", nil)
		time.Sleep(2 * time.Minute)
		if n := len(second.c.Held()); n != 0 {
			t.Fatalf("the duplicate leads %d shards", n)
		}
		if st := second.c.Status(); st.LastError == "" {
			t.Fatalf("the duplicate does not report itself: %+v", st)
		}
		if n := len(first.c.Held()); n != 6 {
			t.Fatalf("the first process leads %d shards; want 6", n)
		}
		// When the first dies, the second takes over.
		g.crashNode(first)
		g.settled(shards, 2*time.Minute)
		if n := len(second.c.Held()); n != 6 {
			t.Fatalf("after the first died the second leads %d", n)
		}
		g.stopAll()
		g.check(time.Time{})
	})
}

// TestMemberLeasesMixedTimingsLongLeaseCutOff runs a rolling change: one
// member still has a long lease while another already runs a short one. The
// long-lease member is cut off from the store; the other must not take its
// shards before the long lease, as its record states, has run out.
func TestMemberLeasesMixedTimingsLongLeaseCutOff(t *testing.T) {
	for _, p := range []faultstore.Partition{faultstore.Partitioned, faultstore.BlackHoled} {
		t.Run(p.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shards := shardIDs(6)
				g := newGroup(t, memberConfig(shards))
				long := g.add("long", func(c *lease.Config) { c.LeaseDuration, c.RenewPeriod = time.Minute, 15*time.Second })
				short := g.add("short", func(c *lease.Config) { c.LeaseDuration, c.RenewPeriod = 6*time.Second, 2*time.Second })
				g.settled(shards, 2*time.Minute)
				if n := len(long.c.Held()); n != 3 {
					t.Fatalf("the long-lease member leads %d shards; want 3", n)
				}
				long.fs.SetPartition(p)
				// The short member takes every shard, but only after the
				// long lease: the long member's rights last two thirds of it.
				end := time.Now().Add(3 * time.Minute)
				for len(short.c.Held()) != 6 {
					if time.Now().After(end) {
						t.Fatalf("the short-lease member leads %v after the other was cut off for 3 minutes", short.c.Held())
					}
					time.Sleep(time.Second)
				}
				if _, spans := g.check(time.Time{}); spans < 9 {
					t.Errorf("only %d shard terms: the shards did not move", spans)
				}
				long.fs.SetPartition(faultstore.Connected)
				g.settled(shards, 2*time.Minute)
				g.stopAll()
				g.check(time.Time{})
			})
		})
	}
}

// randomTimings gives a member a valid LeaseDuration and RenewPeriod of its
// own, as during a rolling change of settings.
func randomTimings(rng *rand.Rand) func(*lease.Config) {
	ld := time.Duration(3+rng.IntN(40)) * time.Second
	rp := ld / time.Duration(3+rng.IntN(3))
	return func(c *lease.Config) { c.LeaseDuration, c.RenewPeriod = ld, rp }
}

func TestMemberLeasesChaos(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				shards := shardIDs(20)
				g := newGroup(t, memberConfig(shards))
				ids := []string{"m0", "m1", "m2", "m3"}
				live := map[string]*node{}
				var all []*node // every member ever started, for the fault counts
				add := func(id string) {
					live[id] = g.add(id, randomTimings(rng))
					all = append(all, live[id])
				}
				for _, id := range ids {
					add(id)
				}
				events, cutoffs := 0, 0
				for end := time.Now().Add(3 * time.Hour); time.Now().Before(end); {
					time.Sleep(time.Duration(5+rng.IntN(40)) * time.Second)
					id := ids[rng.IntN(len(ids))]
					n := live[id]
					events++
					switch rng.IntN(7) {
					case 0:
						g.crashNode(n)
						cutoffs++
						time.Sleep(time.Duration(rng.IntN(30)) * time.Second)
						add(id)
					case 1:
						g.stopNode(n)
						add(id)
					case 2:
						n.fs.SetPartition(faultstore.BlackHoled)
						cutoffs++
						time.Sleep(time.Duration(1+rng.IntN(40)) * time.Second)
						n.fs.SetPartition(faultstore.Connected)
					case 3:
						n.fs.AddRule(faultstore.Rule{Ops: faultstore.Writes, P: 1, Times: 1 + rng.IntN(3),
							Action: faultstore.ApplyThenHang, Delay: time.Duration(5+rng.IntN(20)) * time.Second})
					case 4:
						n.fs.Throttle(faultstore.AllOps, rng.Float64()*0.4)
						n.fs.FailRate(faultstore.AllOps, driver.Transient, rng.Float64()*0.4)
						time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
						n.fs.ClearFaults()
					case 5:
						n.fs.AmbiguousRate(faultstore.Writes, 0.5)
						time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
						n.fs.ClearFaults()
					case 6:
						n.fs.SetLatency(faultstore.AllOps, faultstore.Exponential(time.Duration(100+rng.IntN(3000))*time.Millisecond))
						time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
						n.fs.SetLatency(faultstore.AllOps, nil)
					}
				}
				for _, n := range live {
					n.fs.ClearFaults()
					n.fs.SetPartition(faultstore.Connected)
					n.fs.SetLatency(faultstore.AllOps, nil)
				}
				// Safety first, then liveness, then safety again.
				g.check(time.Time{})
				g.settled(shards, 3*time.Minute)
				g.stopAll()
				_, spans := g.check(time.Time{})
				// Injected faults that callers saw as failed calls.
				var faults int64
				for _, n := range all {
					c := n.fs.Counts()
					faults += c.ResultTotal(faultstore.Throttled) + c.ResultTotal(faultstore.Transient)
				}
				t.Logf("seed %d: %d fault events (%d cut-offs), %d failed calls injected, %d shard terms, %d member instances",
					seed, events, cutoffs, faults, spans, len(all))
				if spans < 100 || events < 150 || cutoffs < 20 || faults < 500 {
					t.Fatalf("the chaos did too little to prove anything: %d shard terms, %d fault events, %d cut-offs, %d failed calls",
						spans, events, cutoffs, faults)
				}
			})
		})
	}
}

var testLogLevel = slog.LevelError

// TestMemberLeasesOnChangeReportsFencedShards: when the renew deadline
// passes while the loop is stuck in a store call, the fence stops every
// shard, and OnChange reports the empty set.
func TestMemberLeasesOnChangeReportsFencedShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(3)
		g := newGroup(t, memberConfig(shards))
		var mu sync.Mutex
		var last []string
		a := g.add("a", func(c *lease.Config) {
			c.OnChange = func(held []string) {
				mu.Lock()
				last = held
				mu.Unlock()
			}
		})
		g.settled(shards, time.Minute)
		a.fs.SetPartition(faultstore.BlackHoled)
		time.Sleep(time.Minute)
		if held := a.c.Held(); len(held) != 0 {
			t.Fatalf("leads %v cut off from the store for a minute", held)
		}
		mu.Lock()
		got := last
		mu.Unlock()
		if len(got) != 0 {
			t.Fatalf("OnChange last reported %v; the shards were fenced", got)
		}
		a.fs.SetPartition(faultstore.Connected)
		g.stopAll()
		g.check(time.Time{})
	})
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// TestStopDuringRenewWarnsNothing: a member record's renewal that the stop
// cuts short is no failure to warn about: a clean stop logs nothing at
// WARN or above.
func TestStopDuringRenewWarnsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(4)
		g := newGroup(t, memberConfig(shards))
		var logs syncBuffer
		a := g.add("a", func(cfg *lease.Config) {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		g.settled(shards, time.Minute)
		a.fs.SetLatency(faultstore.OpPutCAS, faultstore.Fixed(time.Hour))
		time.Sleep(lease.DefaultRenewPeriod * 3 / 2) // a renewal is in flight
		a.fs.SetLatency(faultstore.OpPutCAS, nil)
		if err := a.c.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := logs.String(); got != "" {
			t.Fatalf("a clean stop during a renewal logged:\n%s", got)
		}
	})
}

// refusingDeletes refuses every conditional delete as unsupported, as the
// S3 driver does on a server that would ignore their condition (MinIO).
type refusingDeletes struct{ driver.Store }

func (r refusingDeletes) Delete(ctx context.Context, key string, cond driver.Cond) error {
	if cond.Kind == driver.IfMatch {
		return driver.Errorf(driver.Unsupported, "this store refuses conditional deletes")
	}
	return r.Store.Delete(ctx, key, cond)
}

// A member that leaves removes its record on a store that refuses
// conditional deletes too, so that the others move its shards at once.
func TestMemberLeaveRemovesRecordWithoutConditionalDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(4)
		g := newGroup(t, memberConfig(shards))
		a := g.add("a", func(cfg *lease.Config) { cfg.Store = store.New(refusingDeletes{cfg.Store.Driver()}) })
		g.settled(shards, time.Minute)
		members := lease.DefaultPrefix + "members/"
		if items, err := g.inner.List(t.Context(), members, "", 10); err != nil || len(items) != 1 {
			t.Fatalf("member records while a runs: %v, %v; want a's", items, err)
		}
		g.stopNode(a)
		if items, err := g.inner.List(t.Context(), members, "", 10); err != nil || len(items) != 0 {
			t.Fatalf("member records after a left: %v, %v; want none", items, err)
		}
	})
}
