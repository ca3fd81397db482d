package etcdserver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
)

func keys(r *clientv3.GetResponse) []string {
	var ks []string
	for _, kv := range r.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

func sameStrings(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// TestKV: the etcd client's put, get with range options, delete, txn and
// compaction through a follower, with etcd's headers and errors.
func TestKV(t *testing.T) {
	g := startGroup(t, nil)
	f := g.follower()
	c := g.client(f)
	ctx := ctxT(t, 30*time.Second)

	var revs []int64
	for i, k := range []string{"a/1", "a/2", "a/3", "b/1"} {
		r, err := c.Put(ctx, k, fmt.Sprintf("v%d", 4-i))
		if err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		revs = append(revs, r.Header.Revision)
	}
	if revs[0] < 1 || revs[3] != revs[0]+3 {
		t.Fatalf("put revisions %v: want consecutive", revs)
	}
	st := g.c.Node(f).Status()
	r, err := c.Get(ctx, "a/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	h := r.Header
	if h.Revision != revs[3] || h.ClusterId != etcdserver.ClusterID("etcd") || h.MemberId != etcdserver.MemberID("etcd", st.ID) || h.RaftTerm != st.Term || h.RaftTerm == 0 {
		t.Fatalf("header %+v; want revision %d, cluster %d, member %d, term %d", h, revs[3], etcdserver.ClusterID("etcd"), etcdserver.MemberID("etcd", st.ID), st.Term)
	}
	if got := keys(r); !sameStrings(got, []string{"a/1", "a/2", "a/3"}) || r.Count != 3 {
		t.Fatalf("prefix a/: %v count %d", got, r.Count)
	}
	// Limit: more and the count of every key.
	r, err = c.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithLimit(2))
	if err != nil || !r.More || r.Count != 3 || len(r.Kvs) != 2 {
		t.Fatalf("limit 2: %v, more %v count %d kvs %d", err, r.More, r.Count, len(r.Kvs))
	}
	// Sort by value, descending: v4 (a/1) first.
	r, err = c.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend))
	if err != nil || !sameStrings(keys(r), []string{"a/1", "a/2", "a/3"}) {
		t.Fatalf("sort by value descending: %v %v", err, keys(r))
	}
	r, err = c.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend))
	if err != nil || !sameStrings(keys(r), []string{"a/3", "a/2", "a/1"}) {
		t.Fatalf("sort by value ascending: %v %v", err, keys(r))
	}
	r, err = c.Get(ctx, "a/", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil || !sameStrings(keys(r), []string{"a/1", "a/2", "a/3", "b/1"}) || len(r.Kvs[0].Value) != 0 {
		t.Fatalf("from key, keys only: %v %v", err, r)
	}
	r, err = c.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 4 || len(r.Kvs) != 0 {
		t.Fatalf("count only: %v %v", err, r)
	}
	// A read at a past revision: the header says the current one.
	if _, err := c.Put(ctx, "a/1", "new"); err != nil {
		t.Fatal(err)
	}
	r, err = c.Get(ctx, "a/1", clientv3.WithRev(revs[0]))
	if err != nil || string(r.Kvs[0].Value) != "v4" || r.Header.Revision != revs[3]+1 {
		t.Fatalf("get at %d: %v %+v", revs[0], err, r)
	}
	if r.Kvs[0].Version != 1 || r.Kvs[0].CreateRevision != revs[0] {
		t.Fatalf("a/1 at %d: %+v", revs[0], r.Kvs[0])
	}
	r, err = c.Get(ctx, "a/1")
	if err != nil || r.Kvs[0].Version != 2 || r.Kvs[0].ModRevision != revs[3]+1 || r.Kvs[0].CreateRevision != revs[0] {
		t.Fatalf("a/1 now: %v %+v", err, r)
	}
	// A serializable read on the leader sees every acknowledged write.
	lc := g.client(g.leader())
	r, err = lc.Get(ctx, "a/1", clientv3.WithSerializable())
	if err != nil || string(r.Kvs[0].Value) != "new" {
		t.Fatalf("serializable get on the leader: %v %+v", err, r)
	}

	// Txn: the optimistic put Kubernetes makes.
	tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("a/1"), "=", revs[3]+1)).
		Then(clientv3.OpPut("a/1", "txn"), clientv3.OpGet("a/1")).Else(clientv3.OpGet("a/1")).Commit()
	if err != nil || !tr.Succeeded || tr.Header.Revision != revs[3]+2 {
		t.Fatalf("txn: %v %+v", err, tr)
	}
	if got := tr.Responses[1].GetResponseRange(); string(got.Kvs[0].Value) != "txn" || got.Header.MemberId == 0 {
		t.Fatalf("txn's get: %+v", got)
	}
	tr, err = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("a/1"), "=", 1)).
		Then(clientv3.OpPut("a/1", "no")).Else(clientv3.OpGet("a/1")).Commit()
	if err != nil || tr.Succeeded || string(tr.Responses[0].GetResponseRange().Kvs[0].Value) != "txn" {
		t.Fatalf("failing txn: %v %+v", err, tr)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpPut("x", "1"), clientv3.OpPut("x", "2")).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("txn putting a key twice: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
	if _, err := c.Put(ctx, "", "v"); !errors.Is(err, rpctypes.ErrEmptyKey) {
		t.Fatalf("empty key: %v, want %v", err, rpctypes.ErrEmptyKey)
	}
	if _, err := c.Put(ctx, "k", "v", clientv3.WithLease(12345)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with a lease that does not exist: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}

	// Delete a prefix, with the previous values.
	d, err := c.Delete(ctx, "a/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil || d.Deleted != 3 || len(d.PrevKvs) != 3 || string(d.PrevKvs[0].Value) != "txn" {
		t.Fatalf("delete prefix: %v %+v", err, d)
	}
	cur := d.Header.Revision

	// Compaction: reads before it fail with ErrCompacted, after the
	// current revision with ErrFutureRev.
	if _, err := c.Compact(ctx, cur-1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "a/1", clientv3.WithRev(revs[0])); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := c.Get(ctx, "a/1", clientv3.WithRev(cur+10)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get after the current revision: %v, want %v", err, rpctypes.ErrFutureRev)
	}
	if _, err := c.Get(ctx, "a/1", clientv3.WithRev(revs[0]), clientv3.WithSerializable()); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("serializable get below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := c.Compact(ctx, cur-1); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compacting again: %v, want %v", err, rpctypes.ErrCompacted)
	}
	r, err = c.Get(ctx, "b/1", clientv3.WithRev(cur-1))
	if err != nil || string(r.Kvs[0].Value) != "v1" {
		t.Fatalf("get at the compact revision: %v %+v", err, r)
	}
}

// TestLargeRange: a linearizable Range whose answer is larger than the
// group's MaxMessageSize (500 KiB here) is answered in full, on the leader
// and on a follower, with every write acknowledged before it, as etcd
// answers one; at a past revision too, and a compacted one is refused.
func TestLargeRange(t *testing.T) {
	g := startGroup(t, nil)
	l := g.leader()
	lc := g.client(l)
	ctx := ctxT(t, 60*time.Second)
	value := func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("v", 32<<10) }
	const n = 24 // 768 KiB of values
	var revs []int64
	for i := range n {
		r, err := lc.Put(ctx, fmt.Sprintf("big/%02d", i), value(i))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		revs = append(revs, r.Header.Revision)
	}
	check := func(what string, r *clientv3.GetResponse, err error, want int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(r.Kvs) != want || r.Count != int64(want) || r.More {
			t.Fatalf("%s: %d keys, count %d, more %v; want %d", what, len(r.Kvs), r.Count, r.More, want)
		}
		for i, kv := range r.Kvs {
			if string(kv.Key) != fmt.Sprintf("big/%02d", i) || string(kv.Value) != value(i) || kv.ModRevision != revs[i] {
				t.Fatalf("%s: key %d is %s at %d (%d bytes); want big/%02d at %d", what, i, kv.Key, kv.ModRevision, len(kv.Value), i, revs[i])
			}
		}
	}
	for _, node := range []int{l, g.follower()} {
		c := g.client(node)
		// A write acknowledged through the leader just before: the
		// Range on the follower must see it.
		i := len(revs)
		r, err := lc.Put(ctx, fmt.Sprintf("big/%02d", i), value(i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Header.Revision)
		got, err := c.Get(ctx, "big/", clientv3.WithPrefix())
		check(fmt.Sprintf("node %d: get big/", node), got, err, len(revs))
		if err == nil && got.Header.Revision < revs[len(revs)-1] {
			t.Fatalf("node %d: header revision %d, before the last write's %d", node, got.Header.Revision, revs[len(revs)-1])
		}
		got, err = c.Get(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(revs[n-1]))
		check(fmt.Sprintf("node %d: get big/ at revision %d", node, revs[n-1]), got, err, n)
	}
	if _, err := lc.Compact(ctx, revs[n-1]); err != nil {
		t.Fatal(err)
	}
	if _, err := g.client(g.follower()).Get(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(revs[n-2])); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("a large Range below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
}
