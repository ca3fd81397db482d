package rsmtest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store/faultstore"
)

// Writes through the nodes left must resume after any single-node fault
// (docs/rsm.md, "Availability"). The bounds are generous, for a loaded
// machine; the figures are in docs/BENCHMARKS.md ("RSM availability").

// availOptions are fastOptions with a store timeout far above the
// heartbeat timeout, so that a leader relying on its store calls' own
// timeouts would hold its group well past the bounds below.
func availOptions() rsm.Options {
	o := fastOptions()
	o.HeartbeatInterval = 100 * time.Millisecond
	o.StoreTimeout = time.Minute
	o.RequestTimeout = 30 * time.Second
	return o
}

// writeWithin fails the test unless a command through node i succeeds
// within d.
func writeWithin(t *testing.T, c *rsmtest.Cluster, i int, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if _, err := c.Node(i).Command(ctx, "counter", nil); err != nil {
		t.Fatalf("%s: no write through node %d within %v: %v; statuses %+v", what, i, d, err, c.Statuses())
	}
	t.Logf("%s: a write through node %d took %v", what, i, time.Since(start).Round(time.Millisecond))
}

// TestLeaderStoreBlackHoleStepsDown: a leader whose store calls hang
// steps down (its heartbeats stop) and a follower that reaches the store
// takes over, although the followers heard it until then.
func TestLeaderStoreBlackHoleStepsDown(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: availOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustCount(t, c.Node(l), "before the black hole")
	term := c.Node(l).Status().Term
	c.NodeFaults(l).SetPartition(faultstore.BlackHoled)
	f := (l + 1) % c.Len()
	writeWithin(t, c, f, 20*time.Second, "leader's store black-holed")
	if st := c.Node(l).Status(); st.Role == rsm.Leader.String() && st.Term == term {
		t.Fatalf("the black-holed leader still leads term %d: %+v", term, st)
	}
}

// TestIsolatedFollowerDoesNotDepose: a follower cut from its peers but not
// from the store must not depose the leader the other follower still
// follows; writes through that follower go on, under the same term.
func TestIsolatedFollowerDoesNotDepose(t *testing.T) {
	o := availOptions()
	o.HeartbeatInterval = 200 * time.Millisecond // room for the leader's drop on a loaded machine
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		mustCount(t, c.Node(i), "before the partition")
	}
	term := c.Node(l).Status().Term
	iso, other := (l+1)%c.Len(), (l+2)%c.Len()
	// The guarantee is for a follower the leader's heartbeats have listed
	// (docs/rsm.md, "Limits": one not yet listed may take the leadership
	// once): cut it off only once it has heard itself listed.
	listedBy := time.Now().Add(20 * time.Second)
	for !slices.ContainsFunc(c.Node(iso).Status().Members, func(m rsm.MemberStatus) bool { return m.ID == c.ID(iso) }) {
		if time.Now().After(listedBy) {
			t.Fatalf("node %d not listed by the leader's heartbeats within 20 s: %+v", iso, c.Node(iso).Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Isolate(iso)
	// Long enough for the cut-off follower to give up on the leader a few
	// times over.
	deadline := time.Now().Add(8 * time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := c.Node(other).Command(ctx, "counter", nil)
		cancel()
		if err != nil {
			t.Fatalf("no write through node %d within 20 s with node %d isolated: %v; statuses %+v", other, iso, err, c.Statuses())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := c.Node(l).Status(); st.Role != rsm.Leader.String() || st.Term != term {
		t.Fatalf("the leader of term %d was deposed by the isolated follower: %+v; statuses %+v", term, st, c.Statuses())
	}
	c.Heal()
	writeWithin(t, c, iso, 20*time.Second, "after the partition healed")
}

// TestLoneSurvivorTakesOver: with the leader and the other follower dead,
// the one node left takes over alone.
func TestLoneSurvivorTakesOver(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: availOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		mustCount(t, c.Node(i), "before the crashes")
	}
	a, b := (l+1)%c.Len(), (l+2)%c.Len()
	if err := c.Crash(b); err != nil { // the leader drops it, reaching a
		t.Fatal(err)
	}
	writeWithin(t, c, a, 20*time.Second, "a follower crashed")
	if err := c.Crash(l); err != nil {
		t.Fatal(err)
	}
	writeWithin(t, c, a, 20*time.Second, "leader and a follower crashed")
}

// TestRestartedLoneSurvivorTakesOver: a node that restarts after the
// leader and the other follower died takes over alone, although the last
// leader_state.json lists the other follower and not it (the leader
// dropped it while it was down): a node that has reached no term yet does
// not read that as being cut off.
func TestRestartedLoneSurvivorTakesOver(t *testing.T) {
	c := rsmtest.Start(t, rsmtest.Config{Options: availOptions(), Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		mustCount(t, c.Node(i), "before the crashes")
	}
	a, b := (l+1)%c.Len(), (l+2)%c.Len()
	if err := c.Crash(a); err != nil {
		t.Fatal(err)
	}
	// The leader drops a, reaching b.
	for {
		fs := c.Node(l).Status().Followers
		if len(fs) == 1 && fs[0].ID == c.ID(b) {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the leader did not drop the crashed follower: %+v", c.Node(l).Status())
		case <-time.After(20 * time.Millisecond):
		}
	}
	writeWithin(t, c, b, 20*time.Second, "a follower crashed")
	for _, i := range []int{l, b} {
		if err := c.Crash(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restart(ctxT(t, 20*time.Second), a); err != nil {
		t.Fatal(err)
	}
	writeWithin(t, c, a, 20*time.Second, "restarted alone")
}

// TestForwardedToStalledLeaderRerouted: commands already forwarded to a
// leader that stops answering (a stopped process: connections open,
// silent) are re-routed to the new leader instead of waiting for their
// deadline, and applied once.
func TestForwardedToStalledLeaderRerouted(t *testing.T) {
	o := availOptions()
	o.FlushInterval = 300 * time.Millisecond // the commands wait at the leader when it stops
	o.RequestTimeout = time.Minute
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.Len()
	base := mustCount(t, c.Node(f), "before the stall")
	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	took := make([]time.Duration, n)
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
			defer cancel()
			_, errs[k] = c.Node(f).Command(ctx, "counter", nil)
			took[k] = time.Since(start)
		}()
	}
	time.Sleep(50 * time.Millisecond) // forwarded, held in the leader's batch
	c.Stall(l, 0)
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("command %d, forwarded to the stalled leader: %v after %v; statuses %+v", k, err, took[k], c.Statuses())
		}
	}
	t.Logf("forwarded commands answered after %v", took)
	got := mustCount(t, c.Node(f), "after the stall")
	if got != base+n+1 {
		t.Fatalf("count %d after %d commands on %d: applied more or less than once", got, n, base)
	}
}

// TestLeaderCrashFailsOverWithDefaults: with the library's default timings
// a leader crash stops writes for seconds, not S2C's 50 s.
func TestLeaderCrashFailsOverWithDefaults(t *testing.T) {
	o := rsm.Options{FlushInterval: 2 * time.Millisecond, RequestTimeout: 30 * time.Second}
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.Len()
	mustCount(t, c.Node(f), "before the crash")
	if err := c.Crash(l); err != nil {
		t.Fatal(err)
	}
	writeWithin(t, c, f, 20*time.Second, "leader crashed, default timings")
}

// TestIsolatedLeaderReplaced: a leader cut from its peers (not from the
// store) is replaced by the followers, writes through them go on while the
// cut lasts, and the cut-off node, seeing the log grow, does not take the
// leadership back.
func TestIsolatedLeaderReplaced(t *testing.T) {
	o := availOptions()
	o.HeartbeatInterval = 200 * time.Millisecond
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t)})
	l, err := c.WaitLeader(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		mustCount(t, c.Node(i), "before the partition")
	}
	a, b := (l+1)%c.Len(), (l+2)%c.Len()
	c.Isolate(l)
	writeWithin(t, c, a, 20*time.Second, "leader isolated")
	term := c.Node(a).Status().Term
	deadline := time.Now().Add(8 * time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval)
	for time.Now().Before(deadline) {
		for _, i := range []int{a, b} {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			_, err := c.Node(i).Command(ctx, "counter", nil)
			cancel()
			if err != nil {
				t.Fatalf("no write through node %d within 20 s with the leader %d isolated: %v; statuses %+v", i, l, err, c.Statuses())
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := c.Node(a).Status().Term; got != term {
		t.Fatalf("the term went from %d to %d while the old leader was cut off: it took the leadership back; statuses %+v", term, got, c.Statuses())
	}
}

// TestIsolatedIdleLeaderStaysDeposed: a leader cut from its peers (not
// from the store) while no write comes is replaced by its followers, and,
// once its idle probe shows it deposed, does not take the leadership back
// from the new leader it cannot reach: the new leader's followers, listed
// in leader_state.json without it, show it is the one cut off. The term
// stays that of the first takeover for the rest of the cut, and a write
// then is served by the new leader at once. In virtual time.
func TestIsolatedIdleLeaderStaysDeposed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := availOptions()
		g := startPipeGroup(t, o)
		l := g.leader(t)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, n := range g.nodes {
			if _, err := n.Command(ctx, "counter", nil); err != nil {
				t.Fatal(err)
			}
		}
		old := g.nodes[l].Status().Term
		g.isolate(l, true)
		// The followers take over; no write is asked of anyone.
		var term uint64
		for start := time.Now(); term == 0; time.Sleep(time.Millisecond) {
			for i, n := range g.nodes {
				if st := n.Status(); i != l && st.Role == rsm.Leader.String() && st.Term > old {
					term = st.Term
				}
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("no follower took over: %+v", g.statuses())
			}
		}
		// Long enough for the old leader's idle probe to depose it and for
		// it to give up on the new leader many times over.
		timeout := time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval
		for end := time.Now().Add(30 * timeout); time.Now().Before(end); time.Sleep(time.Millisecond) {
			for i, n := range g.nodes {
				if st := n.Status(); st.Term > term {
					t.Fatalf("node %d reached term %d after the followers took term %d: the cut-off leader took the leadership back; statuses %+v", i, st.Term, term, g.statuses())
				}
			}
		}
		if st := g.nodes[l].Status(); st.Role == rsm.Leader.String() {
			t.Fatalf("the cut-off node still leads: %+v", st)
		}
		f := (l + 1) % 3
		start := time.Now()
		if _, err := g.nodes[f].Command(ctx, "counter", nil); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > o.HeartbeatInterval {
			t.Errorf("a write after the idle cut took %v, above a heartbeat interval (%v): it waited for a takeover; statuses %+v", took, o.HeartbeatInterval, g.statuses())
		}
		if st := g.nodes[f].Status(); st.Term != term {
			t.Fatalf("the write was served under term %d, not %d; statuses %+v", st.Term, term, g.statuses())
		}
	})
}

// TestHealedFollowerRejoinsWithinHeartbeats: a follower cut from its peers
// (not from the store) for many heartbeat timeouts follows the leader
// again, and applies what the leader committed meanwhile from its
// heartbeats, within one heartbeat timeout of the heal, in virtual time:
// neither the RPC connections' reconnect backoff nor the store's retry
// delays (Retry.BaseDelay, 300 ms by default: three heartbeat intervals
// here) outlast the partition. The cut heals at several phases of the
// follower's retries.
func TestHealedFollowerRejoinsWithinHeartbeats(t *testing.T) {
	for _, retry := range []rsm.RetryOptions{{}, availOptions().Retry} {
		t.Run(fmt.Sprintf("base delay %v", retry.BaseDelay), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := availOptions()
				o.Retry = retry
				g := startPipeGroup(t, o)
				l := g.leader(t)
				f, other := (l+1)%3, (l+2)%3
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
				defer cancel()
				if _, err := g.nodes[f].Command(ctx, "counter", nil); err != nil {
					t.Fatal(err)
				}
				timeout := time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval
				const phases = 8
				var worst time.Duration
				for phase := range phases {
					g.isolate(f, true)
					time.Sleep(30*timeout + time.Duration(phase)*timeout/phases)
					if st := g.nodes[l].Status(); len(st.Followers) != 1 {
						t.Fatalf("the leader still lists the cut-off follower: %+v", st)
					}
					if _, err := g.nodes[other].Command(ctx, "counter", nil); err != nil {
						t.Fatal(err)
					}
					want := g.nodes[l].Status().ApplyIndex
					g.isolate(f, false)
					healed := time.Now()
					for {
						st, ls := g.nodes[f].Status(), g.nodes[l].Status()
						if st.Role == rsm.Follower.String() && st.State == rsm.Joined.String() && st.LeaderID == ls.ID && len(ls.Followers) == 2 && st.ApplyIndex >= want {
							break
						}
						if time.Since(healed) > time.Minute {
							t.Fatalf("no rejoin a minute after the heal: %+v %+v", st, ls)
						}
						time.Sleep(time.Millisecond)
					}
					took := time.Since(healed)
					worst = max(worst, took)
					if took > timeout {
						t.Errorf("phase %d/%d: the follower rejoined %v after the heal, above a heartbeat timeout (%v)", phase, phases, took, timeout)
					}
					if _, err := g.nodes[f].Command(ctx, "counter", nil); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("rejoined at most %v (%.1f heartbeat intervals) after the heal", worst, float64(worst)/float64(o.HeartbeatInterval))
			})
		})
	}
}
