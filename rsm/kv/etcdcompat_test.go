package kv

import (
	"bytes"
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
	apply := applier(t, m)
	// A range delete to "\x00" is no duplicate of a put in etcd's Txn
	// checks, so a Txn may put and delete a key, or delete and put it.
	apply(PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("a1")}))                          // 2
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "a2"), delOp("a", "\x00")}})) // 3
	apply(PutCommand(&pb.PutRequest{Key: []byte("b"), Value: []byte("b1")}))                          // 4
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{delOp("b", "\x00"), putOp("b", "b2")}})) // 5
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

// TestCompactKeepsDeleteAtCompactRevision: as etcd 3.7, a compaction at
// revision R keeps a delete made at R, so a watch from R, which the
// compaction still allows, starts with it (with no PrevKv: the revision
// before R is compacted); Range at R reads the key as absent all the
// same, a snapshot keeps the delete, and the next compaction past R
// drops it. Of a Txn that put a key and deleted it at R the delete
// stays; of one that deleted and put it again, both.
func TestCompactKeepsDeleteAtCompactRevision(t *testing.T) {
	m := New()
	apply := applier(t, m)
	put := func(k, v string) { t.Helper(); apply(PutCommand(&pb.PutRequest{Key: []byte(k), Value: []byte(v)})) }
	put("k", "v2")                                                                                     // 2
	put("k", "v3")                                                                                     // 3
	put("g", "g4")                                                                                     // 4
	apply(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("g"), RangeEnd: []byte("l")}))         // 5: g and k
	put("k", "v6")                                                                                     // 6
	put("x", "x7")                                                                                     // 7
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("x", "x8"), delOp("x", "\x00")}}))  // 8
	put("y", "y9")                                                                                     // 9
	apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{delOp("y", "\x00"), putOp("y", "y10")}})) // 10
	put("z", "z11")                                                                                    // 11

	kv := func(key, value string, create, mod, ver int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod, Version: ver}
	}
	del := func(key string, mod int64) *mvccpb.Event {
		return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: mod}}
	}
	later := []*mvccpb.Event{ // the changes from 7 on, as the history holds them
		{Kv: kv("x", "x7", 7, 7, 1)},
		{Kv: kv("x", "x8", 7, 8, 2), PrevKv: kv("x", "x7", 7, 7, 1)},
		{Type: mvccpb.DELETE, Kv: del("x", 8).Kv, PrevKv: kv("x", "x7", 7, 7, 1)},
		{Kv: kv("y", "y9", 9, 9, 1)},
		{Type: mvccpb.DELETE, Kv: del("y", 10).Kv, PrevKv: kv("y", "y9", 9, 9, 1)},
		{Kv: kv("y", "y10", 10, 10, 1)},
		{Kv: kv("z", "z11", 11, 11, 1)},
	}
	checkEvents := func(m *Machine, from int64, want []*mvccpb.Event) {
		t.Helper()
		evs, err := m.ReadView().Events([]byte{0}, []byte{0}, from)
		if err != nil {
			t.Fatalf("events from %d: %v", from, err)
		}
		if len(evs) != len(want) {
			t.Fatalf("events from %d: %v\nwant %v", from, evs, want)
		}
		for i, ev := range evs {
			if !proto.Equal(ev, want[i]) {
				t.Fatalf("events from %d: event %d is %v\nwant %v", from, i, ev, want[i])
			}
		}
	}
	checkRange := func(m *Machine, rev int64, want ...*mvccpb.KeyValue) {
		t.Helper()
		resp, err := m.ReadView().Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		if len(resp.Kvs) != len(want) || resp.Count != int64(len(want)) {
			t.Fatalf("range at %d: %v; want %v", rev, resp.Kvs, want)
		}
		for i, kv := range resp.Kvs {
			if !proto.Equal(kv, want[i]) {
				t.Fatalf("range at %d: %v; want %v", rev, resp.Kvs, want)
			}
		}
	}
	compact := func(rev int64) { t.Helper(); apply(CompactCommand(&pb.CompactionRequest{Revision: rev})) }
	restored := func() *Machine {
		t.Helper()
		var b, again bytes.Buffer
		if err := m.Snapshot(&b); err != nil {
			t.Fatal(err)
		}
		n := New()
		if err := n.Restore(bytes.NewReader(b.Bytes())); err != nil {
			t.Fatal(err)
		}
		if err := n.Snapshot(&again); err != nil || !bytes.Equal(again.Bytes(), b.Bytes()) {
			t.Fatalf("a restored machine writes another snapshot (%v)", err)
		}
		return n
	}

	compact(5)
	atFive := append([]*mvccpb.Event{del("g", 5), del("k", 5), {Kv: kv("k", "v6", 6, 6, 1)}}, later...)
	for _, m := range []*Machine{m, restored()} {
		checkEvents(m, 5, atFive)
		checkEvents(m, 6, atFive[2:])
		checkRange(m, 5)
		checkRange(m, 6, kv("k", "v6", 6, 6, 1))
		if m.ReadView().Len() != 3 {
			t.Fatalf("%d live keys; want 3 (k, y, z)", m.ReadView().Len())
		}
	}
	if _, err := m.ReadView().Events([]byte{0}, []byte{0}, 4); !errors.Is(err, rpctypes.ErrGRPCCompacted) {
		t.Fatalf("events from 4: %v; want %v", err, rpctypes.ErrGRPCCompacted)
	}

	compact(6) // drops the deletes at 5
	if _, err := m.ReadView().Events([]byte{0}, []byte{0}, 5); !errors.Is(err, rpctypes.ErrGRPCCompacted) {
		t.Fatalf("events from 5 compacted at 6: %v; want %v", err, rpctypes.ErrGRPCCompacted)
	}
	if m.tree.Has(entry{key: "g"}) {
		t.Fatal("the delete of g at 5 outlives the compaction at 6")
	}
	checkEvents(m, 6, atFive[2:])

	compact(8) // the put of x at 8 goes, its delete stays
	checkEvents(m, 8, append([]*mvccpb.Event{del("x", 8)}, later[3:]...))
	checkRange(m, 8, kv("k", "v6", 6, 6, 1))

	compact(10) // x goes; y's delete and put at 10 stay
	if m.tree.Has(entry{key: "x"}) {
		t.Fatal("the delete of x at 8 outlives the compaction at 10")
	}
	for _, m := range []*Machine{m, restored()} {
		checkEvents(m, 10, []*mvccpb.Event{del("y", 10), {Kv: kv("y", "y10", 10, 10, 1)}, later[6]})
		checkRange(m, 10, kv("k", "v6", 6, 6, 1), kv("y", "y10", 10, 10, 1))
	}

	compact(11)
	checkEvents(m, 11, later[6:])
	checkRange(m, 11, kv("k", "v6", 6, 6, 1), kv("y", "y10", 10, 10, 1), kv("z", "z11", 11, 11, 1))
	if n := m.tree.Len(); n != 3 {
		t.Fatalf("%d keys in the tree after the compaction at 11; want 3", n)
	}
}
