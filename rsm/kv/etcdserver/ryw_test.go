package etcdserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReadYourWritesOnNode: a write acknowledged by a node, the leader or
// a follower, is in that node's serializable reads afterwards, and a
// watch from now opened on it afterwards starts after the write: its
// created header is at the write's revision or later, and it never
// delivers the write. (A follower's state may lag writes acknowledged
// by other nodes, as an etcd follower's.)
func TestReadYourWritesOnNode(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 90*time.Second)
	for _, tc := range []struct {
		name string
		node int
	}{{"leader", g.leader()}, {"follower", g.follower()}} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.client(tc.node)
			for i := range 40 {
				key := fmt.Sprintf("ryw/%s/%d", tc.name, i)
				put, err := c.Put(ctx, key, "v")
				if err != nil {
					t.Fatal(err)
				}
				rev := put.Header.Revision
				get, err := c.Get(ctx, key, clientv3.WithSerializable())
				if err != nil {
					t.Fatal(err)
				}
				if len(get.Kvs) != 1 || get.Kvs[0].ModRevision != rev || get.Header.Revision < rev {
					t.Fatalf("iteration %d: serializable get after a put at revision %d: header %d, kvs %v", i, rev, get.Header.Revision, get.Kvs)
				}
				wctx, cancel := context.WithCancel(ctx)
				w := c.Watch(wctx, fmt.Sprintf("ryw/%s/", tc.name), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
				cr := next(t, w, 10*time.Second)
				if !cr.Created || cr.Header.Revision < rev {
					cancel()
					t.Fatalf("iteration %d: watch from now created at revision %d after a put at revision %d", i, cr.Header.Revision, rev)
				}
				mark, err := c.Put(ctx, key+"/mark", "m")
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				ev := next(t, w, 10*time.Second)
				cancel()
				if ev.Err() != nil {
					t.Fatal(ev.Err())
				}
				if len(ev.Events) == 0 || ev.Events[0].Kv.ModRevision != mark.Header.Revision {
					t.Fatalf("iteration %d: watch from now opened after the put at revision %d delivered %v first, want the mark at %d", i, rev, ev.Events, mark.Header.Revision)
				}
			}
		})
	}
}
