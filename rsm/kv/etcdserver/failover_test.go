package etcdserver_test

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLeaderStops: the leader's node stops in the middle of a run of
// writes; the client goes on through the others, a watch on a follower
// sees every revision once and in order, and a lease nobody keeps alive
// still expires under the new leader.
func TestLeaderStops(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 90*time.Second)
	l := g.leader()
	f := (l + 1) % g.c.Len()
	c := g.client()

	start, err := c.Put(ctx, "run/0", "0")
	if err != nil {
		t.Fatal(err)
	}
	w := g.client(f).Watch(ctx, "run/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision))
	lease, err := c.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := c.Put(ctx, "leased", "x", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int) {
		t.Helper()
		k := fmt.Sprintf("run/%d", i)
		for {
			_, err := c.Put(ctx, k, fmt.Sprint(i))
			if err == nil {
				return
			}
			// A write in flight to the stopped node, or refused while no
			// node leads: the etcd client reports it; put again.
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("put %s: %v", k, err)
			}
			t.Logf("put %s: %v; again", k, err)
		}
	}
	for i := 1; i <= 10; i++ {
		put(i)
	}
	g.stop(l)
	if err := g.c.Crash(l); err != nil {
		t.Fatal(err)
	}
	for i := 11; i <= 20; i++ {
		put(i)
	}
	last, err := c.Get(ctx, "run/20")
	if err != nil || string(last.Kvs[0].Value) != "20" {
		t.Fatalf("get after the leader stopped: %v %+v", err, last)
	}
	if nl := g.leader(); nl == l {
		t.Fatalf("node %d still leads", l)
	}
	// Every revision from start to the last write, once, in order: only
	// puts were made, and the lease's is not under run/.
	want := start.Header.Revision
	for want <= last.Kvs[0].ModRevision {
		r := next(t, w, 30*time.Second)
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
		for _, ev := range r.Events {
			if want == leased.Header.Revision {
				want++
			}
			if ev.Kv.ModRevision != want {
				t.Fatalf("event at revision %d, want %d: a gap, a duplicate or out of order", ev.Kv.ModRevision, want)
			}
			want++
		}
	}
	// The lease: the new leader gave it a full TTL when it took over.
	nc := g.client(g.leader())
	lw := nc.Watch(ctx, "leased", clientv3.WithRev(1))
	for {
		r := next(t, lw, 30*time.Second)
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
		if n := len(r.Events); n > 0 && r.Events[n-1].Type == mvccpb.DELETE {
			break
		}
	}
	if ttl, err := nc.TimeToLive(ctx, lease.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("the lease after expiry: %v %+v", err, ttl)
	}
}
