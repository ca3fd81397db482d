package etcddiff

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// freePort is a loopback port free when asked: etcd's peer URL must be
// known before it listens.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func mustURL(t *testing.T, s string) url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}

// startEtcd starts an embedded etcd on a temporary directory and
// returns a client of it.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "diff"
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.Logger = "zap"
	client, peer := mustURL(t, "http://"+freePort(t)), mustURL(t, "http://"+freePort(t))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd did not start within 30s")
	}
	return newClient(t, client.Host)
}

func newClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tenureGroup is a group of three nodes on rsmtest's in-memory store,
// each serving etcd's API on a loopback port.
type tenureGroup struct {
	c     *rsmtest.Cluster
	addrs []string
}

// groupOptions are etcdserver's tests' options: failover in about a
// second, and no failover of a loaded machine's group mid-test.
func groupOptions() rsm.Options {
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

func startTenure(t *testing.T) *tenureGroup {
	t.Helper()
	var mu sync.Mutex
	machines := map[int]*kv.Machine{}
	c := rsmtest.Start(t, rsmtest.Config{Options: groupOptions(), Group: "etcd", Machines: func(i int) map[string]rsm.StateMachine {
		m := kv.New()
		mu.Lock()
		machines[i] = m
		mu.Unlock()
		return map[string]rsm.StateMachine{kv.MachineName: m}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	g := &tenureGroup{c: c}
	for i := range c.Len() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		m := machines[i]
		mu.Unlock()
		s, err := etcdserver.New(etcdserver.Config{Node: c.Node(i), Machine: m, ClientURLs: []string{"http://" + ln.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		s.Register(gs)
		go func() { _ = gs.Serve(ln) }()
		t.Cleanup(func() {
			_ = s.Close()
			gs.Stop()
		})
		g.addrs = append(g.addrs, ln.Addr().String())
	}
	return g
}
