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

// TestBlackHoledNodeAnswersWithinRequestTimeout: a node whose store calls
// hang (it steps down; another node leads) answers a write and a
// linearizable read within its request timeout, with an error etcd
// clients take as Unavailable, or with the answer, never holding the
// request until the client's deadline: a client that lists the node among
// its endpoints turns to another.
func TestBlackHoledNodeAnswersWithinRequestTimeout(t *testing.T) {
	const requestTimeout = 2 * time.Second
	opts := fastOptions()
	opts.RequestTimeout = requestTimeout
	g := startGroupWith(t, opts, nil)
	ctx := ctxT(t, 90*time.Second)
	l := g.leader()
	if _, err := g.client(l).Put(ctx, "before", "v"); err != nil {
		t.Fatal(err)
	}
	g.c.NodeFaults(l).SetPartition(faultstore.BlackHoled)
	t.Cleanup(func() { g.c.NodeFaults(l).SetPartition(faultstore.Connected) })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if nl := g.c.Leader(); nl >= 0 && nl != l {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no other node leads 30 s after the leader's store was black-holed: %+v", g.c.Statuses())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A raw gRPC client: etcd's client would retry an Unavailable read
	// on its one endpoint until its deadline.
	conn, err := grpc.NewClient(g.addr(l), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	kvc := pb.NewKVClient(conn)
	// The client's deadline is well past the request timeout: an answer
	// before it is the node's own.
	check := func(what string, call func(context.Context) error) {
		t.Helper()
		for i := range 2 {
			cctx, cancel := context.WithTimeout(ctx, 3*requestTimeout)
			err := call(cctx)
			expired := cctx.Err()
			cancel()
			if expired != nil {
				t.Fatalf("%s %d through the black-holed node: held until the client's deadline (%v), past its request timeout %v: %v", what, i, 3*requestTimeout, requestTimeout, err)
			}
			if err != nil && status.Code(err) != codes.Unavailable {
				t.Fatalf("%s %d through the black-holed node: %v (code %v), want Unavailable or an answer", what, i, err, status.Code(err))
			}
			t.Logf("%s %d: %v", what, i, err)
		}
	}
	check("put", func(ctx context.Context) error {
		_, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		return err
	})
	check("linearizable range", func(ctx context.Context) error {
		_, err := kvc.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		return err
	})
	check("txn", func(ctx context.Context) error {
		_, err := kvc.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}}}})
		return err
	})
}
