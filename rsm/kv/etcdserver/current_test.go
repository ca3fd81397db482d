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

// catchUpTimeout is the request timeout of the groups these tests start:
// a node that has not caught up answers an error within it.
const catchUpTimeout = 2 * time.Second

// startWritten starts a group that takes no snapshot, with
// catchUpTimeout, and puts a, b and c through its leader. It returns the
// group, its leader and the revision of the last put.
func startWritten(t *testing.T, ctx context.Context) (g *group, l int, rev int64) {
	opts := fastOptions()
	opts.RequestTimeout = catchUpTimeout
	opts.SnapshotThreshold = 1 << 20
	g = startGroupWith(t, opts, nil)
	l = g.leader()
	for _, k := range []string{"a", "b", "c"} {
		r, err := g.client(l).Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	return g, l, rev
}

// dialNode is a gRPC connection to node i, closed when t ends.
func dialNode(t *testing.T, g *group, i int) *grpc.ClientConn {
	conn, err := grpc.NewClient(g.addr(i), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// stateCalls are Status and a serializable Range of a to d through conn,
// each giving the revision it answered at; the Range fails t if at rev or
// later it lacks one of the three keys.
func stateCalls(t *testing.T, conn *grpc.ClientConn, rev int64) map[string]func(context.Context) (int64, error) {
	kvc, mc := pb.NewKVClient(conn), pb.NewMaintenanceClient(conn)
	return map[string]func(context.Context) (int64, error){
		"Status": func(cctx context.Context) (int64, error) {
			r, err := mc.Status(cctx, &pb.StatusRequest{})
			if err != nil {
				return 0, err
			}
			return r.Header.Revision, nil
		},
		"serializable Range": func(cctx context.Context) (int64, error) {
			r, err := kvc.Range(cctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("d"), Serializable: true})
			if err != nil {
				return 0, err
			}
			if r.Header.Revision >= rev && len(r.Kvs) != 3 {
				t.Fatalf("serializable Range at revision %d: %d keys, want 3", r.Header.Revision, len(r.Kvs))
			}
			return r.Header.Revision, nil
		},
	}
}

// answersOnlyOnceCaughtUp checks that every call to the node (who, cut
// from the store) fails Unavailable within the request timeout, and
// that once heal reconnects it each answers, within 30 s, at revision
// rev or later.
func answersOnlyOnceCaughtUp(t *testing.T, ctx context.Context, who string, calls map[string]func(context.Context) (int64, error), rev int64, heal func()) {
	t.Helper()
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 3*catchUpTimeout)
		got, err := call(cctx)
		cancel()
		if err == nil {
			t.Fatalf("%s on %s answered revision %d (the group is at %d) before it could catch up", name, who, got, rev)
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s on %s: %v, want Unavailable within the request timeout", name, who, err)
		}
	}
	heal()
	for name, call := range calls {
		deadline := time.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 3*catchUpTimeout)
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

// A node restarted while it cannot reach the store has not caught up:
// its Status, serializable Range and RangeStream do not answer from its
// empty state (revision 1, no keys), which would take its answers back
// in revision, as an etcd member's never go (etcd's robustness traffic
// takes a Status revision below one it compacted for a broken member).
// They answer within the request timeout with an error instead, and
// from the group's state once the node has caught up.
func TestRestartedNodeAnswersOnlyOnceCaughtUp(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	g, l, rev := startWritten(t, ctx)
	f := (l + 1) % g.c.Len()
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
	conn := dialNode(t, g, f)
	kvc := pb.NewKVClient(conn)
	calls := stateCalls(t, conn, rev)
	calls["serializable RangeStream"] = func(cctx context.Context) (int64, error) {
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
	answersOnlyOnceCaughtUp(t, ctx, "the restarted node (cut from the store)", calls, rev, func() { g.c.NodeFaults(f).SetPartition(faultstore.Connected) })
}

// A leader cut off from the store steps down and empties its state, to
// apply the group's log again once it reaches the store: meanwhile its
// Status, serializable Range and new watch streams do not answer from
// the emptied state, whose revision is below what the node answered as
// leader. They answer from the group's state once it has caught up.
func TestDeposedLeaderAnswersOnlyOnceCaughtUp(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	g, l, rev := startWritten(t, ctx)
	conn := dialNode(t, g, l)
	calls := stateCalls(t, conn, rev)
	if got, err := calls["Status"](ctx); err != nil || got < rev {
		t.Fatalf("Status on the leader: revision %d, %v; want %d", got, err, rev)
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
	wc := pb.NewWatchClient(conn)
	calls["watch from revision 2"] = func(cctx context.Context) (int64, error) {
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
	answersOnlyOnceCaughtUp(t, ctx, "the deposed leader (its state emptied)", calls, rev, func() { g.c.NodeFaults(l).SetPartition(faultstore.Connected) })
}

// machine is node i's kv machine, the one its server answers from.
func (g *group) machine(i int) *kv.Machine {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.machines[i]
}
