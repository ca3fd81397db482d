package rsmtest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// TestBurstThroughOneNode: far more concurrent commands through one node
// than the leader holds at once (MaxConcurrentRequests) all succeed
// within the request timeout, each applied exactly once, through a
// follower and through the leader, and the leader refuses each at most
// twice out of sequence: the node does not number more commands than the
// leader holds, and a number refused ahead of its predecessor is resent
// behind it instead of retrying in a storm. Through every node at once,
// the nodes together send more than the leader holds: some are refused
// BUSY, and the numbers behind them must not storm either.
func TestBurstThroughOneNode(t *testing.T) {
	const burst = 450
	o := fastOptions()
	o.RequestTimeout = 20 * time.Second
	reg := prometheus.NewRegistry()
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t), Registerer: reg})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.Len()
	var total uint64
	for _, tc := range []struct {
		name  string
		nodes []int
	}{{"follower", []int{f}}, {"leader", []int{l}}, {"every node", []int{0, 1, 2}}} {
		sendBurst(ctx, t, c, reg, l, tc.name, tc.nodes, burst*len(tc.nodes), &total)
	}
}

// TestBurstThroughNodeHoldingMore: members on different settings, as a
// rolling change of MaxConcurrentRequests leaves them. A follower that
// numbers up to 1,000 commands at once, while the leader holds 100,
// gets every one of a burst of 450 applied once within the request
// timeout; the leader's BUSY refusals make the numbers behind them out
// of sequence at most twice each, not in a storm.
func TestBurstThroughNodeHoldingMore(t *testing.T) {
	o := fastOptions()
	o.RequestTimeout = 20 * time.Second
	reg := prometheus.NewRegistry()
	const leaderHolds, followerHolds = 100, 1000
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t), Registerer: reg,
		NodeOptions: func(i int) rsm.Options {
			n := o
			n.MaxConcurrentRequests = followerHolds
			if i == 0 {
				n.MaxConcurrentRequests = leaderHolds
			}
			return n
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Node 0, the one holding fewer, must lead: restart the others'
	// leaders until it does.
	l, err := c.WaitLeader(ctx)
	for tries := 0; err == nil && l != 0; tries++ {
		if tries == 10 {
			t.Fatalf("node 0 did not lead after %d restarts of the leader", tries)
		}
		if err = c.Crash(l); err == nil {
			err = c.Restart(ctx, l)
		}
		if err == nil {
			l, err = c.WaitLeader(ctx)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	sendBurst(ctx, t, c, reg, l, "follower holding more", []int{1}, 450, &total)
}

// sendBurst sends n commands at once through nodes (in turn) of c, whose
// leader is l, each with the request timeout, and fails t unless every
// one succeeds, each total the counter answers is new, the counter then
// reads *total+n (which it becomes), and the leader refused at most 2n
// out of sequence.
func sendBurst(ctx context.Context, t *testing.T, c *rsmtest.Cluster, reg *prometheus.Registry, l int, name string, nodes []int, burst int, total *uint64) {
	t.Helper()
	before := handled(t, reg, "REQUEST_OUT_OF_SEQUENCE")
	seen := make(map[uint64]bool, burst)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		node := nodes[i%len(nodes)]
		wg.Go(func() {
			// Each call has the request timeout, as a caller without a
			// deadline of its own gets.
			res, err := c.Node(node).Command(context.Background(), "counter", nil)
			if err != nil {
				errs <- err
				return
			}
			v, err := decodeCount(res)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[v] {
				t.Errorf("%s: two commands answered total %d", name, v)
			}
			seen[v] = true
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed < 5 {
			t.Errorf("%s: %v", name, err)
		}
		failed++
	}
	if failed > 0 {
		t.Fatalf("%s: %d of %d commands failed", name, failed, burst)
	}
	*total += uint64(burst)
	got, err := c.Node(l).Read(ctx, "counter", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := decodeCount(got); err != nil || v != *total {
		t.Fatalf("%s: counter %d (%v), want %d: a command was applied twice or not at all", name, v, err, *total)
	}
	oos := handled(t, reg, "REQUEST_OUT_OF_SEQUENCE") - before
	t.Logf("%s: %d commands, %v refused out of sequence", name, burst, oos)
	// A number refused BUSY (the leader holds requests of other nodes,
	// or has not yet taken the last ones off its queue) makes those
	// behind it out of sequence, each at most twice: the second time it
	// waits for its predecessor's answer. Retrying at once refuses them
	// over and over, many times each.
	bound := float64(2 * burst)
	if oos > bound {
		t.Errorf("%s: the leader refused %v of %d commands out of sequence, want at most %v", name, oos, burst, bound)
	}
}

// handled is the number of requests the nodes' leaders answered with
// status outcome so far.
func handled(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "tenure_rsm_handled_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() == outcome {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestReadsBesideCommandsThroughOneNode: a node keeping as many commands
// in flight as the leader holds (MaxConcurrentRequests), with reads in
// flight beside them, as an etcd node serving writers and listers does,
// through the leader and through a follower. The reads must not take the
// commands' room at the leader: it refuses none of them out of sequence
// (a command refused BUSY would make every number behind it out of
// sequence, to be resent), and every command is applied once.
func TestReadsBesideCommandsThroughOneNode(t *testing.T) {
	const (
		bound   = 16
		each    = 40 // commands per committer
		readers = 4
	)
	o := fastOptions()
	o.MaxConcurrentRequests = bound
	reg := prometheus.NewRegistry()
	c := rsmtest.Start(t, rsmtest.Config{Options: o, Machines: counterMachines, Logger: nodeLogger(t), Registerer: reg})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, tc := range []struct {
		name string
		node int
	}{{"leader", l}, {"follower", (l + 1) % c.Len()}} {
		before := handled(t, reg, "REQUEST_OUT_OF_SEQUENCE")
		n := c.Node(tc.node)
		done := make(chan struct{})
		var readersWG, committers sync.WaitGroup
		var reads, readErrs atomic.Int64
		for range readers {
			readersWG.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if _, err := n.Read(ctx, "counter", nil); err != nil {
						readErrs.Add(1)
					}
					reads.Add(1)
				}
			})
		}
		errs := make(chan error, bound*each)
		for range bound {
			committers.Go(func() {
				for range each {
					if _, err := n.Command(ctx, "counter", nil); err != nil {
						errs <- err
					}
				}
			})
		}
		committers.Wait()
		close(done)
		readersWG.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: a command failed: %v", tc.name, err)
		}
		total += bound * each
		got, err := n.Read(ctx, "counter", nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := decodeCount(got); err != nil || v != total {
			t.Fatalf("%s: counter %d (%v), want %d: a command was applied twice or not at all", tc.name, v, err, total)
		}
		oos := handled(t, reg, "REQUEST_OUT_OF_SEQUENCE") - before
		t.Logf("%s: %d commands beside %d reads (%d failed), %v refused out of sequence", tc.name, bound*each, reads.Load(), readErrs.Load(), oos)
		if reads.Load() == 0 {
			t.Fatalf("%s: no read ran beside the commands", tc.name)
		}
		if oos != 0 {
			t.Errorf("%s: the leader refused %v commands out of sequence, want none: reads took the commands' room", tc.name, oos)
		}
	}
}
