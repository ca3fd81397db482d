package rsmtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/faultstore"
)

// TestExactlyOnceThroughEvictions increments a counter from every node of
// a group that keeps only two sessions, so sessions are evicted all the
// time, while nodes crash and restart (each restart opens new sessions) and
// store writes are ambiguous.
// A command of an evicted session is refused, never applied: every
// acknowledged total is distinct, and the final count is the increments
// known applied plus some of those of unknown outcome.
func TestExactlyOnceThroughEvictions(t *testing.T) {
	seed := seedFor(t)
	opts := fastOptions()
	opts.MaxDedupClients = 2
	c := rsmtest.Start(t, rsmtest.Config{Nodes: 4, Options: opts, Machines: counterMachines, Seed: seed, Logger: nodeLogger(t)})
	if _, err := c.WaitLeader(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	var (
		acked, resultLost, unknown, expired, other atomic.Int64
		mu                                         sync.Mutex
		totals                                     = map[uint64]string{}
		dups                                       []string
	)
	const clients = 8 // two per node, sharing its session
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := id % c.Len()
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
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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
				case errors.Is(err, rsm.ErrSessionExpired):
					expired.Add(1)
					unknown.Add(1) // may have been applied before the session went
				case errors.Is(err, rsm.ErrNotCommitted), errors.Is(err, rsm.ErrBusy):
					other.Add(1)
				default:
					unknown.Add(1)
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 0xe71c))
	// Ambiguous writes lose answers of applied commands: their retries
	// meet sessions evicted in between.
	c.Faults().AmbiguousRate(faultstore.Writes, 0.05)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	for sleepCtx(ctx, between(rng, 200*time.Millisecond, 600*time.Millisecond)) {
		i := rng.IntN(c.Len())
		if l := c.Leader(); l >= 0 && rng.IntN(2) == 0 {
			i = l
		}
		t.Logf("crash %d", i)
		if err := c.Crash(i); err != nil {
			t.Logf("crash %d: %v", i, err)
		}
		sleepCtx(ctx, between(rng, 50*time.Millisecond, 300*time.Millisecond))
		if err := c.Restart(context.Background(), i); err != nil {
			t.Logf("restart %d: %v", i, err)
		}
	}
	cancel()
	c.HealAll()
	for i := range c.Len() {
		if c.Node(i) == nil {
			if err := c.Restart(t.Context(), i); err != nil {
				t.Errorf("restart node %d: %v", i, err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

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
	t.Logf("final count %d: %d acknowledged, %d applied with the result lost, %d unknown outcome (%d of them an expired session), %d not committed or busy",
		final, acked.Load(), resultLost.Load(), unknown.Load(), expired.Load(), other.Load())
	for _, d := range dups {
		t.Errorf("applied twice? %s", d)
	}
	if final < applied || final > applied+uint64(unknown.Load()) {
		t.Errorf("final count %d outside [%d, %d]", final, applied, applied+uint64(unknown.Load()))
	}
	if acked.Load() < 50 {
		t.Errorf("only %d acknowledged increments: too little progress for the check to mean much", acked.Load())
	}
}
