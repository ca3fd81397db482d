package rsmtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
)

// nemesis breaks the cluster until ctx ends. It must leave every node
// running (crashed nodes restarted); the runner heals the rest.
type nemesis func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any))

type kvScenario struct {
	// faults is how long the nemesis runs; the clients then run as long
	// again with every fault healed.
	faults  time.Duration
	recover time.Duration
	clients int
	keys    int
	nemesis nemesis
	// shortTimeouts is the share of operations with a short timeout.
	shortTimeouts float64
	// options, if set, change fastOptions.
	options func(*rsm.Options)
}

func runKVScenario(t *testing.T, sc kvScenario) {
	seed := seedFor(t)
	opts := fastOptions()
	if sc.options != nil {
		sc.options(&opts)
	}
	c := rsmtest.Start(t, rsmtest.Config{Options: opts, Machines: kvMachines, Seed: seed, Logger: nodeLogger(t)})
	if _, err := c.WaitLeader(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	w := &kvWorkload{c: c, h: rsmtest.NewHistory(), clients: sc.clients, opTimeout: 2 * time.Second, shortTimeouts: sc.shortTimeouts, seed: seed}
	for i := range sc.keys {
		w.keys = append(w.keys, fmt.Sprintf("k%d", i))
	}
	start := time.Now()
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		w.run(stop)
	}()
	var events []string
	var emu sync.Mutex
	logf := func(format string, args ...any) {
		emu.Lock()
		events = append(events, fmt.Sprintf("%6.3fs ", time.Since(start).Seconds())+fmt.Sprintf(format, args...))
		emu.Unlock()
	}
	if sc.nemesis != nil {
		ctx, cancel := context.WithTimeout(t.Context(), sc.faults)
		sc.nemesis(ctx, c, rand.New(rand.NewPCG(seed, 0xfa17)), logf)
		cancel()
	} else {
		time.Sleep(sc.faults)
	}
	for i := range c.Len() {
		if c.Node(i) == nil {
			if err := c.Restart(t.Context(), i); err != nil {
				t.Errorf("restart node %d: %v", i, err)
			}
		}
	}
	c.HealAll()
	logf("healed")
	healed := w.stats.acked.Load()
	healedPerNode := perNode(&w.stats)
	// Run at least sc.recover more, and on until every node has served
	// again (a liveness bound generous enough for a loaded CI machine).
	time.Sleep(sc.recover)
	for limit := time.Now().Add(20 * time.Second); time.Now().Before(limit); time.Sleep(50 * time.Millisecond) {
		served := 0
		for n, k := range perNode(&w.stats) {
			if k > healedPerNode[n] {
				served++
			}
		}
		if served == c.Len() {
			break
		}
	}
	close(stop)
	cwg.Wait()
	afterHeal := w.stats.acked.Load() - healed
	recoveredNodes := map[int]int{}
	for n, k := range perNode(&w.stats) {
		if d := k - healedPerNode[n]; d > 0 {
			recoveredNodes[n] = d
		}
	}
	ctx := ctxT(t, 30*time.Second)
	for i := range c.Len() {
		w.finalReads(ctx, t, i)
	}
	emu.Lock()
	for _, e := range events {
		t.Log("nemesis: " + e)
	}
	emu.Unlock()
	t.Logf("%d operations in %v; %s", w.h.Len(), time.Since(start).Round(time.Millisecond), w.stats.String())
	t.Logf("after healing: %d acknowledged writes, acknowledged operations by node %v", afterHeal, recoveredNodes)
	w.check(t)
	if got := w.stats.acked.Load(); got < 50 {
		t.Errorf("only %d acknowledged writes: the cluster made too little progress for the check to mean much", got)
	}
	if len(recoveredNodes) < c.Len() {
		t.Errorf("liveness: within 20 s after every fault was healed, only nodes %v acknowledged operations (%d writes); every node should serve again", recoveredNodes, afterHeal)
	}
}

func perNode(s *kvStats) map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for n, k := range s.perNode {
		out[n] = k
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// pickLeader returns the leader with chance pLeader (if there is one),
// else a random node.
func pickLeader(c *rsmtest.Cluster, rng *rand.Rand, pLeader float64) (int, string) {
	if l := c.Leader(); l >= 0 && rng.Float64() < pLeader {
		return l, "leader"
	}
	return rng.IntN(c.Len()), "node"
}

func TestLinearizableNoFaults(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 4 * time.Second, recover: time.Second, clients: 6, keys: 8})
}

func TestLinearizableLeaderCrashRestart(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 6, keys: 8, shortTimeouts: 0.2,
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			for sleepCtx(ctx, between(rng, 300*time.Millisecond, 700*time.Millisecond)) {
				i, what := pickLeader(c, rng, 0.8)
				logf("crash %s %d", what, i)
				if err := c.Crash(i); err != nil {
					logf("crash %d: %v", i, err)
				}
				sleepCtx(ctx, between(rng, 50*time.Millisecond, 300*time.Millisecond))
				if err := c.Restart(context.Background(), i); err != nil {
					logf("restart %d: %v", i, err)
				} else {
					logf("restarted %d", i)
				}
			}
		}})
}

func TestLinearizablePausedNodes(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 6, keys: 8, shortTimeouts: 0.2,
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			for sleepCtx(ctx, between(rng, 200*time.Millisecond, 500*time.Millisecond)) {
				i, what := pickLeader(c, rng, 0.7)
				logf("pause %s %d", what, i)
				c.Pause(i, 0.5)
				sleepCtx(ctx, between(rng, 200*time.Millisecond, time.Second))
				logf("resume %d", i)
				c.Resume(i)
			}
		}})
}

func TestLinearizablePartitions(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 6, keys: 8, shortTimeouts: 0.2,
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			for sleepCtx(ctx, between(rng, 100*time.Millisecond, 400*time.Millisecond)) {
				l := c.Leader()
				if l < 0 {
					l = rng.IntN(c.Len())
				}
				a, b := (l+1)%c.Len(), (l+2)%c.Len()
				switch rng.IntN(4) {
				case 0:
					// The leader keeps the store but loses its followers.
					logf("isolate leader %d", l)
					c.Isolate(l)
				case 1:
					logf("partition leader %d from follower %d", l, a)
					c.Partition(l, a)
				case 2:
					logf("partition followers %d and %d", a, b)
					c.Partition(a, b)
				default:
					x, y := rng.IntN(c.Len()), rng.IntN(c.Len())
					logf("partition %d and %d; isolate %d", x, y, b)
					c.Partition(x, y)
					c.Isolate(b)
				}
				sleepCtx(ctx, between(rng, 200*time.Millisecond, 800*time.Millisecond))
				logf("heal")
				c.Heal()
			}
		}})
}

func TestLinearizableNodeCutFromStore(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 6, keys: 8, shortTimeouts: 0.2,
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			for sleepCtx(ctx, between(rng, 200*time.Millisecond, 500*time.Millisecond)) {
				i, what := pickLeader(c, rng, 0.6)
				logf("cut %s %d from the store", what, i)
				c.NodeFaults(i).SetPartition(faultstore.Partitioned)
				sleepCtx(ctx, between(rng, 200*time.Millisecond, 800*time.Millisecond))
				logf("reconnect %d to the store", i)
				c.NodeFaults(i).SetPartition(faultstore.Connected)
			}
		}})
}

func TestLinearizableStoreFaults(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 6, keys: 8, shortTimeouts: 0.2,
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			fs := c.Faults()
			for ctx.Err() == nil {
				logf("store faults on")
				fs.SetLatency(faultstore.AllOps, faultstore.Uniform(0, 3*time.Millisecond))
				fs.FailRate(faultstore.AllOps, driver.Transient, 0.02)
				fs.Throttle(faultstore.AllOps, 0.02)
				fs.AmbiguousRate(faultstore.Writes, 0.05)
				remove, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpPutCreate, P: 0.02, Action: faultstore.ApplyThenHang, Delay: 150 * time.Millisecond})
				if err != nil {
					logf("rule: %v", err)
					return
				}
				sleepCtx(ctx, between(rng, 500*time.Millisecond, 1500*time.Millisecond))
				logf("store faults off")
				remove()
				fs.ClearFaults()
				sleepCtx(ctx, between(rng, 100*time.Millisecond, 500*time.Millisecond))
			}
			logf("store calls: %v", fs.Counts())
		}})
}

// TestLinearizablePipelined runs two streams of mixed faults at once,
// overlapping, with several small batches in flight, so that holes and
// out-of-order landings in the log are common.
func TestLinearizablePipelined(t *testing.T) {
	runKVScenario(t, kvScenario{faults: 5 * time.Second, recover: 1500 * time.Millisecond, clients: 8, keys: 6, shortTimeouts: 0.2,
		options: func(o *rsm.Options) {
			o.PipelineDepth = 4
			o.BatchMinCount = 4
		},
		nemesis: func(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
			var wg sync.WaitGroup
			for k := range 2 {
				r := rand.New(rand.NewPCG(rng.Uint64(), uint64(k)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					mixedNemesis(ctx, c, r, func(format string, args ...any) { logf(fmt.Sprintf("[%d] ", k)+format, args...) })
				}()
			}
			wg.Wait()
		}})
}
