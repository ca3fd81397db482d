package etcdserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/rsm/kv/etcdserver"
)

// next receives the next watch response, failing the test on a closed
// channel or after d.
func next(t *testing.T, ch clientv3.WatchChan, d time.Duration) clientv3.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return r
	case <-time.After(d):
		t.Fatalf("no watch response within %v", d)
	}
	return clientv3.WatchResponse{}
}

// collect receives events until it has n, failing on an error.
func collect(t *testing.T, ch clientv3.WatchChan, n int) []*clientv3.Event {
	t.Helper()
	var evs []*clientv3.Event
	for len(evs) < n {
		r := next(t, ch, 20*time.Second)
		if err := r.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
		evs = append(evs, r.Events...)
	}
	if len(evs) != n {
		t.Fatalf("%d events, want %d: %v", len(evs), n, evs)
	}
	return evs
}

func evString(evs []*clientv3.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Type.String() + " " + string(e.Kv.Key) + "=" + string(e.Kv.Value) + " ")
	}
	return b.String()
}

// TestWatch: watches on a follower see every write in revision order,
// from now or from a past revision, with prev_kv and filters; a
// compacted start is answered with the compact revision.
func TestWatch(t *testing.T) {
	g := startGroup(t, nil)
	f := g.follower()
	c := g.client(f)
	ctx := ctxT(t, 60*time.Second)

	p1, err := c.Put(ctx, "w/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	live := c.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify(), clientv3.WithRev(p1.Header.Revision+1))
	if r := next(t, live, 10*time.Second); !r.Created {
		t.Fatalf("created response %+v", r)
	}
	noPut := c.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(p1.Header.Revision+1))
	for _, op := range []clientv3.Op{clientv3.OpPut("w/a", "2"), clientv3.OpPut("w/b", "3"), clientv3.OpPut("other", "x"), clientv3.OpDelete("w/a")} {
		if _, err := c.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	evs := collect(t, live, 3)
	if got, want := evString(evs), "PUT w/a=2 PUT w/b=3 DELETE w/a= "; got != want {
		t.Fatalf("live events %q, want %q", got, want)
	}
	if evs[0].PrevKv == nil || string(evs[0].PrevKv.Value) != "1" || evs[2].PrevKv == nil || string(evs[2].PrevKv.Value) != "2" {
		t.Fatalf("prev kvs: %+v %+v", evs[0].PrevKv, evs[2].PrevKv)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Kv.ModRevision <= evs[i-1].Kv.ModRevision {
			t.Fatalf("events out of order: %v", evs)
		}
	}
	if d := collect(t, noPut, 1); d[0].Type != mvccpb.DELETE || d[0].PrevKv != nil {
		t.Fatalf("filtered watch got %+v", d[0])
	}

	// From a past revision: the history, then live events, no gap.
	past := c.Watch(ctx, "w/a", clientv3.WithRev(p1.Header.Revision))
	if _, err := c.Put(ctx, "w/a", "4"); err != nil {
		t.Fatal(err)
	}
	if got, want := evString(collect(t, past, 4)), "PUT w/a=1 PUT w/a=2 DELETE w/a= PUT w/a=4 "; got != want {
		t.Fatalf("events from revision %d: %q, want %q", p1.Header.Revision, got, want)
	}

	// RequestProgress: watch ID -1, after every event up to its
	// revision; asked again until the follower has applied the last write.
	cur, err := c.Get(ctx, "w/a")
	if err != nil {
		t.Fatal(err)
	}
	var lastEvent int64
	for progress := int64(0); progress < cur.Header.Revision; {
		if err := c.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			r := next(t, live, 10*time.Second)
			if r.Err() != nil {
				t.Fatal(r.Err())
			}
			if r.IsProgressNotify() {
				progress = r.Header.Revision
				if progress < lastEvent || progress > cur.Header.Revision {
					t.Fatalf("progress at %d; events reached %d, the current revision is %d", progress, lastEvent, cur.Header.Revision)
				}
				break
			}
			lastEvent = r.Events[len(r.Events)-1].Kv.ModRevision
		}
	}

	// Compacted: the watch ends with ErrCompacted and the revision.
	if _, err := c.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// (On the leader: a follower may not have applied the compaction yet.)
	old := g.client(g.leader()).Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(p1.Header.Revision))
	r := next(t, old, 10*time.Second)
	// etcd's response has revision 0 in its header.
	if !errors.Is(r.Err(), rpctypes.ErrCompacted) || r.CompactRevision != cur.Header.Revision || !r.Canceled || r.Header.Revision != 0 {
		t.Fatalf("watch from a compacted revision: %+v err %v", r, r.Err())
	}
}

// TestWatchProgressNotify: a watch with progress notifications gets one
// per interval while nothing happens, at the current revision.
func TestWatchProgressNotify(t *testing.T) {
	g := startGroup(t, func(c *etcdserver.Config) { c.ProgressNotifyInterval = 50 * time.Millisecond })
	c := g.client(g.follower())
	ctx := ctxT(t, 30*time.Second)
	p, err := c.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	w := c.Watch(ctx, "k", clientv3.WithProgressNotify(), clientv3.WithRev(p.Header.Revision+1))
	var seen int
	for seen < 2 {
		r := next(t, w, 10*time.Second)
		if !r.IsProgressNotify() || r.Header.Revision != p.Header.Revision {
			t.Fatalf("got %+v, want a progress notification at %d", r, p.Header.Revision)
		}
		seen++
	}
}

// TestWatchFragment: a watch that asks for fragments gets a large
// response in pieces, marked as fragments but the last, which the client
// joins again.
func TestWatchFragment(t *testing.T) {
	g := startGroup(t, nil)
	l := g.leader()
	etcdserver.SetFragmentBytes(g.server(l), 100)
	c := g.client(l)
	ctx := ctxT(t, 30*time.Second)
	ops := []clientv3.Op{}
	for _, k := range []string{"f/1", "f/2", "f/3", "f/4"} {
		ops = append(ops, clientv3.OpPut(k, strings.Repeat("x", 60)))
	}
	w := c.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithFragment(), clientv3.WithCreatedNotify())
	next(t, w, 10*time.Second)
	raw, err := pb.NewWatchClient(rawConn(t, g.addr(l))).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("f/"), RangeEnd: []byte("f0"), Fragment: true}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := raw.Recv(); err != nil || !r.Created {
		t.Fatalf("created: %v %+v", err, r)
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	r := next(t, w, 10*time.Second)
	if len(r.Events) != 4 {
		t.Fatalf("%d events in the joined response, want 4", len(r.Events))
	}
	var pieces []int
	for n := 0; n < 4; {
		r, err := raw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		n += len(r.Events)
		pieces = append(pieces, len(r.Events))
		if r.Fragment != (n < 4) {
			t.Fatalf("piece %d (%d events, %d of 4) has fragment %v", len(pieces), len(r.Events), n, r.Fragment)
		}
	}
	if len(pieces) < 2 {
		t.Fatalf("pieces %v: want the response split", pieces)
	}
}

// TestWatchCancel: a cancelled watch's channel closes.
func TestWatchCancel(t *testing.T) {
	g := startGroup(t, nil)
	c := g.client(g.follower())
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	w := c.Watch(ctx, "k", clientv3.WithCreatedNotify())
	next(t, w, 10*time.Second)
	cancel()
	for {
		select {
		case _, ok := <-w:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled watch's channel stays open")
		}
	}
}

// A watch from a negative revision is refused as compacted, as etcd 3.7
// refuses it (its robustness traffic starts watches from the current
// revision minus up to 100, which is below 1 early on), not taken for a
// watch from now.
func TestWatchNegativeStartRefused(t *testing.T) {
	g := startGroup(t, nil)
	f := g.follower()
	ctx := ctxT(t, 30*time.Second)
	if _, err := g.client(f).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	wc, err := pb.NewWatchClient(g.client(f).ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: -5}}}); err != nil {
		t.Fatal(err)
	}
	r, err := wc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || !r.Canceled || r.WatchId != clientv3.InvalidWatchID || r.CancelReason != rpctypes.ErrCompacted.Error() || len(r.Events) != 0 {
		t.Fatalf("watch from revision -5: %v; want created and cancelled, watch ID -1, %q", r, rpctypes.ErrCompacted.Error())
	}
}

// TestWatchFromCompactRevisionSeesDelete: a watch from exactly the
// compacted revision starts with a delete made at it, as on etcd 3.7,
// with no PrevKv (the revision before is compacted), then what follows;
// a Get at that revision finds the key gone. Once a later compaction
// passes it, a watch from that revision is refused as compacted.
func TestWatchFromCompactRevisionSeesDelete(t *testing.T) {
	g := startGroup(t, nil)
	// On the leader: a follower may not have applied the compaction yet.
	c := g.client(g.leader())
	ctx := ctxT(t, 60*time.Second)
	for _, op := range []clientv3.Op{clientv3.OpPut("t/a", "1"), clientv3.OpPut("t/b", "2")} {
		if _, err := c.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	d, err := c.Delete(ctx, "t/a")
	if err != nil {
		t.Fatal(err)
	}
	R := d.Header.Revision
	if _, err := c.Put(ctx, "t/b", "3"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, R); err != nil {
		t.Fatal(err)
	}

	evs := collect(t, c.Watch(ctx, "t/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(R)), 2)
	if got, want := evString(evs), "DELETE t/a= PUT t/b=3 "; got != want {
		t.Fatalf("events from the compact revision %d: %q, want %q", R, got, want)
	}
	if evs[0].Kv.ModRevision != R || evs[0].PrevKv != nil {
		t.Fatalf("the delete at the compact revision %d: %v, prev kv %v; want revision %d, no prev kv", R, evs[0].Kv, evs[0].PrevKv, R)
	}
	if evs[1].Kv.ModRevision != R+1 || evs[1].PrevKv == nil || string(evs[1].PrevKv.Value) != "2" {
		t.Fatalf("the put after the compact revision: %v, prev kv %v; want revision %d, prev value 2", evs[1].Kv, evs[1].PrevKv, R+1)
	}
	if r, err := c.Get(ctx, "t/", clientv3.WithPrefix(), clientv3.WithRev(R)); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Key) != "t/b" {
		t.Fatalf("get at the compact revision %d: %v, %v; want t/b alone", R, r, err)
	}

	if _, err := c.Compact(ctx, R+1); err != nil {
		t.Fatal(err)
	}
	r := next(t, c.Watch(ctx, "t/", clientv3.WithPrefix(), clientv3.WithRev(R)), 10*time.Second)
	if !errors.Is(r.Err(), rpctypes.ErrCompacted) || r.CompactRevision != R+1 || !r.Canceled {
		t.Fatalf("watch from %d compacted at %d: %+v err %v", R, R+1, r, r.Err())
	}
	evs = collect(t, c.Watch(ctx, "t/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(R+1)), 1)
	if got, want := evString(evs), "PUT t/b=3 "; got != want || evs[0].PrevKv != nil {
		t.Fatalf("events from the compact revision %d: %q, prev kv %v; want %q, no prev kv", R+1, got, evs[0].PrevKv, want)
	}
}
