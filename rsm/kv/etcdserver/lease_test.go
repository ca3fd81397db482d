package etcdserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
)

// TestLease: grant, attach, time to live, list, keep alive, revoke, and
// expiry on the leader's timer.
func TestLease(t *testing.T) {
	g := startGroup(t, nil)
	// Every node: keep-alives reach whichever leads. Leases are read on
	// the node asked, so lc asks the leader.
	c, lc := g.client(), g.client(g.leader())
	ctx := ctxT(t, 60*time.Second)

	gr, err := c.Grant(ctx, 1) // below the minimum TTL
	if err != nil {
		t.Fatal(err)
	}
	if gr.ID == 0 || gr.TTL != etcdserver.DefaultMinLeaseTTL {
		t.Fatalf("grant: %+v; want an ID and TTL %d", gr, etcdserver.DefaultMinLeaseTTL)
	}
	if _, err := c.Put(ctx, "l/a", "1", clientv3.WithLease(gr.ID)); err != nil {
		t.Fatal(err)
	}
	ttl, err := lc.TimeToLive(ctx, gr.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != gr.TTL || ttl.TTL < 1 || ttl.TTL > gr.TTL || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "l/a" {
		t.Fatalf("time to live: %v %+v", err, ttl)
	}
	ls, err := lc.Leases(ctx)
	if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != gr.ID {
		t.Fatalf("leases: %v %+v", err, ls)
	}
	ka, err := c.KeepAliveOnce(ctx, gr.ID)
	if err != nil || ka.ID != gr.ID || ka.TTL != gr.TTL {
		t.Fatalf("keep alive once: %v %+v", err, ka)
	}
	if _, err := c.Grant(ctx, 10_000_000_000); !errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		t.Fatalf("grant of a TTL too large: %v", err)
	}

	// Expiry: nobody keeps the lease alive; the leader deletes its key.
	w := lc.Watch(ctx, "l/a", clientv3.WithRev(1))
	if evs := collect(t, w, 1); evs[0].Type != mvccpb.PUT {
		t.Fatalf("first event %+v", evs[0])
	}
	start := time.Now()
	if evs := collect(t, w, 1); evs[0].Type != mvccpb.DELETE {
		t.Fatalf("lease expiry: %+v", evs[0])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the lease of %ds expired after %v", gr.TTL, d)
	}
	ttl, err = lc.TimeToLive(ctx, gr.ID)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of an expired lease: %v %+v", err, ttl)
	}
	if _, err := c.KeepAliveOnce(ctx, gr.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keep alive of an expired lease: %v", err)
	}

	// A given ID is granted as given, once; revoke deletes the keys.
	raw := pb.NewLeaseClient(rawConn(t, g.addr(g.leader())))
	if r, err := raw.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 777, TTL: 60}); err != nil || r.ID != 777 || r.TTL != 60 {
		t.Fatalf("grant of ID 777: %v %+v", err, r)
	}
	if _, err := raw.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 777, TTL: 60}); !errors.Is(err, rpctypes.ErrGRPCLeaseExist) {
		t.Fatalf("second grant of ID 777: %v", err)
	}
	if _, err := c.Put(ctx, "l/b", "1", clientv3.WithLease(777)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, 777); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Get(ctx, "l/b"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("key of a revoked lease: %v %+v", err, r)
	}
	if _, err := c.Revoke(ctx, 777); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
}

// rawConn is a gRPC connection to addr, closed with the test.
func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestKeepAliveOnFollower: a follower forwards keep-alives and
// time-to-live requests to the leader and answers with the leader's
// answer: the granted TTL for a lease it renewed, TTL 0 for a lease that
// does not exist (etcd's answer, which its client reports as
// ErrLeaseNotFound), and the TTL left on the leader's timer.
func TestKeepAliveOnFollower(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 30*time.Second)
	l, f := g.leader(), g.follower()
	gr, err := g.client(l).Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := pb.NewLeaseClient(rawConn(t, g.addr(f))).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, ttl int64 }{{int64(gr.ID), 30}, {int64(gr.ID) + 1, 0}} {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: c.id}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || resp.ID != c.id || resp.TTL != c.ttl || resp.Header.MemberId != etcdserver.MemberID("etcd", g.c.ID(f)) {
			t.Fatalf("keep-alive of lease %d on a follower: %v %+v; want TTL %d in the follower's header", c.id, err, resp, c.ttl)
		}
	}
	cf := g.client(f)
	if _, err := cf.KeepAliveOnce(ctx, gr.ID+1); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keep-alive once of no lease through a follower: %v, want ErrLeaseNotFound", err)
	}
	ttl, err := cf.TimeToLive(ctx, gr.ID+1)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of no lease through a follower: %v %+v, want TTL -1", err, ttl)
	}
	if _, err := cf.Put(ctx, "f/a", "1", clientv3.WithLease(gr.ID)); err != nil {
		t.Fatal(err)
	}
	ttl, err = cf.TimeToLive(ctx, gr.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 30 || ttl.TTL < 1 || ttl.TTL > 30 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "f/a" {
		t.Fatalf("time to live through a follower: %v %+v", err, ttl)
	}
}

// skewClock is the system clock moved forward by off.
type skewClock struct {
	clock.Real
	off atomic.Int64
}

func (c *skewClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// TestGrantTimedFromApply: a lease granted through a follower is timed
// on the leader from the grant's apply, not from when the leader next
// looks at its leases (here never: the interval is an hour).
func TestGrantTimedFromApply(t *testing.T) {
	clk := &skewClock{}
	g := startGroup(t, func(c *etcdserver.Config) {
		c.Clock = clk
		c.LeaseCheckInterval = time.Hour
	})
	ctx := ctxT(t, 30*time.Second)
	cf := g.client(g.follower())
	// The leader looks once, as it does every interval: it learns it leads.
	if ttl, err := cf.TimeToLive(ctx, 1); err != nil || ttl.TTL != -1 {
		t.Fatalf("time to live of no lease: %v %+v", err, ttl)
	}
	gr, err := cf.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	clk.off.Store(int64(10 * time.Second))
	ttl, err := cf.TimeToLive(ctx, gr.ID)
	if err != nil || ttl.GrantedTTL != 30 || ttl.TTL != 20 {
		t.Fatalf("time to live 10 s after the grant: %v %+v; want 20 s left of 30", err, ttl)
	}
}

// TestKeepAliveThroughFollowerOnly: a client whose only endpoint is a
// follower keeps a lease alive past several TTLs, and across a stop of
// the leader (the new leader renews it); once it stops, the lease
// expires on the new leader.
func TestKeepAliveThroughFollowerOnly(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 90*time.Second)
	f := g.follower()
	c := g.client(f)
	const ttl = 3
	gr, err := c.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "ka/x", "1", clientv3.WithLease(gr.ID)); err != nil {
		t.Fatal(err)
	}
	kctx, stopKeeping := context.WithCancel(ctx)
	defer stopKeeping()
	kas, err := c.KeepAlive(kctx, gr.ID)
	if err != nil {
		t.Fatal(err)
	}
	renewals := make(chan int64, 1000)
	go func() {
		for r := range kas {
			renewals <- r.TTL
		}
		close(renewals)
	}()
	alive := func(what string) {
		t.Helper()
		r, err := c.Get(ctx, "ka/x", clientv3.WithSerializable())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("%s: the lease's key: %v %+v, want it kept", what, err, r)
		}
	}
	// wait lets the time pass that the lease would expire in, several
	// times, reading renewals; the channel closes if the client loses
	// the lease.
	wait := func(d time.Duration) {
		t.Helper()
		end := time.After(d)
		for {
			select {
			case r, ok := <-renewals:
				if !ok {
					t.Fatal("the client lost the lease: its keep-alive channel closed")
				}
				if r != ttl {
					t.Fatalf("a renewal of TTL %d, want %d", r, ttl)
				}
			case <-end:
				return
			}
		}
	}
	wait(3*ttl*time.Second + time.Second)
	alive("after three TTLs")

	old := g.stopLeader()
	if old == f {
		t.Fatal("the follower stopped")
	}
	waitFor(t, 20*time.Second, "a new leader", func() bool { return g.c.Leader() >= 0 && g.c.Leader() != old })
	wait(3 * ttl * time.Second)
	alive("three TTLs after the leader's stop")

	stopKeeping()
	waitFor(t, 3*ttl*time.Second, "the lease's expiry on the new leader once no longer kept alive", func() bool {
		r, err := c.Get(ctx, "ka/x", clientv3.WithSerializable())
		return err == nil && len(r.Kvs) == 0
	})
}

// TestMaintenance: Status, Alarm and MemberList, and /version and
// /health beside gRPC on one port.
func TestMaintenance(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 30*time.Second)
	l, f := g.leader(), g.follower()
	c := g.client(f)
	st, err := c.Status(ctx, g.addr(f))
	if err != nil {
		t.Fatal(err)
	}
	ns := g.c.Node(f).Status()
	if st.Version != etcdserver.Version || st.Leader != etcdserver.MemberID("etcd", g.c.ID(l)) || st.RaftTerm != ns.Term ||
		st.Header.MemberId != etcdserver.MemberID("etcd", g.c.ID(f)) {
		t.Fatalf("status %+v; node %+v", st, ns)
	}
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx, g.addr(l)); err != nil || st.RaftIndex == 0 || st.RaftIndex != g.c.Node(l).Status().ApplyIndex {
		t.Fatalf("the leader's status after a write: %v %+v", err, st)
	}
	// HashKV at one revision is the same on every node that applied it,
	// and changes with the state.
	h1, err := c.HashKV(ctx, g.addr(l), 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, err := c.HashKV(ctx, g.addr(f), h1.HashRevision)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			continue // the follower has not applied it yet
		}
		if err != nil || h.Hash != h1.Hash || h.HashRevision != h1.HashRevision {
			t.Fatalf("the follower's hash at %d: %v %+v; the leader's %+v", h1.HashRevision, err, h, h1)
		}
		break
	}
	if _, err := c.Put(ctx, "k", "other"); err != nil {
		t.Fatal(err)
	}
	if h2, err := c.HashKV(ctx, g.addr(l), 0); err != nil || h2.Hash == h1.Hash {
		t.Fatalf("hash after a write: %v %+v, before %+v", err, h2, h1)
	}
	al, err := c.AlarmList(ctx)
	if err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms: %v %+v", err, al)
	}
	ml, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var self, leader bool
	for _, m := range ml.Members {
		if m.ID == etcdserver.MemberID("etcd", g.c.ID(f)) && len(m.ClientURLs) == 1 && m.ClientURLs[0] == "http://"+g.addr(f) {
			self = true
		}
		leader = leader || m.ID == st.Leader
	}
	if !self || !leader {
		t.Fatalf("member list %+v: want this node with its client URL and the leader", ml.Members)
	}
	ml, err = g.client(l).MemberList(ctx)
	if err != nil || len(ml.Members) < 2 || ml.Members[0].ID != st.Leader {
		t.Fatalf("the leader's member list: %v %+v", err, ml)
	}

	// One port: gRPC and HTTP.
	gs := grpc.NewServer()
	g.server(f).Register(gs)
	defer gs.Stop()
	srv := httptest.NewUnstartedServer(etcdserver.Mux(gs, g.server(f).HTTP()))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	for path, want := range map[string]string{"/version": `"etcdserver":"` + etcdserver.Version + `"`, "/health": `"health":"true"`} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d %s; want %s", path, resp.StatusCode, body, want)
		}
	}
	mc := pb.NewMaintenanceClient(rawConn(t, strings.TrimPrefix(srv.URL, "http://")))
	if r, err := mc.Status(ctx, &pb.StatusRequest{}); err != nil || r.Version != etcdserver.Version {
		t.Fatalf("Status over the shared port: %v %+v", err, r)
	}
}
