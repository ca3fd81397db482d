package rsm_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    rsm.Options
		want string // "" for valid
	}{
		{"defaults", rsm.Options{}, ""},
		{"negative snapshot threshold", rsm.Options{SnapshotThreshold: -1}, "SnapshotThreshold"},
		{"negative flush interval", rsm.Options{FlushInterval: -time.Second}, "FlushInterval"},
		{"tiny messages", rsm.Options{MaxMessageSize: 100}, "MaxMessageSize"},
		{"timeout below flush", rsm.Options{FlushInterval: time.Second, RequestTimeout: time.Second}, "RequestTimeout"},
		{"max delay below base", rsm.Options{Retry: rsm.RetryOptions{BaseDelay: time.Second, MaxDelay: time.Millisecond}}, "Retry.MaxDelay"},
		{"deep pipeline", rsm.Options{PipelineDepth: 1000}, "PipelineDepth"},
		{"negative store timeout", rsm.Options{StoreTimeout: -1}, "StoreTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid options refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	h := rsm.HostConfig{ID: "a/b", Addr: "nohostport"}
	if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "ID") || !strings.Contains(err.Error(), "Addr") {
		t.Fatalf("host config: got %v, want errors naming ID and Addr", err)
	}
}

// Many groups on one host share its RPC server and store; each keeps its
// own state and leader.
func TestManyGroupsPerHost(t *testing.T) {
	st := store.New(memstore.New())
	hosts := []*rsm.Host{startHost(t, st, "a"), startHost(t, st, "b")}
	groups := []string{"g1", "g2", "g3"}
	nodes := map[string][]*rsm.Node{}
	for _, g := range groups {
		for _, h := range hosts {
			n, err := h.Join(t.Context(), g, map[string]rsm.StateMachine{"counter": &counter{}}, fastOptions())
			if err != nil {
				t.Fatal(err)
			}
			nodes[g] = append(nodes[g], n)
		}
	}
	if _, err := hosts[0].Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &counter{}}, fastOptions()); err == nil {
		t.Fatal("a host joined the same group twice")
	}
	for i, g := range groups {
		for j := 0; j <= i; j++ {
			if _, err := nodes[g][j%2].Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
				t.Fatalf("group %s: %v", g, err)
			}
		}
	}
	for i, g := range groups {
		for _, n := range nodes[g] {
			res, err := n.Read(ctxT(t, 10*time.Second), "counter", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeCount(t, res); got != uint64(i+1) {
				t.Fatalf("group %s counts %d, want %d", g, got, i+1)
			}
		}
	}
}

// A follower that was away while the leader snapshotted and truncated the
// log is too far behind to be synchronized from it: it catches up from
// the store's snapshot and follows again.
func TestFollowerTooFarBehindCatchesUp(t *testing.T) {
	st := store.New(memstore.New())
	opts := fastOptions()
	opts.SnapshotThreshold = 5
	opts.LogCacheSize = 2 // the leader cannot serve old entries from memory
	var hosts []*rsm.Host
	var nodes []*rsm.Node
	for _, id := range []string{"a", "b", "c"} {
		h := startHost(t, st, id)
		n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		hosts, nodes = append(hosts, h), append(nodes, n)
	}
	leader := waitLeader(t, nodes...)
	away := 0
	for nodes[away] == leader {
		away++
	}
	awayID := nodes[away].Status().ID
	if err := hosts[away].Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := leader.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for leader.Status().SnapshotIndex < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot past index 20: %+v", leader.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := st.Get(t.Context(), "g/log/00000000000000000002"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("setup: entry 2 should be truncated, got %v", err)
	}
	back := startHost(t, st, awayID)
	c := &counter{}
	n, err := back.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": c}, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := leader.Status().ApplyIndex
	for n.Status().ApplyIndex < want || n.Status().Role != "FOLLOWER" {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("the returning follower did not catch up: %+v (leader at %d)", n.Status(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := n.Status(); s.SnapshotIndex == 0 {
		t.Fatalf("the returning follower did not load the snapshot: %+v", s)
	}
	got, err := c.Query(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rsmtest.DecodeCount(got); v != 40 {
		t.Fatalf("the returning follower's machine counts %d, want 40", v)
	}
}

// A leader that has run alone caches only what its stored snapshot does
// not cover: a follower that joins later is synchronized from the store
// (the snapshot, then the log entries after it) and from the cache, and
// applies every command.
func TestFollowerJoinsLoneLeader(t *testing.T) {
	st := store.New(memstore.New())
	opts := fastOptions()
	opts.SnapshotThreshold = 5
	ha := startHost(t, st, "a")
	leader, err := ha.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, leader)
	for i := 0; i < 40; i++ {
		if _, err := leader.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for leader.Status().SnapshotIndex < 30 {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot past index 30: %+v", leader.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	hb := startHost(t, st, "b")
	c := &counter{}
	n, err := hb.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": c}, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // and some after it joined, sent from the cache
		if _, err := leader.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	want := leader.Status().ApplyIndex
	for n.Status().ApplyIndex < want || n.Status().Role != "FOLLOWER" {
		if time.Now().After(deadline) {
			t.Fatalf("the new follower did not catch up: %+v (leader at %d)", n.Status(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, err := c.Query(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := rsmtest.DecodeCount(got); v != 45 {
		t.Fatalf("the new follower's machine counts %d, want 45", v)
	}
}

// Oversized requests are refused with ErrTooLarge by the node, and with
// TOO_LARGE by a leader that receives one over the wire; messages beyond
// the transport's limit are refused by gRPC. None reaches the log.
func TestOversizedRequests(t *testing.T) {
	st := store.New(memstore.New())
	opts := fastOptions()
	opts.MaxMessageSize = 64 << 10
	h := startPlainHost(t, st, "a") // the test talks to it with a bare client
	n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	big := bytes.Repeat([]byte{1}, 65<<10)
	if _, err := n.Command(ctxT(t, 5*time.Second), "counter", big); !errors.Is(err, rsm.ErrTooLarge) {
		t.Fatalf("Command with %d bytes: got %v, want ErrTooLarge", len(big), err)
	}
	if _, err := n.Command(ctxT(t, 5*time.Second), "nope", nil); !errors.Is(err, rsm.ErrUnknownMachine) {
		t.Fatalf("unknown machine: got %v", err)
	}

	conn, err := grpc.NewClient("passthrough:///"+h.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(128<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rsmpb.NewReplicaClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := c.Submit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rsmpb.StateRequest{Group: "g", Id: 1, Machine: "counter", Data: big, Client: "x#1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != rsmpb.Status_TOO_LARGE {
		t.Fatalf("over the wire: got %s, want TOO_LARGE", resp.Status)
	}
	if err := stream.Send(&rsmpb.StateRequest{Group: "nogroup", Id: 2, Machine: "counter"}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Recv(); err != nil || resp.Status != rsmpb.Status_UNKNOWN_GROUP {
		t.Fatalf("unknown group: got %v, %v", resp, err)
	}
	// Beyond the transport's limit: the stream fails, the server lives.
	huge := bytes.Repeat([]byte{2}, 65<<20)
	_ = stream.Send(&rsmpb.StateRequest{Group: "g", Id: 3, Machine: "counter", Data: huge})
	if _, err := stream.Recv(); err == nil {
		t.Fatal("a 65 MiB message was accepted")
	}
	res, err := n.Command(ctxT(t, 5*time.Second), "counter", nil)
	if err != nil {
		t.Fatalf("after the oversized messages: %v", err)
	}
	if got := decodeCount(t, res); got != 1 {
		t.Fatalf("count %d, want 1: an oversized request was applied", got)
	}
}

// Every S2C metric family is exported, and the commit path moves them.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), store.New(memstore.New()), rsm.HostConfig{ID: "a", Addr: lis.Addr().String(), Listener: lis,
		Registerer: reg, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := n.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Read(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
	}
	for _, name := range []string{"leader_update_seconds", "leader_check_seconds", "leader_attempt_seconds", "catchup_seconds",
		"join_seconds", "log_append_seconds", "request_handle_seconds", "request_application_seconds",
		"committed_batches_total", "handled_batches_total", "handled_requests_total", "request_submit_seconds",
		"confirm_reads_total", "role", "term", "apply_index", "server_ready"} {
		if !have["tenure_rsm_"+name] {
			t.Errorf("metric tenure_rsm_%s missing", name)
		}
	}
	if got := counterSum(t, reg, "tenure_rsm_committed_batches_total"); got < 5 {
		t.Errorf("committed batches %v, want at least 5", got)
	}
	// A second host in the same process registers its own series.
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := rsm.NewHost(t.Context(), store.New(memstore.New()), rsm.HostConfig{ID: "b", Addr: lis2.Addr().String(), Listener: lis2,
		Registerer: reg, Logger: quietLogger(t)})
	if err != nil {
		t.Fatalf("a second host on the same registry: %v", err)
	}
	defer h2.Close()
	families, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, f := range families {
		if f.GetName() == "tenure_rsm_server_ready" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "node" {
						nodes[l.GetValue()] = true
					}
				}
			}
		}
	}
	if !nodes["a"] || !nodes["b"] {
		t.Errorf("server_ready series by node: %v, want a and b", nodes)
	}
}

// counterSum adds up every series of the counter name.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
