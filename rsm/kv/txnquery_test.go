package kv

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// randomReadTxn is a read-only Txn over the keys of seedEtcdMachine:
// comparisons of every target and result, ranges of every option at
// past, compacted, current and future revisions, nested read-only Txns.
func randomReadTxn(rng *rand.Rand, depth int) *pb.TxnRequest {
	keys := []string{"a", "b", "c", "d", "l/1", "l/2\xff", "zz"}
	key := func() []byte { return []byte(keys[rng.IntN(len(keys))]) }
	end := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return []byte{0}
		case 1:
			return key()
		}
		return nil
	}
	r := &pb.TxnRequest{}
	for range rng.IntN(3) {
		c := &pb.Compare{Key: key(), RangeEnd: end(), Result: pb.Compare_CompareResult(rng.IntN(4)), Target: pb.Compare_CompareTarget(rng.IntN(5))}
		n := int64(rng.IntN(12))
		switch c.Target {
		case pb.Compare_VERSION:
			c.TargetUnion = &pb.Compare_Version{Version: n}
		case pb.Compare_CREATE:
			c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: n}
		case pb.Compare_MOD:
			c.TargetUnion = &pb.Compare_ModRevision{ModRevision: n}
		case pb.Compare_VALUE:
			c.TargetUnion = &pb.Compare_Value{Value: []byte{byte('0' + rng.IntN(6))}}
		case pb.Compare_LEASE:
			c.TargetUnion = &pb.Compare_Lease{Lease: []int64{0, 7, -3}[rng.IntN(3)]}
		}
		r.Compare = append(r.Compare, c)
	}
	branch := func() []*pb.RequestOp {
		var ops []*pb.RequestOp
		for range rng.IntN(4) {
			if depth < 2 && rng.IntN(4) == 0 {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: randomReadTxn(rng, depth+1)}})
				continue
			}
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
				Key: key(), RangeEnd: end(), Limit: int64(rng.IntN(3)), Revision: int64(rng.IntN(14)),
				SortOrder: pb.RangeRequest_SortOrder(rng.IntN(3)), SortTarget: pb.RangeRequest_SortTarget(rng.IntN(5)),
				KeysOnly: rng.IntN(3) == 0, CountOnly: rng.IntN(4) == 0,
				MinModRevision: int64(rng.IntN(3)), MaxCreateRevision: int64(rng.IntN(12)),
			}}})
		}
		return ops
	}
	r.Success, r.Failure = branch(), branch()
	return r
}

// TestTxnQueryAnswersAsCommand: a read-only Txn answered as a query has
// the answer and the revision of the same Txn applied as a command, or
// the same error, over many random read-only Txns; the query changes
// nothing.
func TestTxnQueryAnswersAsCommand(t *testing.T) {
	m := seedEtcdMachine(t)
	before := snap(t, m)
	rng := rand.New(rand.NewPCG(1, 2))
	answered := 0
	for i := range 3000 {
		r := randomReadTxn(rng, 0)
		if !ReadOnlyTxn(r) {
			t.Fatalf("txn %d: a generated read-only Txn is not ReadOnlyTxn: %v", i, r)
		}
		q, err := m.Query(must(TxnQuery(r)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap(t, m), before) {
			t.Fatalf("txn %d: the query changed the state", i)
		}
		c := m.Apply(must(TxnCommand(r)))
		if !bytes.Equal(q, c) {
			qv, qerr := DecodeResult(q)
			cv, cerr := DecodeResult(c)
			t.Fatalf("txn %d %v:\nquery   %v %v\ncommand %v %v", i, r, qv, qerr, cv, cerr)
		}
		if _, err := DecodeResult(q); err == nil {
			answered++
		}
	}
	if answered < 1000 {
		t.Errorf("only %d of 3000 Txns answered without an error: the generator tests too little", answered)
	}
	if !bytes.Equal(snap(t, m), before) {
		t.Fatal("a read-only Txn command changed the state")
	}
}

// TestTxnQueryRefusals: a Txn that writes, in any branch or nested, is
// no read; before the first etcd write the machine asks for a command.
func TestTxnQueryRefusals(t *testing.T) {
	for _, r := range []*pb.TxnRequest{
		{Success: []*pb.RequestOp{putOp("a", "1")}},
		{Failure: []*pb.RequestOp{delOp("a", "")}},
		{Success: []*pb.RequestOp{txnOp(nil, []*pb.RequestOp{txnOp([]*pb.RequestOp{putOp("a", "1")}, nil)})}},
	} {
		if ReadOnlyTxn(r) {
			t.Errorf("%v is ReadOnlyTxn", r)
		}
		res, _ := seedEtcdMachine(t).Query(must(TxnQuery(r)))
		if _, err := DecodeResult(res); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("query of %v: %v, want ErrInvalidArgument", r, err)
		}
	}
	if !ReadOnlyTxn(&pb.TxnRequest{Success: []*pb.RequestOp{txnOp(nil, nil), {}}}) {
		t.Error("empty branches and an empty op are read-only")
	}
	m := New()
	res, _ := m.Query(must(TxnQuery(&pb.TxnRequest{})))
	if _, err := DecodeResult(res); !errors.Is(err, ErrNeedsCommand) {
		t.Errorf("a Txn query on a new machine: %v, want ErrNeedsCommand", err)
	}
}
