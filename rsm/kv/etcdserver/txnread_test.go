package etcdserver_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store/faultstore"
)

// readTxn is a random read-only Txn over keys a to e: comparisons of
// value, version, create and mod revisions, ranges at revisions from 0
// to beyond the current one, nested read-only Txns.
func readTxn(rng *rand.Rand, rev int64, depth int) *pb.TxnRequest {
	key := func() []byte { return []byte{byte('a' + rng.IntN(5))} }
	end := func() []byte { return [][]byte{nil, {0}, []byte("d")}[rng.IntN(3)] }
	r := &pb.TxnRequest{}
	for range rng.IntN(3) {
		c := &pb.Compare{Key: key(), Result: pb.Compare_CompareResult(rng.IntN(4))}
		switch rng.IntN(4) {
		case 0:
			c.Target, c.TargetUnion = pb.Compare_VALUE, &pb.Compare_Value{Value: []byte(fmt.Sprint(rng.IntN(4)))}
		case 1:
			c.Target, c.TargetUnion = pb.Compare_VERSION, &pb.Compare_Version{Version: int64(rng.IntN(4))}
		case 2:
			c.Target, c.TargetUnion = pb.Compare_CREATE, &pb.Compare_CreateRevision{CreateRevision: rng.Int64N(rev + 1)}
		default:
			c.Target, c.TargetUnion = pb.Compare_MOD, &pb.Compare_ModRevision{ModRevision: rng.Int64N(rev + 1)}
		}
		r.Compare = append(r.Compare, c)
	}
	branch := func() []*pb.RequestOp {
		var ops []*pb.RequestOp
		for range rng.IntN(4) {
			if depth < 2 && rng.IntN(4) == 0 {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: readTxn(rng, rev, depth+1)}})
				continue
			}
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
				Key: key(), RangeEnd: end(), Limit: int64(rng.IntN(3)), Revision: rng.Int64N(rev + 3),
				SortOrder: pb.RangeRequest_SortOrder(rng.IntN(3)), KeysOnly: rng.IntN(3) == 0, CountOnly: rng.IntN(5) == 0,
			}}})
		}
		return ops
	}
	r.Success, r.Failure = branch(), branch()
	return r
}

// bare clears what a node fills in a Txn's headers (cluster, member,
// term), keeping their revisions, and marshals it.
func bare(t *testing.T, resp *pb.TxnResponse) []byte {
	t.Helper()
	var clear func(r *pb.TxnResponse)
	clear = func(r *pb.TxnResponse) {
		h := func(h *pb.ResponseHeader) {
			if h != nil {
				h.ClusterId, h.MemberId, h.RaftTerm = 0, 0, 0
			}
		}
		h(r.Header)
		for _, op := range r.Responses {
			switch v := op.Response.(type) {
			case *pb.ResponseOp_ResponseRange:
				h(v.ResponseRange.Header)
			case *pb.ResponseOp_ResponseTxn:
				clear(v.ResponseTxn)
			}
		}
	}
	clear(resp)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadOnlyTxnIsARead: a read-only Txn through a follower is a
// linearizable read: it writes nothing to the store, and its answer and
// revision, or its error, are those of the same Txn proposed as a
// command, over random read-only Txns against a history with a
// compaction. A Txn that writes still writes.
func TestReadOnlyTxnIsARead(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 120*time.Second)
	f := g.follower()
	c := g.client(f)
	for i := range 30 {
		k := string(rune('a' + i%5))
		if i%7 == 6 {
			if _, err := c.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := c.Put(ctx, k, fmt.Sprint(i%4)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Compact(ctx, 8); err != nil {
		t.Fatal(err)
	}
	// The read answers once this node has applied what it wrote.
	after, err := c.Put(ctx, "e", "3")
	if err != nil {
		t.Fatal(err)
	}
	rev := after.Header.Revision

	raw := pb.NewKVClient(rawConn(t, g.addr(f)))
	rng := rand.New(rand.NewPCG(3, 4))
	type answer struct {
		r    *pb.TxnRequest
		resp []byte
		err  string
	}
	var answers []answer
	writes := g.c.Faults().Counts().OpTotal(faultstore.Writes)
	for range 200 {
		r := readTxn(rng, rev, 0)
		resp, err := raw.Txn(ctx, r)
		a := answer{r: r}
		if err != nil {
			a.err = status.Convert(err).String()
		} else {
			if resp.Header.Revision != rev || resp.Header.MemberId == 0 {
				t.Fatalf("read-only Txn %v: header %v, want revision %d with the member's ID", r, resp.Header, rev)
			}
			a.resp = bare(t, resp)
		}
		answers = append(answers, a)
	}
	if got := g.c.Faults().Counts().OpTotal(faultstore.Writes); got != writes {
		t.Fatalf("200 read-only Txns made %d store writes, want none", got-writes)
	}

	failed := 0
	for i, a := range answers {
		res, err := g.c.Node(f).Command(ctx, kv.MachineName, must(kv.TxnCommand(a.r)))
		if err != nil {
			t.Fatal(err)
		}
		v, err := kv.DecodeResult(res)
		switch {
		case err != nil:
			failed++
			if got := status.Convert(err).String(); got != a.err {
				t.Errorf("Txn %d %v: as a command %s, as a read %s %x", i, a.r, got, a.err, a.resp)
			}
		case a.err != "":
			t.Errorf("Txn %d %v: as a command %v, as a read %s", i, a.r, v, a.err)
		case !bytes.Equal(bare(t, v.(*pb.TxnResponse)), a.resp):
			t.Errorf("Txn %d %v: as a command %v, as a read differs", i, a.r, v)
		}
	}
	if failed > 150 {
		t.Errorf("%d of 200 Txns failed: the generator tests too little", failed)
	}
	if got := g.c.Faults().Counts().OpTotal(faultstore.Writes); got == writes {
		t.Fatal("the Txns proposed as commands made no store write: the count does not see the log")
	}

	// A Txn that writes in a nested branch is a command.
	writes = g.c.Faults().Counts().OpTotal(faultstore.Writes)
	tr, err := c.Txn(ctx).Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("w", "1")}, nil)).Commit()
	if err != nil || tr.Header.Revision != rev+1 {
		t.Fatalf("a Txn that writes: %v %+v, want revision %d", err, tr, rev+1)
	}
	if got := g.c.Faults().Counts().OpTotal(faultstore.Writes); got == writes {
		t.Error("a Txn that writes made no store write")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
