package rsmtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/faultstore"
)

// mixedNemesis crashes and restarts the leader, isolates it, partitions
// pairs of nodes, pauses nodes and makes store writes ambiguous, one fault
// at a time.
func mixedNemesis(ctx context.Context, c *rsmtest.Cluster, rng *rand.Rand, logf func(string, ...any)) {
	for sleepCtx(ctx, between(rng, 100*time.Millisecond, 400*time.Millisecond)) {
		hold := between(rng, 200*time.Millisecond, 700*time.Millisecond)
		l := c.Leader()
		if l < 0 {
			l = rng.IntN(c.Len())
		}
		switch rng.IntN(5) {
		case 0:
			logf("crash leader %d", l)
			if err := c.Crash(l); err != nil {
				logf("crash %d: %v", l, err)
			}
			sleepCtx(ctx, hold/2)
			if err := c.Restart(context.Background(), l); err != nil {
				logf("restart %d: %v", l, err)
			}
			logf("restarted %d", l)
		case 1:
			logf("isolate leader %d", l)
			c.Isolate(l)
			sleepCtx(ctx, hold)
			c.Heal()
			logf("heal")
		case 2:
			a, b := rng.IntN(c.Len()), rng.IntN(c.Len())
			logf("partition %d and %d", a, b)
			c.Partition(a, b)
			sleepCtx(ctx, hold)
			c.Heal()
			logf("heal")
		case 3:
			i := rng.IntN(c.Len())
			logf("pause %d", i)
			c.Pause(i, 0.5)
			sleepCtx(ctx, hold)
			c.Resume(i)
			logf("resume %d", i)
		default:
			logf("ambiguous store writes")
			c.Faults().AmbiguousRate(faultstore.Writes, 0.1)
			sleepCtx(ctx, hold)
			c.Faults().AmbiguousRate(faultstore.Writes, 0)
			logf("store writes clean")
		}
	}
}

// TestExactlyOnce increments a replicated counter from every node through
// leader crashes, partitions, pauses and ambiguous store writes. Every
// acknowledged increment returns a distinct total (none was applied
// twice), and the final count lies between the increments known to have
// applied and those plus the ones whose outcome is unknown.
func TestExactlyOnce(t *testing.T) {
	seed := seedFor(t)
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Seed: seed, Logger: nodeLogger(t)})
	if _, err := c.WaitLeader(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	var (
		acked, resultLost, unknown, notCommitted atomic.Int64
		mu                                       sync.Mutex
		totals                                   = map[uint64]string{}
		dups                                     []string
	)
	const clients = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(id)))
			node := (id + int(seed%uint64(c.Len()))) % c.Len()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				n := c.Node(node)
				if n == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				timeout := 2 * time.Second
				if rng.IntN(5) == 0 {
					timeout = between(rng, 100*time.Millisecond, 800*time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				res, err := n.Command(ctx, "counter", nil)
				cancel()
				switch {
				case err == nil:
					acked.Add(1)
					v, derr := decodeCount(res)
					who := fmt.Sprintf("client %d on node %d, increment %d", id, node, seq)
					mu.Lock()
					if derr != nil {
						dups = append(dups, who+": "+derr.Error())
					} else if prev, ok := totals[v]; ok {
						dups = append(dups, fmt.Sprintf("total %d returned to %s and to %s", v, prev, who))
					} else {
						totals[v] = who
					}
					mu.Unlock()
				case errors.Is(err, rsm.ErrApplicationResultUnavailable):
					resultLost.Add(1)
				case errors.Is(err, rsm.ErrNotCommitted):
					notCommitted.Add(1)
				default:
					unknown.Add(1)
				}
			}
		}()
	}
	var events []string
	start := time.Now()
	logf := func(format string, args ...any) {
		events = append(events, fmt.Sprintf("%6.3fs ", time.Since(start).Seconds())+fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	mixedNemesis(ctx, c, rand.New(rand.NewPCG(seed, 0xfa17)), logf)
	cancel()
	for i := range c.Len() {
		if c.Node(i) == nil {
			if err := c.Restart(t.Context(), i); err != nil {
				t.Errorf("restart node %d: %v", i, err)
			}
		}
	}
	c.HealAll()
	logf("healed")
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for _, e := range events {
		t.Log("nemesis: " + e)
	}

	// Every node reads the same final count.
	var final uint64
	for i := range c.Len() {
		res, err := c.Node(i).Read(ctxT(t, 20*time.Second), "counter", nil)
		if err != nil {
			t.Fatalf("final read on node %d: %v", i, err)
		}
		v, err := decodeCount(res)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && v != final {
			t.Errorf("node %d reads %d, node 0 read %d", i, v, final)
		}
		final = v
	}
	applied := uint64(acked.Load() + resultLost.Load())
	t.Logf("final count %d: %d acknowledged with a total, %d applied with the result lost, %d unknown outcome, %d not committed",
		final, acked.Load(), resultLost.Load(), unknown.Load(), notCommitted.Load())
	for _, d := range dups {
		t.Errorf("applied twice? %s", d)
	}
	if final < applied || final > applied+uint64(unknown.Load()) {
		t.Errorf("final count %d outside [%d, %d]: applied increments %d, unknown outcomes %d", final, applied, applied+uint64(unknown.Load()), applied, unknown.Load())
	}
	if unknown.Load() == 0 && final != applied {
		t.Errorf("final count %d, want %d: no outcome was unknown", final, applied)
	}
	if len(totals) > 0 {
		keys := make([]uint64, 0, len(totals))
		for v := range totals {
			keys = append(keys, v)
		}
		if m := slices.Max(keys); m > final {
			t.Errorf("an increment returned total %d, above the final count %d", m, final)
		}
	}
	if acked.Load() < 50 {
		t.Errorf("only %d acknowledged increments: too little progress for the check to mean much", acked.Load())
	}
}
