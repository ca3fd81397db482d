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

// TestListOnNodeSeesAcknowledgedWrites: a linearizable list (a Range over
// a prefix, paginated with a limit, as kube-apiserver lists) on the
// leader or a follower holds every write the leader acknowledged before
// it was sent, under the write's revision, with a header revision at
// least the write's and a count of every key under the prefix.
func TestListOnNodeSeesAcknowledgedWrites(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 90*time.Second)
	writer := g.client(g.leader())
	for _, tc := range []struct {
		name string
		node int
	}{{"leader", g.leader()}, {"follower", g.follower()}} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.client(tc.node)
			prefix := "list/" + tc.name + "/"
			for i := range 30 {
				key := fmt.Sprintf("%s%03d", prefix, i)
				put, err := writer.Put(ctx, key, fmt.Sprintf("v%d", i))
				if err != nil {
					t.Fatal(err)
				}
				rev := put.Header.Revision
				// The newest key is last: a page of 10 from it holds it.
				from := fmt.Sprintf("%s%03d", prefix, max(0, i-9))
				page, err := c.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(10))
				if err != nil {
					t.Fatal(err)
				}
				n := len(page.Kvs)
				if n == 0 || string(page.Kvs[n-1].Key) != key || page.Kvs[n-1].ModRevision != rev || page.Header.Revision < rev {
					t.Fatalf("list from %s after a put of %s at revision %d: header %d, kvs %v", from, key, rev, page.Header.Revision, page.Kvs)
				}
				all, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(5))
				if err != nil {
					t.Fatal(err)
				}
				if all.Count != int64(i+1) || len(all.Kvs) != min(5, i+1) || all.More != (i+1 > 5) {
					t.Fatalf("list of %s after %d puts: count %d, %d kvs, more %v", prefix, i+1, all.Count, len(all.Kvs), all.More)
				}
			}
		})
	}
}
