package rsmtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/faultstore"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustCount(t *testing.T, n *rsm.Node, what string) uint64 {
	t.Helper()
	res, err := n.Command(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	v, err := decodeCount(res)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestClusterCrashRestart(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		mustCount(t, c.Node(i), "before the crash")
	}
	if err := c.Crash(l); err != nil {
		t.Fatal(err)
	}
	if c.Node(l) != nil {
		t.Fatal("a crashed node is still there")
	}
	other := (l + 1) % c.Len()
	if got := mustCount(t, c.Node(other), "after the crash"); got != 4 {
		t.Fatalf("count %d after the crash, want 4", got)
	}
	if err := c.Restart(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(t.Context(), l); err == nil {
		t.Fatal("restarting a running node succeeded")
	}
	if got := mustCount(t, c.Node(l), "on the restarted node"); got != 5 {
		t.Fatalf("count %d on the restarted node, want 5", got)
	}
}

func TestClusterIsolatedFollowerCannotServe(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.Len()
	mustCount(t, c.Node(f), "before the partition")
	c.Isolate(f)
	if !c.Partitioned(f, l) {
		t.Fatal("Isolate did not cut the link to the leader")
	}
	// The follower can reach the store but not the leader: its command
	// cannot be served through it. (It may still take over, deposing the
	// leader, since it misses heartbeats; either way the count is exact.)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = c.Node(f).Command(ctx, "counter", nil)
	cancel()
	c.Heal()
	if c.Partitioned(f, l) {
		t.Fatal("Heal left the link cut")
	}
	got := mustCount(t, c.Node(l), "after healing")
	if err == nil && got != 3 || err != nil && got != 2 && got != 3 {
		t.Fatalf("count %d after healing (the isolated command returned %v)", got, err)
	}
}

func TestClusterPauseHoldsStoreCalls(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustCount(t, c.Node(l), "before the pause")
	c.Pause(l, 0)
	if err := c.Settled(ctxT(t, 10*time.Second), l); err != nil { // calls already past the gate finish
		t.Fatal(err)
	}
	before := c.NodeFaults(l).Counts().Total()
	// A read, not a command: an abandoned command wedges its node (see
	// TestCommandAfterAbandonedCommand).
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = c.Node(l).Read(ctx, "counter", nil)
	cancel()
	if err == nil {
		t.Fatal("a paused leader answered a linearizable read")
	}
	if got := c.NodeFaults(l).Counts().Total(); got != before {
		t.Fatalf("a paused node made %d store calls", got-before)
	}
	c.Resume(l)
	res, err := c.Node(l).Read(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatalf("read after resuming: %v", err)
	}
	if got, _ := decodeCount(res); got != 1 {
		t.Fatalf("count %d after resuming, want 1", got)
	}
	if c.NodeFaults(l).Counts().Total() == before {
		t.Fatal("no store calls after resuming")
	}
}

// TestCommandAfterAbandonedCommand: a command whose caller gave up while
// its node could not commit it (its outcome unknown) must not stop the
// node's later commands from committing once the fault is gone.
func TestCommandAfterAbandonedCommand(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustCount(t, c.Node(l), "before the pause")
	c.Pause(l, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = c.Node(l).Command(ctx, "counter", nil)
	cancel()
	if !errors.Is(err, rsm.ErrUnknownOutcome) {
		t.Fatalf("command on a paused leader: got %v, want ErrUnknownOutcome", err)
	}
	c.Resume(l)
	got := mustCount(t, c.Node(l), "a later command through the same node")
	if got != 2 && got != 3 {
		t.Fatalf("count %d, want 2 or 3", got)
	}
}

func TestClusterNodeCutFromStore(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: fastOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.Len()
	c.NodeFaults(f).SetPartition(faultstore.Partitioned)
	// A follower needs no store to forward to the leader.
	mustCount(t, c.Node(f), "through a follower cut from the store")
	c.NodeFaults(f).SetPartition(faultstore.Connected)
	if c.Faults().Counts().Total() == 0 {
		t.Fatal("the shared fault layer counted no calls")
	}
}
