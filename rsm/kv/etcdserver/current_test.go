package etcdserver_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store/faultstore"
)

// A node restarted while it cannot reach the store has not caught up:
// its Status, serializable Range and RangeStream do not answer from its
// empty state (revision 1, no keys), which would take its answers back
// in revision, as an etcd member's never go (etcd's robustness traffic
// takes a Status revision below one it compacted for a broken member).
// They answer within the request timeout with an error instead, and
// from the group's state once the node has caught up.
func TestRestartedNodeAnswersOnlyOnceCaughtUp(t *testing.T) {
	const requestTimeout = 2 * time.Second
	opts := fastOptions()
	opts.RequestTimeout = requestTimeout
	opts.SnapshotThreshold = 1 << 20
	g := startGroupWith(t, opts, nil)
	ctx := ctxT(t, 90*time.Second)
	l := g.leader()
	f := (l + 1) % g.c.Len()
	var rev int64
	for _, k := range []string{"a", "b", "c"} {
		r, err := g.client(l).Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	g.stop(f)
	if err := g.c.Crash(f); err != nil {
		t.Fatal(err)
	}
	g.c.NodeFaults(f).SetPartition(faultstore.BlackHoled)
	t.Cleanup(func() { g.c.NodeFaults(f).SetPartition(faultstore.Connected) })
	if err := g.c.Restart(ctx, f); err != nil {
		t.Fatal(err)
	}
	g.serve(f)
	conn, err := grpc.NewClient(g.addr(f), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	kvc, mc := pb.NewKVClient(conn), pb.NewMaintenanceClient(conn)
	statusOf := func(cctx context.Context) (int64, error) {
		r, err := mc.Status(cctx, &pb.StatusRequest{})
		if err != nil {
			return 0, err
		}
		return r.Header.Revision, nil
	}
	get := func(cctx context.Context) (int64, error) {
		r, err := kvc.Range(cctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("d"), Serializable: true})
		if err != nil {
			return 0, err
		}
		if r.Header.Revision >= rev && len(r.Kvs) != 3 {
			t.Fatalf("serializable Range at revision %d: %d keys, want 3", r.Header.Revision, len(r.Kvs))
		}
		return r.Header.Revision, nil
	}
	stream := func(cctx context.Context) (int64, error) {
		s, err := kvc.RangeStream(cctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("d"), Serializable: true})
		if err != nil {
			return 0, err
		}
		var last int64
		for {
			r, err := s.Recv()
			if err != nil {
				if last > 0 {
					return last, nil
				}
				return 0, err
			}
			if r.RangeResponse.Header != nil {
				last = r.RangeResponse.Header.Revision
			}
		}
	}
	calls := map[string]func(context.Context) (int64, error){"Status": statusOf, "serializable Range": get, "serializable RangeStream": stream}
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 3*requestTimeout)
		got, err := call(cctx)
		cancel()
		if err == nil {
			t.Fatalf("%s on the restarted node, cut from the store, answered revision %d (the group is at %d) before it could catch up", name, got, rev)
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s on the restarted node, cut from the store: %v, want Unavailable within the request timeout", name, err)
		}
	}
	g.c.NodeFaults(f).SetPartition(faultstore.Connected)
	for name, call := range calls {
		deadline := time.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 3*requestTimeout)
			got, err := call(cctx)
			cancel()
			if err == nil {
				if got < rev {
					t.Fatalf("%s once caught up: revision %d, want at least %d", name, got, rev)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on the healed node: %v", name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A leader cut off from the store steps down and empties its state, to
// apply the group's log again once it reaches the store: meanwhile its
// Status, serializable Range and new watch streams do not answer from
// the emptied state, whose revision is below what the node answered as
// leader. They answer from the group's state once it has caught up.
func TestDeposedLeaderAnswersOnlyOnceCaughtUp(t *testing.T) {
	const requestTimeout = 2 * time.Second
	opts := fastOptions()
	opts.RequestTimeout = requestTimeout
	opts.SnapshotThreshold = 1 << 20
	g := startGroupWith(t, opts, nil)
	ctx := ctxT(t, 90*time.Second)
	l := g.leader()
	var rev int64
	for _, k := range []string{"a", "b", "c"} {
		r, err := g.client(l).Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	conn, err := grpc.NewClient(g.addr(l), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	kvc, mc, wc := pb.NewKVClient(conn), pb.NewMaintenanceClient(conn), pb.NewWatchClient(conn)
	if r, err := mc.Status(ctx, &pb.StatusRequest{}); err != nil || r.Header.Revision < rev {
		t.Fatalf("Status on the leader: %v, %v; want revision %d", r, err, rev)
	}
	g.c.NodeFaults(l).SetPartition(faultstore.BlackHoled)
	t.Cleanup(func() { g.c.NodeFaults(l).SetPartition(faultstore.Connected) })
	m := g.machine(l)
	for deadline := time.Now().Add(30 * time.Second); m.Revision() >= uint64(rev); {
		if time.Now().After(deadline) {
			t.Fatalf("the leader cut off from the store kept its state at revision %d: %+v", m.Revision(), g.c.Statuses())
		}
		time.Sleep(20 * time.Millisecond)
	}
	statusOf := func(cctx context.Context) (int64, error) {
		r, err := mc.Status(cctx, &pb.StatusRequest{})
		if err != nil {
			return 0, err
		}
		return r.Header.Revision, nil
	}
	get := func(cctx context.Context) (int64, error) {
		r, err := kvc.Range(cctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("d"), Serializable: true})
		if err != nil {
			return 0, err
		}
		if r.Header.Revision >= rev && len(r.Kvs) != 3 {
			t.Fatalf("serializable Range at revision %d: %d keys, want 3", r.Header.Revision, len(r.Kvs))
		}
		return r.Header.Revision, nil
	}
	watch := func(cctx context.Context) (int64, error) {
		w, err := wc.Watch(cctx)
		if err != nil {
			return 0, err
		}
		if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("d"), StartRevision: 2}}}); err != nil {
			return 0, err
		}
		var evs int
		for evs < 3 {
			r, err := w.Recv()
			if err != nil {
				return 0, err
			}
			evs += len(r.Events)
		}
		return rev, nil
	}
	calls := map[string]func(context.Context) (int64, error){"Status": statusOf, "serializable Range": get, "watch from revision 2": watch}
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 3*requestTimeout)
		got, err := call(cctx)
		cancel()
		if err == nil {
			t.Fatalf("%s on the deposed leader, its state emptied (revision %d), answered revision %d", name, m.Revision(), got)
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s on the deposed leader: %v, want Unavailable within the request timeout", name, err)
		}
	}
	g.c.NodeFaults(l).SetPartition(faultstore.Connected)
	for name, call := range calls {
		deadline := time.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 3*requestTimeout)
			got, err := call(cctx)
			cancel()
			if err == nil {
				if got < rev {
					t.Fatalf("%s once caught up: revision %d, want at least %d", name, got, rev)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on the healed node: %v", name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// machine is node i's kv machine, the one its server answers from.
func (g *group) machine(i int) *kv.Machine {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.machines[i]
}
