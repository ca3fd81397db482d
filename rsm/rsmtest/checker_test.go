package rsmtest_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// localReads answers reads from the node's own machine, without asking
// the leader: stale on a follower that lags or is cut off.
type localReads struct {
	*rsm.Node
	m rsm.StateMachine
}

func (l localReads) Read(_ context.Context, _ string, q []byte) ([]byte, error) { return l.m.Query(q) }

// TestCheckerCatchesStaleReads shows that the workload and the checks have
// teeth: clients that read their node's own state, while a follower is
// cut off from the leader, see stale values, and the check says so.
func TestCheckerCatchesStaleReads(t *testing.T) {
	seed := seedFor(t)
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: kvMachines, Seed: seed})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w := &kvWorkload{c: c, h: rsmtest.NewHistory(), clients: 6, opTimeout: 2 * time.Second, seed: seed, keys: []string{"a", "b", "c"},
		submitter: func(i int, n *rsm.Node) kv.Submitter {
			if m := c.Machines(i); m != nil {
				return localReads{Node: n, m: m[kv.MachineName]}
			}
			return n
		}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.run(stop)
	}()
	time.Sleep(300 * time.Millisecond)
	// A follower cut from the leader keeps its old state for a while
	// before it gives up on the leader.
	f := (l + 1) % c.Len()
	c.Isolate(f)
	time.Sleep(150 * time.Millisecond)
	c.Heal()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	ops := w.h.Operations()
	res, info := porcupine.CheckOperationsVerbose(rsmtest.KVModel, ops, 30*time.Second)
	bad := rsmtest.CheckKVRevisions(ops)
	t.Logf("%d operations: porcupine %s, %d revision violations; %d acknowledged writes", len(ops), res, len(bad), w.stats.acked.Load())
	if res != porcupine.Illegal {
		t.Errorf("stale reads passed the check: porcupine %s", res)
	}
	// The artifacts a failing check leaves.
	t.Setenv("TENURE_ARTIFACTS", t.TempDir())
	dir, err := rsmtest.SaveHistory(t, rsmtest.KVModel, ops, info)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"history.json", "history.html"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v, %v", name, st, err)
		}
	}
}
