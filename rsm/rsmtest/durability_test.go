package rsmtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// TestDurability writes through leader crashes, pauses and ambiguous store
// writes, each key written by one client only, then crashes every node at
// once with writes in flight. Fresh nodes, with empty machines, on the same
// store must read every key as its last acknowledged write left it (or as
// a later write of unknown outcome did), and the whole history, their
// reads included, must be linearizable.
func TestDurability(t *testing.T) {
	seed := seedFor(t)
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: kvMachines, Seed: seed, Logger: nodeLogger(t)})
	if _, err := c.WaitLeader(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	w := &kvWorkload{c: c, h: rsmtest.NewHistory(), clients: 4, opTimeout: 2 * time.Second, shortTimeouts: 0.1, owners: true, seed: seed}
	for i := range 8 {
		w.keys = append(w.keys, fmt.Sprintf("d%d", i))
	}
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		w.run(stop)
	}()
	start := time.Now()
	var events []string
	logf := func(format string, args ...any) {
		events = append(events, fmt.Sprintf("%6.3fs ", time.Since(start).Seconds())+fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	mixedNemesis(ctx, c, rand.New(rand.NewPCG(seed, 0xfa17)), logf)
	cancel()
	for i := range c.Len() {
		if c.Node(i) == nil {
			if err := c.Restart(t.Context(), i); err != nil {
				t.Fatalf("restart node %d: %v", i, err)
			}
		}
	}
	c.HealAll()
	logf("healed")
	time.Sleep(500 * time.Millisecond)

	// Crash every node at once, with writes in flight.
	logf("crash every node")
	var crash sync.WaitGroup
	for i := range c.Len() {
		crash.Add(1)
		go func() {
			defer crash.Done()
			if err := c.Crash(i); err != nil {
				t.Errorf("crash %d: %v", i, err)
			}
		}()
	}
	crash.Wait()
	close(stop)
	cwg.Wait()
	for _, e := range events {
		t.Log("nemesis: " + e)
	}
	t.Logf("%d operations; %s", w.h.Len(), w.stats.String())

	for i := range c.Len() {
		if err := c.Restart(t.Context(), i); err != nil {
			t.Fatalf("restart node %d: %v", i, err)
		}
	}
	rctx := ctxT(t, 30*time.Second)
	var finals []map[string]rsmtest.KVOutput
	for i := range c.Len() {
		finals = append(finals, w.finalReads(rctx, t, i))
	}
	ops := w.h.Operations()
	for _, k := range w.keys {
		want := possibleFinal(ops, k)
		for i, f := range finals {
			if !slices.ContainsFunc(want, func(o rsmtest.KVOutput) bool { return sameState(o, f[k]) }) {
				t.Errorf("after the restart node %d reads %s as %s; the writes before the crash allow only %s", i, k, describeState(f[k]), describeStates(want))
			}
		}
	}
	if got := w.stats.acked.Load(); got < 50 {
		t.Errorf("only %d acknowledged writes: too little progress for the check to mean much", got)
	}
	w.check(t)
}

// possibleFinal returns the states key may be in after ops, written by one
// client at a time: the state its last acknowledged write left, or that of
// a write of unknown outcome invoked after it. Only presence and value
// are compared.
func possibleFinal(ops []porcupine.Operation, key string) []rsmtest.KVOutput {
	var writes []porcupine.Operation
	for _, op := range ops {
		in := op.Input.(rsmtest.KVInput)
		if in.Key == key && in.Op != rsmtest.KVGet {
			writes = append(writes, op)
		}
	}
	slices.SortFunc(writes, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	effect := func(op porcupine.Operation) rsmtest.KVOutput {
		in := op.Input.(rsmtest.KVInput)
		if in.Op == rsmtest.KVDelete {
			return rsmtest.KVOutput{}
		}
		return rsmtest.KVOutput{Found: true, Value: in.Value}
	}
	states := []rsmtest.KVOutput{{}} // absent: never written
	for _, op := range writes {
		if op.Return != rsmtest.Pending {
			states = []rsmtest.KVOutput{effect(op)}
		} else {
			states = append(states, effect(op))
		}
	}
	return states
}

func sameState(a, b rsmtest.KVOutput) bool { return a.Found == b.Found && a.Value == b.Value }

func describeState(o rsmtest.KVOutput) string {
	if !o.Found {
		return "absent"
	}
	return fmt.Sprintf("%q", o.Value)
}

func describeStates(os []rsmtest.KVOutput) string {
	var s []string
	for _, o := range os {
		s = append(s, describeState(o))
	}
	return fmt.Sprint(s)
}
