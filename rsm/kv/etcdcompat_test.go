package kv

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// Cases where the differential test against etcd (tests/etcddiff) found
// the machine answering otherwise than etcd.

// TestKeysOnlyLeavesLeaseOut: a keys_only Range leaves the values out,
// and the leases too unless it sorts by value, as etcd 3.7 does (3.6
// kept the leases).
func TestKeysOnlyLeavesLeaseOut(t *testing.T) {
	m := New()
	apply := func(cmd []byte, err error) any {
		t.Helper()
		res, err := DecodeResult(m.Apply(must(cmd, err)))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	apply(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 7, TTL: 60}))
	apply(PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 7}))
	for _, target := range []pb.RangeRequest_SortTarget{pb.RangeRequest_KEY, pb.RangeRequest_VALUE, pb.RangeRequest_MOD} {
		q := &pb.RangeRequest{Key: []byte("k"), KeysOnly: true, SortTarget: target, SortOrder: pb.RangeRequest_ASCEND}
		res, err := m.Query(must(RangeQuery(q)))
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeResult(res)
		if err != nil {
			t.Fatal(err)
		}
		kvs := r.(*pb.RangeResponse).Kvs
		want := int64(0)
		if target == pb.RangeRequest_VALUE {
			want = 7
		}
		if len(kvs) != 1 || kvs[0].Lease != want || kvs[0].Value != nil {
			t.Errorf("keys only, sorted by %v: %v; want k with lease %d and no value", target, kvs, want)
		}
	}
}

// TestTxnPutChecksKeyFirst: a Txn's put that keeps the value of a key
// that does not exist, with a lease that does not exist, is refused for
// the key (etcd's Txn checks it first); a Put alone for the lease.
func TestTxnPutChecksKeyFirst(t *testing.T) {
	m := New()
	p := &pb.PutRequest{Key: []byte("k"), Lease: 9, IgnoreValue: true}
	txn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: p}}}}
	if _, err := DecodeResult(m.Apply(must(TxnCommand(txn)))); !errors.Is(err, rpctypes.ErrGRPCKeyNotFound) {
		t.Errorf("Txn: %v; want %v", err, rpctypes.ErrGRPCKeyNotFound)
	}
	if _, err := DecodeResult(m.Apply(must(PutCommand(p)))); !errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
		t.Errorf("Put: %v; want %v", err, rpctypes.ErrGRPCLeaseNotFound)
	}
}

// TestEventPrevKVBeforeRevision: an event's PrevKv is the key's value at
// the revision before the event's, as etcd reads it, and a put that
// creates the key has none: a key a Txn puts and deletes in one revision
// deletes with the value from before it; one it deletes and puts again
// is created with no PrevKv. Live events and history agree.
func TestEventPrevKVBeforeRevision(t *testing.T) {
	m := New()
	var live []*mvccpb.Event
	m.SetObserver(func(_ int64, evs []*mvccpb.Event) { live = append(live, evs...) })
	apply := func(cmd []byte, err error) {
		t.Helper()
		if _, err := DecodeResult(m.Apply(must(cmd, err))); err != nil {
			t.Fatal(err)
		}
	}
	// A range delete to "\x00" is no duplicate of a put in etcd's Txn
	// checks, so a Txn may put and delete a key, or delete and put it.
	fromKey := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte{0}}}}
	}
	apply(PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("a1")}))                    // 2
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "a2"), fromKey("a")}})) // 3
	apply(PutCommand(&pb.PutRequest{Key: []byte("b"), Value: []byte("b1")}))                    // 4
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{fromKey("b"), putOp("b", "b2")}})) // 5
	hist, err := m.ReadView().Events([]byte{0}, []byte{0}, 3)
	if err != nil {
		t.Fatal(err)
	}
	kv := func(key, value string, create, mod, ver int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod, Version: ver}
	}
	del := func(key string, mod int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), ModRevision: mod}
	}
	want := []*mvccpb.Event{
		{Kv: kv("a", "a2", 2, 3, 2), PrevKv: kv("a", "a1", 2, 2, 1)},
		{Type: mvccpb.DELETE, Kv: del("a", 3), PrevKv: kv("a", "a1", 2, 2, 1)},
		{Kv: kv("b", "b1", 4, 4, 1)},
		{Type: mvccpb.DELETE, Kv: del("b", 5), PrevKv: kv("b", "b1", 4, 4, 1)},
		{Kv: kv("b", "b2", 5, 5, 1)},
	}
	for name, evs := range map[string][]*mvccpb.Event{"live": live[1:], "history": hist} {
		if len(evs) != len(want) {
			t.Fatalf("%s: %v; want %d events", name, evs, len(want))
		}
		for i, ev := range evs {
			if !proto.Equal(ev, want[i]) {
				t.Errorf("%s event %d: %v\nwant %v", name, i, ev, want[i])
			}
		}
	}
}
