package rsm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestKVColdStartPreparedRuns: a node that starts cold on the kv machine's
// base and the segments after it, their commands prepared, serves every
// key as the group wrote it. The segments hold thousands of puts from
// eight writers: between deletes and swaps that need the puts before them
// in the tree, then more in a row than one of the machine's sorted runs
// holds. Under the race detector it also checks the runs' goroutine
// against the node's.
func TestKVColdStartPreparedRuns(t *testing.T) {
	t.Cleanup(rsm.SetPrepareFrom(0))
	st := store.New(memstore.New())
	opts := fastOptions()
	opts.SnapshotThreshold = 100
	const writers, keysEach = 8, 250

	h := startHost(t, st, "a")
	n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{kv.MachineName: kv.New()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	c := kv.NewClient(n)
	ctx := ctxT(t, time.Minute)
	want := make([]map[string]kv.KeyValue, writers)
	var wg, mixed sync.WaitGroup
	mixed.Add(writers)
	errs := make(chan error, writers)
	for w := range writers {
		want[w] = map[string]kv.KeyValue{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := false // at the barrier after the mixed phase
			defer func() {
				if !arrived { // failed before it: the others go on
					mixed.Done()
				}
			}()
			mine := want[w]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			put := func(key string, value []byte) error {
				rev, err := c.Put(ctx, key, value)
				if err != nil {
					return err
				}
				kvw, ok := mine[key]
				if !ok {
					kvw.CreateRevision = rev
				}
				kvw.Key, kvw.Value, kvw.ModRevision = key, value, rev
				mine[key] = kvw
				return nil
			}
			// A base of large values first, then small changes: the
			// segments after the base stay far below three times it.
			for i := range keysEach {
				if err := put(fmt.Sprintf("w%d/k%03d", w, i), []byte(strings.Repeat("b", 2048))); err != nil {
					errs <- err
					return
				}
			}
			// Then puts mixed with deletes and swaps, then only puts:
			// more than a run's worth (1,024) in a row.
			for i := range 700 {
				key := fmt.Sprintf("w%d/k%03d", w, rng.IntN(keysEach))
				op := rng.IntN(10)
				if i == 400 { // every writer's deletes and swaps are done
					arrived = true
					mixed.Done()
					mixed.Wait()
				}
				if i >= 400 {
					op = 9
				}
				switch op {
				case 0:
					existed, _, err := c.Delete(ctx, key)
					if err != nil {
						errs <- err
						return
					}
					if _, ok := mine[key]; ok != existed {
						errs <- fmt.Errorf("delete %s: existed %v, want %v", key, existed, ok)
						return
					}
					delete(mine, key)
				case 1:
					value := []byte(fmt.Sprintf("swap %d", i))
					expect := mine[key].ModRevision
					swapped, rev, err := c.CAS(ctx, key, expect, value)
					if err != nil || !swapped {
						errs <- fmt.Errorf("swap %s at %d: %v %v", key, expect, swapped, err)
						return
					}
					kvw, ok := mine[key]
					if !ok {
						kvw.CreateRevision = rev
					}
					kvw.Key, kvw.Value, kvw.ModRevision = key, value, rev
					mine[key] = kvw
				default:
					if err := put(key, []byte(fmt.Sprintf("put %d by %d", i, w))); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	applied := n.Status().ApplyIndex
	deadline := time.Now().Add(20 * time.Second)
	for n.Status().SnapshotIndex+uint64(opts.SnapshotThreshold) <= applied {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot near index %d within 20 s: %+v", applied, n.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = h.Close()

	h = startHost(t, st, "b")
	m := kv.New()
	n, err = h.Join(t.Context(), "g", map[string]rsm.StateMachine{kv.MachineName: m}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	c = kv.NewClient(n)
	if s := n.Status(); s.SnapshotIndex == 0 {
		t.Fatalf("the cold node loaded no snapshot: %+v", s)
	}
	total := 0
	for w := range writers {
		total += len(want[w])
		for i := range keysEach {
			key := fmt.Sprintf("w%d/k%03d", w, i)
			got, err := c.Get(ctx, key)
			wkv, ok := want[w][key]
			switch {
			case !ok && err == nil:
				t.Fatalf("%s: %+v after a cold start; want it deleted", key, got)
			case !ok:
			case err != nil:
				t.Fatalf("%s: %v after a cold start", key, err)
			case string(got.Value) != string(wkv.Value) || got.CreateRevision != wkv.CreateRevision || got.ModRevision != wkv.ModRevision:
				t.Fatalf("%s after a cold start: %.20q created %d modified %d; want %.20q, %d, %d", key,
					got.Value, got.CreateRevision, got.ModRevision, wkv.Value, wkv.CreateRevision, wkv.ModRevision)
			}
		}
	}
	if m.Len() != total {
		t.Fatalf("%d keys after a cold start, want %d", m.Len(), total)
	}
}
