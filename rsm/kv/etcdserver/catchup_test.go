package etcdserver_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWatchOnFollowerCatchingUp: a follower cut from its peers while the
// group writes past a few snapshots catches up when the network heals
// (from the store's log or snapshot); a watch on it sees every revision
// once, in order.
func TestWatchOnFollowerCatchingUp(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 90*time.Second)
	l := g.leader()
	f := (l + 1) % g.c.Len()
	lc := g.client(l)
	start, err := lc.Put(ctx, "cu/0", "0")
	if err != nil {
		t.Fatal(err)
	}
	w := g.client(f).Watch(ctx, "cu/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision), clientv3.WithCreatedNotify())
	next(t, w, 10*time.Second)
	g.c.Isolate(f)
	var last int64
	for i := 1; i <= 100; i++ { // snapshots every 20 entries
		r, err := lc.Put(ctx, fmt.Sprintf("cu/%d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	g.c.Heal()
	want := start.Header.Revision
	for want <= last {
		r := next(t, w, 60*time.Second)
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != want {
				t.Fatalf("event at revision %d, want %d: a gap, a duplicate or out of order", ev.Kv.ModRevision, want)
			}
			want++
		}
	}
}
