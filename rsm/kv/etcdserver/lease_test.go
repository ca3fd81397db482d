package etcdserver_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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

// TestKeepAliveOnFollower: a follower does not time leases; its answer
// to a keep-alive is Unavailable, which the etcd client retries on a new
// stream, naming the leader.
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
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(gr.ID)}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), g.c.ID(l)) {
		t.Fatalf("keep-alive on a follower: %v; want Unavailable naming leader %s", err, g.c.ID(l))
	}
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
