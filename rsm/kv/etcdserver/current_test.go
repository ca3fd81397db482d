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
