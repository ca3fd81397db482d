package rsm_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestThreeNodesCommandReadFailover(t *testing.T) {
	st := store.New(memstore.New())
	var hosts []*rsm.Host
	var nodes []*rsm.Node
	for _, id := range []string{"a", "b", "c"} {
		h := startHost(t, st, id)
		c := &counter{}
		n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": c}, fastOptions())
		if err != nil {
			t.Fatal(err)
		}
		hosts, nodes = append(hosts, h), append(nodes, n)
	}
	leader := waitLeader(t, nodes...)
	var want uint64
	for i, n := range nodes {
		for j := 0; j < 30; j++ {
			res, err := n.Command(ctxT(t, 10*time.Second), "counter", nil)
			if err != nil {
				t.Fatalf("node %d command %d: %v", i, j, err)
			}
			want++
			if got := decodeCount(t, res); got != want {
				t.Fatalf("count after command: got %d, want %d", got, want)
			}
		}
	}
	for i, n := range nodes {
		res, err := n.Read(ctxT(t, 10*time.Second), "counter", nil)
		if err != nil {
			t.Fatalf("read on node %d: %v", i, err)
		}
		if got := decodeCount(t, res); got != want {
			t.Fatalf("read on node %d: %d, want %d", i, got, want)
		}
	}
	// Kill the leader; the others take over and keep counting.
	li := -1
	for i, n := range nodes {
		if n == leader {
			li = i
		}
	}
	if err := hosts[li].Close(); err != nil {
		t.Fatal(err)
	}
	rest := append(append([]*rsm.Node{}, nodes[:li]...), nodes[li+1:]...)
	for j := 0; j < 10; j++ {
		res, err := rest[j%2].Command(ctxT(t, 20*time.Second), "counter", nil)
		if err != nil {
			t.Fatalf("command %d after failover: %v", j, err)
		}
		want++
		if got := decodeCount(t, res); got != want {
			t.Fatalf("count after failover: got %d, want %d", got, want)
		}
	}
	waitLeader(t, rest...)
	t.Logf("statuses: %+v %+v", rest[0].Status(), rest[1].Status())
}

// A leader that leaves tells its followers, who take over at once instead
// of waiting for missed heartbeats (here an hour's worth).
func TestLeaderLeaveHandsOver(t *testing.T) {
	st := store.New(memstore.New())
	opts := fastOptions()
	opts.HeartbeatInterval = time.Hour
	opts.RequestTimeout = 2 * time.Hour
	var nodes []*rsm.Node
	for _, id := range []string{"a", "b", "c"} {
		h := startHost(t, st, id)
		n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	leader := waitLeader(t, nodes...)
	// Wait until both followers have joined, so both hear the leave.
	deadline := time.Now().Add(20 * time.Second)
	for len(leader.Status().Followers) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("followers did not register: %+v", leader.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := leader.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	term := leader.Status().Term
	if err := leader.Leave(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var rest []*rsm.Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	if got := leader.Term(); got != term {
		t.Fatalf("Term() %d, Status().Term %d", got, term)
	}
	next := waitLeader(t, rest...)
	if got := next.Status().Term; got <= term {
		t.Fatalf("new leader's term %d, want above %d", got, term)
	}
	if got := next.Term(); got != next.Status().Term {
		t.Fatalf("new leader: Term() %d, Status().Term %d", got, next.Status().Term)
	}
	res, err := next.Command(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeCount(t, res); got != 2 {
		t.Fatalf("count %d after handover, want 2", got)
	}
}

// A node that asks to follow while the leader is still taking over is
// registered once the takeover ends, not refused: a refused follower waits
// a heartbeat interval before it asks again (here an hour).
func TestFollowRegistersDuringTakeover(t *testing.T) {
	mem := memstore.New()
	slow := faultstore.New(mem)
	// The creator's seal takes a while to land.
	slow.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(300*time.Millisecond))
	opts := fastOptions()
	opts.HeartbeatInterval, opts.MaxMissedHeartbeats = time.Hour, 10
	opts.RequestTimeout = 2 * time.Hour
	ha := startHost(t, store.New(slow), "a")
	a, err := ha.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(mem)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := st.Get(t.Context(), "g/leader_state.json"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the creator did not write leader_state.json")
		}
		time.Sleep(time.Millisecond)
	}
	if s := a.Status(); s.Role == rsm.Leader.String() {
		t.Fatalf("the creator finished its takeover before the followers asked: %+v", s)
	}
	for _, id := range []string{"b", "c"} {
		h := startHost(t, st, id)
		if _, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for len(a.Status().Followers) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("followers did not register: %+v", a.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Nodes that ask the group's creator to let them follow while it is still
// taking over wait for it instead of deposing it.
func TestFollowersWaitForATakeover(t *testing.T) {
	mem := memstore.New()
	slow := faultstore.New(mem)
	// The creator's seal takes a while to land.
	slow.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(300*time.Millisecond))
	opts := fastOptions()
	opts.HeartbeatInterval, opts.MaxMissedHeartbeats = time.Second, 10
	ha := startHost(t, store.New(slow), "a")
	a, err := ha.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(mem)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := st.Get(t.Context(), "g/leader_state.json"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the creator did not write leader_state.json")
		}
		time.Sleep(time.Millisecond)
	}
	nodes := []*rsm.Node{a}
	for _, id := range []string{"b", "c"} {
		h := startHost(t, st, id)
		n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	leader := waitLeader(t, nodes...)
	for len(leader.Status().Followers) < 2 {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("followers did not register: %+v", leader.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, n := range nodes {
		if s := n.Status(); s.Term != 1 {
			t.Fatalf("%s is at term %d: a node was deposed during the creator's takeover", s.ID, s.Term)
		}
	}
}

// Every path to a node's replica at once, through a leader change: commands
// and reads on every node, Status polled on every node, the leader's
// heartbeats (Synchronize) applying on the followers, and a node joining
// late that catches up meanwhile (a snapshot, the log, heartbeats). Under
// the race detector, and under the check every replica of this package's
// tests runs (only its owner's goroutine may use it), nothing else
// touches a replica; afterwards every replica reaches the leader's index,
// and no acknowledged command is lost.
func TestReplicaOwnedThroughLeaderChange(t *testing.T) {
	st := store.New(memstore.New())
	opts := fastOptions() // a snapshot every 20 entries
	opts.BatchMinCount = 1
	join := func(id string) *rsm.Node {
		n, err := startHost(t, st, id).Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	nodes := []*rsm.Node{join("a"), join("b"), join("c")}
	leader := waitLeader(t, nodes...)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	var acked atomic.Uint64
	load := func(n *rsm.Node) {
		wg.Add(3)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := n.Command(ctx, "counter", nil); err == nil {
					acked.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = n.Read(ctx, "counter", nil)
			}
		}()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = n.Status()
				_ = n.Restoring()
			}
		}()
	}
	for _, n := range nodes {
		load(n)
	}
	waitAcked := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for acked.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d commands acknowledged, want %d", acked.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitAcked(60)
	if err := leader.Leave(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var rest []*rsm.Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	next := waitLeader(t, rest...)
	late := join("d")
	load(late)
	rest = append(rest, late)
	waitAcked(acked.Load() + 60)
	deadline := time.Now().Add(30 * time.Second)
	for late.Status().State != "JOINED" {
		if time.Now().After(deadline) {
			t.Fatalf("the late node did not join: %+v", late.Status())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()

	// Every replica reaches the leader's: heartbeats carry the rest.
	end := next.Status().ApplyIndex
	for _, n := range rest {
		deadline := time.Now().Add(30 * time.Second)
		for n.Status().ApplyIndex < end {
			if time.Now().After(deadline) {
				t.Fatalf("%+v did not reach the leader's index %d", n.Status(), end)
			}
			time.Sleep(time.Millisecond)
		}
	}
	res, err := next.Command(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeCount(t, res); got <= acked.Load() {
		t.Fatalf("count %d, want above the %d commands acknowledged before", got, acked.Load())
	}
}
