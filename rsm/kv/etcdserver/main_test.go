package etcdserver_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

func TestMain(m *testing.M) { testutil.ExitLeakChecked(m, "google.golang.org/grpc", "go.etcd.io") }

// fastOptions make failover take about a second, and spare a loaded
// machine's group from failing over in the middle of a test.
func fastOptions() rsm.Options {
	return rsm.Options{
		FlushInterval:       2 * time.Millisecond,
		BatchMinCount:       64,
		HeartbeatInterval:   100 * time.Millisecond,
		MaxMissedHeartbeats: 10,
		LeadershipDelay:     30 * time.Millisecond,
		RequestTimeout:      10 * time.Second,
		StoreTimeout:        time.Second,
		SnapshotThreshold:   20,
		Retry:               rsm.RetryOptions{BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, ThrottleDelay: 20 * time.Millisecond},
	}
}

// group is a group of nodes on rsmtest's in-memory store, each serving
// etcd's API on a loopback port.
type group struct {
	t   *testing.T
	c   *rsmtest.Cluster
	cfg func(*etcdserver.Config)

	mu       sync.Mutex
	machines map[int]*kv.Machine
	servers  map[int]*etcdserver.Server
	grpcs    map[int]*grpc.Server
	addrs    map[int]string
}

func startGroup(t *testing.T, cfg func(*etcdserver.Config)) *group {
	t.Helper()
	return startGroupWith(t, fastOptions(), cfg)
}

// startGroupWith is startGroup with the nodes' options opts.
func startGroupWith(t *testing.T, opts rsm.Options, cfg func(*etcdserver.Config)) *group {
	t.Helper()
	g := &group{t: t, cfg: cfg, machines: map[int]*kv.Machine{}, servers: map[int]*etcdserver.Server{}, grpcs: map[int]*grpc.Server{}, addrs: map[int]string{}}
	g.c = rsmtest.Start(t, rsmtest.Config{Options: opts, Group: "etcd", Machines: func(i int) map[string]rsm.StateMachine {
		m := kv.New()
		g.mu.Lock()
		g.machines[i] = m
		g.mu.Unlock()
		return map[string]rsm.StateMachine{kv.MachineName: m}
	}})
	if _, err := g.c.WaitLeader(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := range g.c.Len() {
		g.serve(i)
	}
	t.Cleanup(func() {
		for i := range g.c.Len() {
			g.stop(i)
		}
	})
	return g
}

// serve starts node i's etcd server.
func (g *group) serve(i int) {
	t := g.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	m := g.machines[i]
	g.mu.Unlock()
	cfg := etcdserver.Config{Node: g.c.Node(i), Machine: m, ClientURLs: []string{"http://" + ln.Addr().String()}}
	if g.cfg != nil {
		g.cfg(&cfg)
	}
	s, err := etcdserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	g.mu.Lock()
	g.servers[i], g.grpcs[i], g.addrs[i] = s, gs, ln.Addr().String()
	g.mu.Unlock()
}

// stop stops node i's etcd server (not its node).
func (g *group) stop(i int) {
	g.mu.Lock()
	s, gs := g.servers[i], g.grpcs[i]
	delete(g.servers, i)
	delete(g.grpcs, i)
	g.mu.Unlock()
	if s == nil {
		return
	}
	_ = s.Close()
	gs.Stop()
}

func (g *group) server(i int) *etcdserver.Server {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.servers[i]
}

func (g *group) addr(i int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addrs[i]
}

func (g *group) leader() int {
	l := g.c.Leader()
	if l < 0 {
		g.t.Fatalf("no leader: %+v", g.c.Statuses())
	}
	return l
}

func (g *group) follower() int { return (g.leader() + 1) % g.c.Len() }

// client is an etcd client of nodes (all of them if none given).
func (g *group) client(nodes ...int) *clientv3.Client {
	t := g.t
	t.Helper()
	if len(nodes) == 0 {
		for i := range g.c.Len() {
			nodes = append(nodes, i)
		}
	}
	var eps []string
	for _, i := range nodes {
		eps = append(eps, g.addr(i))
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
