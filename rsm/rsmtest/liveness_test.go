package rsmtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/faultstore"
)

// The group must serve again soon after its leader loses the store, while
// the other nodes still reach it: S2C needs one live node with the store,
// and the followers here have it.

// TestLeaderCutFromStoreFailsOver cuts the leader from the store for good
// (calls fail at once) and expects a follower to take over.
func TestLeaderCutFromStoreFailsOver(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustCount(t, c.Node(l), "before the cut")
	c.NodeFaults(l).SetPartition(faultstore.Partitioned)
	start := time.Now()
	f := (l + 1) % c.Len()
	if got := mustCount(t, c.Node(f), "through a follower, with the leader cut from the store"); got != 2 && got != 3 {
		t.Fatalf("count %d, want 2 (or 3 if the leader's own write landed)", got)
	}
	t.Logf("served again after %v; statuses %+v", time.Since(start).Round(time.Millisecond), c.Statuses())
}

// TestLeaderStoreCallsHang makes the leader's store calls hang (no answer,
// as on a dead connection) for half a second, then reconnects it: the
// hung calls never return, as a request on a dead TCP connection without a
// timeout would not. The group must serve again.
func TestLeaderStoreCallsHang(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustCount(t, c.Node(l), "before the store hangs")
	c.NodeFaults(l).SetPartition(faultstore.BlackHoled)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, _ = c.Node(l).Command(ctx, "counter", nil) // its batch's write hangs
	cancel()
	time.Sleep(200 * time.Millisecond)
	c.NodeFaults(l).SetPartition(faultstore.Connected)
	start := time.Now()
	f := (l + 1) % c.Len()
	if _, err := c.Node(f).Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatalf("through a follower, 5 s after the leader's store calls hung: %v; statuses %+v", err, c.Statuses())
	}
	t.Logf("served again after %v; statuses %+v", time.Since(start).Round(time.Millisecond), c.Statuses())
}
