package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// must is the bytes of an encoder that cannot fail on the messages the
// tests give it.
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// applier returns a function that applies an etcd command to m and fails
// t if the command or its encoding fails.
func applier(t *testing.T, m *Machine) func(cmd []byte, err error) {
	return func(cmd []byte, err error) {
		t.Helper()
		if _, err := DecodeResult(m.Apply(must(cmd, err))); err != nil {
			t.Fatal(err)
		}
	}
}

func putOp(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func delOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func txnOp(success, failure []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: success, Failure: failure}}}
}

func ops(n int, f func(i int) *pb.RequestOp) []*pb.RequestOp {
	var out []*pb.RequestOp
	for i := range n {
		out = append(out, f(i))
	}
	return out
}

func compares(n int) []*pb.Compare {
	cs := make([]*pb.Compare, n)
	for i := range cs {
		cs[i] = &pb.Compare{Key: []byte("a")}
	}
	return cs
}

// TestTxnChecks: the shape checks etcd's server makes before a Txn, with
// its own cases for duplicate keys (etcd's TestV3TxnDuplicateKeys and
// TestV3TxnTooManyOps), answered with its errors; a Txn refused changes
// nothing.
func TestTxnChecks(t *testing.T) {
	cases := []struct {
		name string
		txn  *pb.TxnRequest
		want error
	}{
		{"put twice", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("abc", "x"), putOp("abc", "y")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete it", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("abc", "x"), delOp("abc", "")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete a range holding it", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("abc", "x"), delOp("a", "b")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete from it on (etcd lets it pass)", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("abc", "x"), delOp("a", "\x00")}}, nil},
		{"delete from it on and put (etcd lets it pass)", &pb.TxnRequest{Success: []*pb.RequestOp{delOp("a", "\x00"), putOp("abc", "x"), putOp("abd", "y")}}, nil},
		{"put and delete another", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("abc", "x"), delOp("abd", "")}}, nil},
		{"delete twice", &pb.TxnRequest{Success: []*pb.RequestOp{delOp("abc", ""), delOp("abc", "")}}, nil},
		{"nested put and outer delete", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp([]*pb.RequestOp{putOp("abc", "x")}, nil), delOp("abc", "")}}, rpctypes.ErrGRPCDuplicateKey},
		{"nested put in both branches", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp([]*pb.RequestOp{putOp("abc", "x")}, []*pb.RequestOp{putOp("abc", "y")})}}, nil},
		{"nested put and outer put", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp([]*pb.RequestOp{putOp("abc", "x")}, nil), putOp("abc", "y")}}, rpctypes.ErrGRPCDuplicateKey},
		{"two nested puts", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp([]*pb.RequestOp{putOp("abc", "x")}, nil), txnOp(nil, []*pb.RequestOp{putOp("abc", "y")})}}, rpctypes.ErrGRPCDuplicateKey},
		{"nested delete, then outer put", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp([]*pb.RequestOp{delOp("abc", "")}, nil), putOp("abc", "y")}}, rpctypes.ErrGRPCDuplicateKey},
		{"duplicates in the failure branch", &pb.TxnRequest{Failure: []*pb.RequestOp{putOp("abc", "x"), putOp("abc", "y")}}, rpctypes.ErrGRPCDuplicateKey},
		{"128 ops", &pb.TxnRequest{Success: ops(128, func(i int) *pb.RequestOp { return putOp(fmt.Sprint(i), "v") })}, nil},
		{"129 ops", &pb.TxnRequest{Success: ops(129, func(i int) *pb.RequestOp { return putOp(fmt.Sprint(i), "v") })}, rpctypes.ErrGRPCTooManyOps},
		{"129 compares", &pb.TxnRequest{Compare: compares(129)}, rpctypes.ErrGRPCTooManyOps},
		{"empty compare key", &pb.TxnRequest{Compare: []*pb.Compare{{}}}, rpctypes.ErrGRPCEmptyKey},
		{"empty put key", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("", "x")}}, rpctypes.ErrGRPCEmptyKey},
		{"no request in an op", &pb.TxnRequest{Failure: []*pb.RequestOp{{}}}, rpctypes.ErrGRPCKeyNotFound},
		{"bad sort order", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), SortOrder: 7}}}}}, rpctypes.ErrGRPCInvalidSortOption},
		{"put with unknown lease", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Lease: 5}}}}}, rpctypes.ErrGRPCLeaseNotFound},
		{"range in the future", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 3}}}}}, rpctypes.ErrGRPCFutureRev},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			m.Apply(must(PutCommand(&pb.PutRequest{Key: []byte("abc"), Value: []byte("0")})))
			before := snap(t, m)
			res, err := DecodeResult(m.Apply(must(TxnCommand(tc.txn))))
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, %v; want %v", res, err, tc.want)
			}
			if err != nil && !bytes.Equal(snap(t, m), before) {
				t.Fatal("a refused Txn changed the state")
			}
			n := New()
			if err := n.Restore(bytes.NewReader(snap(t, m))); err != nil || !bytes.Equal(snap(t, n), snap(t, m)) {
				t.Fatalf("the state after the Txn does not round-trip through a snapshot: %v", err)
			}
		})
	}
}

// TestEtcdErrors: the other errors of etcd's API the machine answers,
// and the revisions that do not move.
func TestEtcdErrors(t *testing.T) {
	m := New()
	apply := func(cmd []byte, err error) (any, error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return DecodeResult(m.Apply(cmd))
	}
	for _, tc := range []struct {
		name string
		cmd  func() (any, error)
		want error
	}{
		{"put without key", func() (any, error) { return apply(PutCommand(&pb.PutRequest{})) }, rpctypes.ErrGRPCEmptyKey},
		{"put of a key too long", func() (any, error) {
			return apply(PutCommand(&pb.PutRequest{Key: bytes.Repeat([]byte{'k'}, MaxKeySize+1)}))
		}, ErrInvalidKey},
		{"ignore value of no key", func() (any, error) { return apply(PutCommand(&pb.PutRequest{Key: []byte("k"), IgnoreValue: true})) }, rpctypes.ErrGRPCKeyNotFound},
		{"ignore value with a value", func() (any, error) {
			return apply(PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), IgnoreValue: true}))
		}, rpctypes.ErrGRPCValueProvided},
		{"ignore lease with a lease", func() (any, error) {
			return apply(PutCommand(&pb.PutRequest{Key: []byte("k"), Lease: 1, IgnoreLease: true}))
		}, rpctypes.ErrGRPCLeaseProvided},
		{"delete without key", func() (any, error) { return apply(DeleteRangeCommand(&pb.DeleteRangeRequest{})) }, rpctypes.ErrGRPCEmptyKey},
		{"grant lease 0", func() (any, error) { return apply(LeaseGrantCommand(&pb.LeaseGrantRequest{TTL: 5})) }, ErrInvalidArgument},
		{"grant a TTL too long", func() (any, error) {
			return apply(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 1, TTL: MaxLeaseTTL + 1}))
		}, rpctypes.ErrGRPCLeaseTTLTooLarge},
		{"revoke no lease", func() (any, error) { return apply(LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 3})) }, rpctypes.ErrGRPCLeaseNotFound},
		{"expire no lease", func() (any, error) { return apply(LeaseExpireCommand(3), nil) }, nil},
		{"compact at 0", func() (any, error) { return apply(CompactCommand(&pb.CompactionRequest{})) }, rpctypes.ErrGRPCCompacted},
		{"compact in the future", func() (any, error) { return apply(CompactCommand(&pb.CompactionRequest{Revision: 2})) }, rpctypes.ErrGRPCFutureRev},
		{"malformed put", func() (any, error) { return apply([]byte{tagEtcdPut, 0xff}, nil) }, ErrMalformed},
		{"range without key", func() (any, error) {
			res, err := m.Query(must(RangeQuery(&pb.RangeRequest{})))
			if err != nil {
				t.Fatal(err)
			}
			return DecodeResult(res)
		}, rpctypes.ErrGRPCEmptyKey},
	} {
		res, err := tc.cmd()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, res, err, tc.want)
		}
		if m.Revision() != 1 { // the first ended the legacy era: an empty etcd's 1
			t.Fatalf("%s: revision %d; want 1", tc.name, m.Revision())
		}
	}
	// The grant after the refused ones, then one of the same ID.
	if _, err := apply(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 1, TTL: 5})); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 1, TTL: 5})); !errors.Is(err, rpctypes.ErrGRPCLeaseExist) {
		t.Fatalf("granting lease 1 again: %v; want ErrGRPCLeaseExist", err)
	}
	// A Txn without writes and a delete of nothing leave the revision.
	if res, err := apply(TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{delOp("x", "")}})); err != nil || res.(*pb.TxnResponse).Header.Revision != 1 {
		t.Fatalf("a Txn deleting nothing: %v, %v; want revision 1", res, err)
	}
	if m.Revision() != 1 {
		t.Fatalf("revision %d; want 1", m.Revision())
	}
}

// TestMigrateFirstRelease: a group written by the kv machine before it
// kept history, its snapshot (testdata/snapshot-v1.bin) and then its log
// of Client's commands, loads into this machine in place and answers as
// the old machine did: the same results for the same commands, the same
// state; etcd's reads see each migrated key at Version 1 without lease,
// and no history until the first etcd write (the legacy era).
func TestMigrateFirstRelease(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	if err := m.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	base := m.Revision()
	// The old machine's semantics: the map of keys and one counter, as
	// capture_test's model has them.
	type oldEntry struct {
		value       string
		create, mod uint64
	}
	oldKeys := map[string]oldEntry{}
	m.tree.Ascend(func(e entry) bool {
		oldKeys[e.key] = oldEntry{string(e.value), e.create, e.mod}
		return true
	})
	rev := base
	oldPut := func(k, v string) uint64 {
		rev++
		e, ok := oldKeys[k]
		if !ok {
			e.create = rev
		}
		e.value, e.mod = v, rev
		oldKeys[k] = e
		return rev
	}
	r := rand.New(rand.NewPCG(11, 0))
	for i := range 2000 {
		k := fmt.Sprintf("k/%02d", r.IntN(40))
		v := fmt.Sprint(i)
		var c command
		var want reply
		switch r.IntN(3) {
		case 0:
			c = command{op: tagPut, key: k, value: []byte(v)}
			want = reply{tag: tagPutResult, rev: oldPut(k, v)}
		case 1:
			c = command{op: tagDelete, key: k}
			_, ok := oldKeys[k]
			if ok {
				rev++
				delete(oldKeys, k)
			}
			want = reply{tag: tagDeleteResult, ok: ok, rev: rev}
		default:
			expect := oldKeys[k].mod
			if r.IntN(3) == 0 {
				expect++
			}
			c = command{op: tagCAS, key: k, expect: expect, value: []byte(v)}
			if oldKeys[k].mod != expect {
				want = reply{tag: tagCASResult, ok: false, rev: oldKeys[k].mod}
				break
			}
			want = reply{tag: tagCASResult, ok: true, rev: oldPut(k, v)}
		}
		cmd := c.encode()
		var got []byte
		if i%2 == 0 {
			got = m.Apply(cmd)
		} else {
			got = m.ApplyPrepared(cmd, m.Prepare(cmd))
		}
		if !bytes.Equal(got, want.encode()) {
			t.Fatalf("command %d (%+v): result %x; want %x", i, c, got, want.encode())
		}
	}
	if m.Len() != len(oldKeys) {
		t.Fatalf("%d keys; want %d", m.Len(), len(oldKeys))
	}
	for k, e := range oldKeys {
		res, err := m.Query(query{op: tagGet, key: k}.encode())
		if err != nil {
			t.Fatal(err)
		}
		want := reply{tag: tagGetResult, found: true, kv: KeyValue{Value: []byte(e.value), CreateRevision: e.create, ModRevision: e.mod}}.encode()
		if !bytes.Equal(res, want) {
			t.Fatalf("get %q: %x; want %x", k, res, want)
		}
	}
	// No etcd write yet: the legacy era, no history, every key at
	// Version 1 (as a replica that applied the whole log from the start
	// has it too).
	v := m.ReadView()
	if v.CompactRevision() != v.Revision() {
		t.Fatalf("compact revision %d; want the current %d (legacy era)", v.CompactRevision(), v.Revision())
	}
	m.tree.Ascend(func(e entry) bool {
		if e.tomb || e.prev != nil || e.ver != 1 || e.lease != 0 {
			t.Fatalf("key %q in the legacy era: %+v", e.key, e.version)
		}
		return true
	})
	resp, err := v.Range(&pb.RangeRequest{Key: []byte("a")})
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 || resp.Kvs[0].Lease != 0 || string(resp.Kvs[0].Value) != "first" {
		t.Fatalf("range of a migrated key: %v, %v", resp, err)
	}
	if _, err := v.Range(&pb.RangeRequest{Key: []byte("a"), Revision: v.Revision() - 1}); !errors.Is(err, rpctypes.ErrGRPCCompacted) {
		t.Fatalf("range before the current revision: %v; want ErrGRPCCompacted", err)
	}
	// The first etcd write ends the era: history from then on, versions
	// going on from 1.
	before := m.Revision()
	if _, err := DecodeResult(m.Apply(must(PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("second")})))); err != nil {
		t.Fatal(err)
	}
	v = m.ReadView()
	if resp, err := v.Range(&pb.RangeRequest{Key: []byte("a")}); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 2 {
		t.Fatalf("range after an etcd put: %v, %v; want Version 2", resp, err)
	}
	if resp, err := v.Range(&pb.RangeRequest{Key: []byte("a"), Revision: int64(before)}); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "first" {
		t.Fatalf("range at the revision before the etcd put: %v, %v", resp, err)
	}
	// The migrated state writes a version 2 snapshot that restores to it.
	again := New()
	if err := again.Restore(bytes.NewReader(snap(t, m))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap(t, again), snap(t, m)) {
		t.Fatal("the migrated state does not round-trip through a snapshot")
	}
}

// TestPreparedEtcdPutsDeferred: etcd's puts without lease are deferred
// by ApplyPrepared as Client's are, among every other etcd command, and
// the machine answers as one applying each with Apply.
func TestPreparedEtcdPutsDeferred(t *testing.T) {
	smallRuns(t)
	for seed := uint64(1); seed <= 10; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		want, got := New(), New()
		key := func() []byte { return fmt.Appendf(nil, "k%02d", r.IntN(40)) }
		for i := range 2000 {
			var cmd []byte
			var err error
			switch n := r.IntN(100); {
			case n < 60:
				cmd, err = PutCommand(&pb.PutRequest{Key: key(), Value: fmt.Appendf(nil, "%d", i)})
			case n < 65:
				cmd, err = PutCommand(&pb.PutRequest{Key: key(), Value: []byte("leased"), Lease: int64(1 + r.IntN(3)), PrevKv: true})
			case n < 70:
				cmd = command{op: tagPut, key: string(key()), value: []byte("old")}.encode()
			case n < 75:
				cmd, err = DeleteRangeCommand(&pb.DeleteRangeRequest{Key: key(), PrevKv: true})
			case n < 80:
				cmd, err = LeaseGrantCommand(&pb.LeaseGrantRequest{ID: int64(1 + r.IntN(3)), TTL: 10})
			case n < 83:
				cmd = LeaseExpireCommand(int64(1 + r.IntN(3)))
			case n < 90:
				cmd, err = TxnCommand(&pb.TxnRequest{
					Compare: []*pb.Compare{{Key: key(), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 1}}},
					Success: []*pb.RequestOp{putOp("t", fmt.Sprint(i)), delOp("k0", "k1")},
					Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")}}}},
				})
			case n < 93:
				cmd, err = CompactCommand(&pb.CompactionRequest{Revision: int64(want.Revision()) - int64(r.IntN(5))})
			default:
				cmd = []byte{tagEtcdPut, byte(r.IntN(256)), byte(r.IntN(256))}
			}
			if err != nil {
				t.Fatal(err)
			}
			w := want.Apply(bytes.Clone(cmd))
			g := got.ApplyPrepared(cmd, got.Prepare(cmd))
			for j := range cmd {
				cmd[j] ^= 0xff // the machine keeps nothing of the command
			}
			if !bytes.Equal(w, g) {
				t.Fatalf("seed %d, command %d: %x; want %x", seed, i, g, w)
			}
			if r.IntN(200) == 0 && !bytes.Equal(snap(t, got), snap(t, want)) {
				t.Fatalf("seed %d, command %d: the states differ", seed, i)
			}
		}
		if !bytes.Equal(snap(t, got), snap(t, want)) {
			t.Fatalf("seed %d: the states differ", seed)
		}
	}
}

// TestReadViewWhileApplying: read views are read by other goroutines
// (ranges at past revisions, events) while the machine applies and
// compacts, and each answers as of its revision (checked under -race).
func TestReadViewWhileApplying(t *testing.T) {
	m := New()
	// Out of the legacy era first (an expiry of no lease), so that each
	// put below makes the revision after the one it reads beforehand.
	m.Apply(LeaseExpireCommand(1))
	var events []*mvccpb.Event
	m.SetObserver(func(rev int64, evs []*mvccpb.Event) { events = append(events, evs...) })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := m.ReadView()
				resp, err := v.Range(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: v.Revision()})
				if err != nil {
					errs <- err
					return
				}
				// Every put writes the revision into its value: no key at
				// the view's revision holds a later one.
				for _, kv := range resp.Kvs {
					if kv.ModRevision > v.Revision() || string(kv.Value) != fmt.Sprint(kv.ModRevision) {
						errs <- fmt.Errorf("view at %d: %v", v.Revision(), kv)
						return
					}
				}
				evs, err := v.Events([]byte("k"), []byte("l"), v.CompactRevision()+1)
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(evs); i++ {
					if evs[i].Kv.ModRevision < evs[i-1].Kv.ModRevision {
						errs <- fmt.Errorf("events out of order: %v", evs)
						return
					}
				}
			}
		}()
	}
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 3000 {
		next := m.Revision() + 1
		m.Apply(must(PutCommand(&pb.PutRequest{Key: fmt.Appendf(nil, "k%02d", r.IntN(50)), Value: fmt.Append(nil, next)})))
		if i%500 == 499 {
			m.Apply(must(CompactCommand(&pb.CompactionRequest{Revision: int64(m.Revision()) - 100})))
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(events) != 3000 {
		t.Fatalf("observed %d events; want 3000", len(events))
	}
}

// seedEtcdMachine is a machine with history, a compaction, leases and
// keys attached to them: out of the legacy era (an expiry of no lease
// ends it) before seedMachine's commands, so that they keep history.
func seedEtcdMachine(t testing.TB) *Machine {
	m := New()
	m.Apply(LeaseExpireCommand(1))
	seedInto(m)
	for _, c := range []func() ([]byte, error){
		func() ([]byte, error) { return LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 7, TTL: 30}) },
		func() ([]byte, error) { return LeaseGrantCommand(&pb.LeaseGrantRequest{ID: -3, TTL: 1}) },
		func() ([]byte, error) {
			return PutCommand(&pb.PutRequest{Key: []byte("l/1"), Value: []byte("x"), Lease: 7})
		},
		func() ([]byte, error) {
			return PutCommand(&pb.PutRequest{Key: []byte("l/2\xff"), Value: []byte("y"), Lease: -3})
		},
		func() ([]byte, error) {
			return TxnCommand(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("a", "3"), putOp("d", "4"), delOp("c", "")}})
		},
		func() ([]byte, error) { return CompactCommand(&pb.CompactionRequest{Revision: 5}) },
		func() ([]byte, error) { return PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("5")}) },
	} {
		if _, err := DecodeResult(m.Apply(must(c()))); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// FuzzEtcdCommand: any bytes after a command type byte of etcd's API
// apply without panicking, to a result DecodeResult reads (a response or
// an error); a command that does not decode is ErrMalformed and changes
// nothing; two machines in one state answer alike and stay alike.
func FuzzEtcdCommand(f *testing.F) {
	seeds := []func() ([]byte, error){
		func() ([]byte, error) {
			return PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("v"), Lease: 7, PrevKv: true})
		},
		func() ([]byte, error) {
			return DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, PrevKv: true})
		},
		func() ([]byte, error) {
			return TxnCommand(&pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_ModRevision{ModRevision: 9}}},
				Success: []*pb.RequestOp{putOp("x", "1"), txnOp([]*pb.RequestOp{delOp("l/", "l0")}, nil)},
				Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 6}}}},
			})
		},
		func() ([]byte, error) { return CompactCommand(&pb.CompactionRequest{Revision: 8}) },
		func() ([]byte, error) { return LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 9, TTL: 60}) },
		func() ([]byte, error) { return LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 7}) },
		func() ([]byte, error) { return LeaseExpireCommand(-3), nil },
	}
	for _, s := range seeds {
		f.Add(must(s()))
	}
	f.Fuzz(func(t *testing.T, cmd []byte) {
		if len(cmd) == 0 || !isEtcdCommand(cmd[0]) {
			return
		}
		a, b := seedEtcdMachine(t), seedEtcdMachine(t)
		before := snap(t, a)
		res := a.Apply(cmd)
		if _, err := DecodeResult(res); err != nil {
			if errors.Is(err, ErrMalformed) && res[0] != tagError {
				t.Fatalf("result %x does not decode: %v", res, err)
			}
			if !bytes.Equal(snap(t, a), before) {
				t.Fatalf("command %x failed (%v) and changed the state", cmd, err)
			}
		}
		if got := b.ApplyPrepared(cmd, b.Prepare(cmd)); !bytes.Equal(got, res) {
			t.Fatalf("prepared: %x; applied: %x", got, res)
		}
		if !bytes.Equal(snap(t, a), snap(t, b)) {
			t.Fatal("two machines applying one command differ")
		}
		n := New()
		if err := n.Restore(bytes.NewReader(snap(t, a))); err != nil {
			t.Fatalf("the state after %x does not restore: %v", cmd, err)
		}
	})
}

// FuzzRangeQuery: any bytes after the Range type byte answer without
// panicking, with a result DecodeResult reads, and change nothing.
func FuzzRangeQuery(f *testing.F) {
	for _, q := range []*pb.RangeRequest{
		{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 2, Revision: 6, SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND},
		{Key: []byte("a"), RangeEnd: []byte("z"), CountOnly: true, MinModRevision: 3, MaxCreateRevision: 9},
		{Key: []byte("l/"), RangeEnd: []byte("l0"), KeysOnly: true, Revision: 4},
	} {
		f.Add(must(RangeQuery(q)))
	}
	m := seedEtcdMachine(f)
	before := snap(f, m)
	f.Fuzz(func(t *testing.T, q []byte) {
		if len(q) == 0 || q[0] != tagRange {
			return
		}
		res, err := m.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResult(res)
		if err != nil && res[0] != tagError {
			t.Fatalf("result %x does not decode: %v", res, err)
		}
		var r pb.RangeRequest
		if err == nil && proto.Unmarshal(q[1:], &r) == nil {
			if v, verr := m.ReadView().Range(&r); verr != nil || !proto.Equal(v, got.(*pb.RangeResponse)) {
				t.Fatalf("a read view answers %v, %v; the query %v", v, verr, got)
			}
		}
		if !bytes.Equal(snap(t, m), before) {
			t.Fatal("a query changed the state")
		}
	})
}

// TestLeaseList: leases of any ID are listed in order, with their keys,
// and survive a snapshot.
func TestLeaseList(t *testing.T) {
	m := New()
	ids := []int64{math.MinInt64, -3, 7, math.MaxInt64}
	for i, id := range ids {
		if _, err := DecodeResult(m.Apply(must(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: id, TTL: int64(i)})))); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"b", "a"} {
			if _, err := DecodeResult(m.Apply(must(PutCommand(&pb.PutRequest{Key: fmt.Appendf(nil, "%s%d", k, i), Lease: id})))); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := New()
	if err := n.Restore(bytes.NewReader(snap(t, m))); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*ReadView{m.ReadView(), n.ReadView()} {
		ls := v.Leases()
		if len(ls) != len(ids) {
			t.Fatalf("leases %v; want %v", ls, ids)
		}
		for i, l := range ls {
			_, keys, ok := v.Lease(l.ID)
			want := []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}
			if l.ID != ids[i] || l.TTL != int64(i) || !ok || !slices.Equal(keys, want) {
				t.Fatalf("lease %d: %+v with keys %q; want %d, TTL %d, keys %q", i, l, keys, ids[i], i, want)
			}
		}
	}
}

// TestRestoreTellsObserver: a Restore tells the observer the restored
// revision with no events, so that a watch hub learns of a catch-up the
// moment it happens and reads what it missed from the history.
func TestRestoreTellsObserver(t *testing.T) {
	src := New()
	for _, k := range []string{"a", "b", "c"} {
		cmd, err := PutCommand(&pb.PutRequest{Key: []byte(k), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResult(src.Apply(cmd)); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if err := src.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	m := New()
	type call struct {
		rev    int64
		events int
		nilEvs bool
	}
	var calls []call
	m.SetObserver(func(rev int64, evs []*mvccpb.Event) { calls = append(calls, call{rev, len(evs), evs == nil}) })
	if err := m.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	want := int64(src.Revision())
	if len(calls) != 1 || calls[0].rev != want || !calls[0].nilEvs {
		t.Fatalf("observer calls %+v; want one with revision %d and no events", calls, want)
	}
	if evs, err := m.ReadView().Events([]byte{0}, []byte{0}, 1); err != nil || len(evs) != 3 {
		t.Fatalf("history after restore: %d events, %v; want the 3 puts", len(evs), err)
	}
}

// TestFirstEtcdWriteWithoutEventsTellsObserver: an empty group's first
// etcd write takes revision 1 even when it makes no event (a lease
// grant), and the observer is told, so a watch hub waiting for that
// revision is not left behind.
func TestFirstEtcdWriteWithoutEventsTellsObserver(t *testing.T) {
	m := New()
	var revs []int64
	m.SetObserver(func(rev int64, evs []*mvccpb.Event) {
		if evs != nil {
			t.Errorf("revision %d: %d events; want none", rev, len(evs))
		}
		revs = append(revs, rev)
	})
	cmd, err := LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 7, TTL: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeResult(m.Apply(cmd)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(revs, []int64{1}) || m.Revision() != 1 {
		t.Fatalf("observer told %v, revision %d; want [1] and 1", revs, m.Revision())
	}
	// A second grant moves nothing and tells nothing.
	cmd, _ = LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 8, TTL: 10})
	if _, err := DecodeResult(m.Apply(cmd)); err != nil {
		t.Fatal(err)
	}
	if len(revs) != 1 {
		t.Fatalf("observer told %v after a second grant; want [1]", revs)
	}
}
