package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// The golden files hold a group's log and snapshot as tenure wrote them
// while it was built on etcd's v3.6 API modules, whose messages are
// gogo-generated: testdata/etcd-v36.log every command kind and query of
// etcd's API with the machine's answer to each, testdata/etcd-v36.snap the
// snapshot (format 2, with history and leases) after the last command,
// and testdata/etcd-v36.txt the full state then. They must never be
// regenerated: they prove that groups written then load unchanged.
const (
	goldenLog   = "testdata/etcd-v36.log"
	goldenSnap  = "testdata/etcd-v36.snap"
	goldenState = "testdata/etcd-v36.txt"
)

// goldenSteps is the workload of the golden files: every command kind
// 0x04-0x0A (errors too) and queries 0x13 between them.
func goldenSteps(t *testing.T) (steps [][]byte, queries []bool) {
	t.Helper()
	add := func(b []byte, err error, query bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		steps, queries = append(steps, b), append(queries, query)
	}
	cmd := func(b []byte, err error) { t.Helper(); add(b, err, false) }
	qry := func(r *pb.RangeRequest) { t.Helper(); b, err := RangeQuery(r); add(b, err, true) }
	put := func(k, v string, lease int64) *pb.PutRequest {
		return &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}
	}
	rng := func(k, end string) *pb.RangeRequest { return &pb.RangeRequest{Key: []byte(k), RangeEnd: []byte(end)} }
	all := func() *pb.RangeRequest { return rng("\x00", "\x00") }

	cmd(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 0x1001, TTL: 60}))
	cmd(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 0x2002, TTL: 30}))
	cmd(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 0x3003, TTL: 9_000_000_000}))
	cmd(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 0x1001, TTL: 5})) // exists: an error
	cmd(PutCommand(put("a", "1", 0)))
	cmd(PutCommand(put("b", "2", 0x1001)))
	cmd(PutCommand(&pb.PutRequest{Key: []byte("c"), Value: []byte("3"), PrevKv: true}))
	cmd(PutCommand(&pb.PutRequest{Key: []byte("a"), Value: []byte("1b"), PrevKv: true}))
	cmd(PutCommand(&pb.PutRequest{Key: []byte("a"), IgnoreValue: true, Lease: 0x2002, PrevKv: true}))
	cmd(PutCommand(&pb.PutRequest{Key: []byte("c"), Value: []byte("3b"), IgnoreLease: true}))
	cmd(PutCommand(put("", "empty key", 0)))                             // an error
	cmd(PutCommand(put("z", "no such lease", 0x7777)))                   // an error
	cmd(PutCommand(&pb.PutRequest{Key: []byte("q"), IgnoreValue: true})) // an error: no key
	cmd(PutCommand(put("bin\x00\xff", "\x00\x01\xfe\xff", 0)))
	cmd(PutCommand(put("e", "", 0)))
	cmd(PutCommand(put("neg", "-", -1))) // an error
	for i := range 6 {
		cmd(PutCommand(put(fmt.Sprintf("k/%d", i), strings.Repeat("v", i*7), 0)))
	}
	cmd(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("k/1"), RangeEnd: []byte("k/3"), PrevKv: true}))
	cmd(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("nothing")}))
	cmd(DeleteRangeCommand(&pb.DeleteRangeRequest{})) // an error
	qry(all())
	cmd(TxnCommand(&pb.TxnRequest{
		Compare: []*pb.Compare{
			{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1b")}},
			{Key: []byte("b"), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Lease{Lease: 0x1001}},
			{Key: []byte("c"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 1}},
			{Key: []byte("k/"), RangeEnd: []byte("k0"), Target: pb.Compare_MOD, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_ModRevision{ModRevision: 1000}},
			{Key: []byte("zz"), Target: pb.Compare_CREATE, Result: pb.Compare_NOT_EQUAL, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 5}},
		},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t1"), Value: []byte("x"), PrevKv: true}}},
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k/4"), PrevKv: true}}},
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("t1"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put("t2", "nested", 0x3003)}}},
				Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put("t3", "nested-else", 0)}}},
			}}},
		},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put("never", "", 0)}}},
	}))
	cmd(TxnCommand(&pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("nope")}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: put("never", "", 0)}}},
		Failure: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), CountOnly: true}}},
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("e")}}},
		},
	}))
	cmd(TxnCommand(&pb.TxnRequest{ // read-only
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: rng("a", "c")}}},
	}))
	cmd(TxnCommand(&pb.TxnRequest{ // an error: a key put twice
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: put("d", "1", 0)}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: put("d", "2", 0)}},
		},
	}))
	qry(&pb.RangeRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00"), Revision: 8})
	for i := range 4 {
		cmd(PutCommand(put("a", fmt.Sprintf("hist-%d", i), 0)))
	}
	cmd(CompactCommand(&pb.CompactionRequest{Revision: 12, Physical: true}))
	cmd(CompactCommand(&pb.CompactionRequest{Revision: 10}))      // an error: compacted
	cmd(CompactCommand(&pb.CompactionRequest{Revision: 1 << 40})) // an error: future
	for i := range 3 {
		cmd(PutCommand(put("a", fmt.Sprintf("after-%d", i), 0)))
	}
	cmd(PutCommand(put("d", "on 2002", 0x2002)))
	cmd(LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 0x2002}))
	cmd(LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 0x2002})) // an error: gone
	cmd(LeaseExpireCommand(0x1001), nil)
	cmd(LeaseExpireCommand(0x1001), nil) // gone: not an error
	cmd(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 0x4004, TTL: 15}))
	cmd(PutCommand(put("l/1", "leased", 0x4004)))
	cmd(PutCommand(put("l/2", "leased", 0x4004)))
	cmd(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("l/2")}))
	qry(all())
	qry(&pb.RangeRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00"), Limit: 3, SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_VALUE})
	qry(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), KeysOnly: true, MinModRevision: 14, MaxCreateRevision: 30})
	qry(&pb.RangeRequest{Key: []byte("\x00"), RangeEnd: []byte("\x00"), CountOnly: true, Serializable: true})
	qry(&pb.RangeRequest{Key: []byte("a"), Revision: 14})
	qry(&pb.RangeRequest{Key: []byte("a"), Revision: 5})       // an error: compacted
	qry(&pb.RangeRequest{Key: []byte("a"), Revision: 1 << 40}) // an error: future
	return steps, queries
}

// goldenDump is the whole of the machine's state: revisions, every key
// with its history, the leases.
func goldenDump(m *Machine) string {
	m.rlock()
	defer m.mu.RUnlock()
	var b strings.Builder
	fmt.Fprintf(&b, "revision %d compact %d legacy %v live %d\n", m.rev, m.compact, m.legacy, m.live)
	m.tree.Ascend(func(e entry) bool {
		fmt.Fprintf(&b, "%q", e.key)
		for v := &e.version; v != nil; v = v.prev {
			fmt.Fprintf(&b, " [%q c%d m%d.%d tomb=%v v%d l%d]", v.value, v.create, v.mod, v.sub, v.tomb, v.ver, v.lease)
		}
		b.WriteByte('\n')
		return true
	})
	m.leases.Ascend(func(it leaseItem) bool {
		fmt.Fprintf(&b, "lease %d %q ttl %d\n", it.id, it.key, it.ttl)
		return true
	})
	return b.String()
}

func appendRecord(b []byte, rec []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(rec)))
	return append(b, rec...)
}

// readRecords splits a golden log: step, answer, step, answer, ...
func readRecords(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var recs [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			t.Fatalf("%s: bad record at byte %d", goldenLog, k)
		}
		recs = append(recs, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return recs
}

// runGolden applies steps to a new machine and returns the log of steps
// and answers, the snapshot after them and the state dump.
func runGolden(t *testing.T, steps [][]byte, queries []bool) (log, snapshot []byte, dump string) {
	t.Helper()
	m := New()
	for i, s := range steps {
		var res []byte
		if queries[i] {
			var err error
			if res, err = m.Query(s); err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
		} else {
			res = m.Apply(s)
		}
		log = appendRecord(appendRecord(log, s), res)
	}
	var sb bytes.Buffer
	if err := m.Snapshot(&sb); err != nil {
		t.Fatal(err)
	}
	return log, sb.Bytes(), goldenDump(m)
}

// TestGoldenEtcdV36Write writes the golden files; it is run once, by the
// build the files are named after, and never again.
func TestGoldenEtcdV36Write(t *testing.T) {
	if os.Getenv("TENURE_KV_WRITE_GOLDEN_V36") != "1" {
		t.Skip("writes the golden files only with TENURE_KV_WRITE_GOLDEN_V36=1")
	}
	steps, queries := goldenSteps(t)
	log, snapshot, dump := runGolden(t, steps, queries)
	for name, b := range map[string][]byte{goldenLog: log, goldenSnap: snapshot, goldenState: []byte(dump)} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoldenEtcdV36 loads the log and snapshot written by the v3.6 build:
// applying the log gives the same answers and state, the snapshot
// restores the same state and is written back byte for byte, and the
// answers this build encodes are the very bytes that build encoded, and
// so are its commands but for field order.
func TestGoldenEtcdV36(t *testing.T) {
	logb, err := os.ReadFile(goldenLog)
	if err != nil {
		t.Fatal(err)
	}
	snapb, err := os.ReadFile(goldenSnap)
	if err != nil {
		t.Fatal(err)
	}
	dumpb, err := os.ReadFile(goldenState)
	if err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, logb)
	steps, queries := goldenSteps(t)
	if len(recs) != 2*len(steps) {
		t.Fatalf("%s holds %d records, want %d", goldenLog, len(recs), 2*len(steps))
	}

	// The old log, applied: the same answers, decoded and as bytes.
	m := New()
	var errs, keysOnly int
	for i := range steps {
		old, want := recs[2*i], recs[2*i+1]
		var got []byte
		if queries[i] {
			if got, err = m.Query(old); err != nil {
				t.Fatalf("step %d: query: %v", i, err)
			}
		} else {
			got = m.Apply(old)
		}
		wantMsg, wantErr := DecodeResult(want)
		gotMsg, gotErr := DecodeResult(got)
		switch {
		case wantErr != nil:
			errs++
			if gotErr == nil || gotErr.Error() != wantErr.Error() || errors.Is(wantErr, ErrMalformed) {
				t.Errorf("step %d (0x%02x): error %v, want %v", i, old[0], gotErr, wantErr)
			}
		case gotErr != nil:
			t.Errorf("step %d (0x%02x): error %v, want %v", i, old[0], gotErr, wantMsg)
		case keysOnlyLeased(goldenStep(t, old), wantMsg):
		case !goldenSame(gotMsg, wantMsg):
			t.Errorf("step %d (0x%02x): answer\n%v\nwant\n%v", i, old[0], gotMsg, wantMsg)
		}
		if keysOnlyLeased(goldenStep(t, old), wantMsg) {
			// etcd 3.7 leaves the leases out of a keys_only answer
			// that does not sort by value; 3.6 kept them.
			keysOnlyKVs(wantMsg.(*pb.RangeResponse).Kvs, pb.RangeRequest_KEY)
			if !goldenSame(gotMsg, wantMsg) {
				t.Errorf("step %d: keys_only answer\n%v\nwant, without leases,\n%v", i, gotMsg, wantMsg)
			}
			keysOnly++
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("step %d (0x%02x): answer encoded as %x, the v3.6 build's as %x", i, old[0], got, want)
		}
		if !bytes.Equal(steps[i], old) {
			// protobuf-go writes a Compare's range_end (field 64)
			// before its target value (a oneof, fields 4-8), gogo
			// after: the same message, in another field order.
			a, b := goldenStep(t, steps[i]), goldenStep(t, old)
			if !proto.Equal(a, b) || !rangedCompare(b) {
				t.Errorf("step %d (0x%02x): encoded as %x, the v3.6 build's as %x", i, old[0], steps[i], old)
			}
		}
	}
	if keysOnly != 1 {
		t.Errorf("%d keys_only answers with leases; the workload meant 1", keysOnly)
	}
	if errs < 10 {
		t.Errorf("only %d steps answered an error; the workload meant more", errs)
	}
	if got := goldenDump(m); got != string(dumpb) {
		t.Errorf("state after the log:\n%s\nwant\n%s", got, dumpb)
	}

	// The old snapshot, restored: the same state, written back the same.
	r := New()
	if err := r.Restore(bytes.NewReader(snapb)); err != nil {
		t.Fatal(err)
	}
	if got := goldenDump(r); got != string(dumpb) {
		t.Errorf("state restored:\n%s\nwant\n%s", got, dumpb)
	}
	var sb bytes.Buffer
	if err := r.Snapshot(&sb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sb.Bytes(), snapb) {
		t.Errorf("the restored state's snapshot differs from the one restored")
	}
	if !strings.Contains(string(dumpb), "lease ") || strings.Count(string(dumpb), "] [") < 3 {
		t.Errorf("the golden state holds no leases or no history:\n%s", dumpb)
	}
}

// goldenSame reports whether two answers are the same message.
func goldenSame(a, b any) bool {
	am, ok1 := a.(proto.Message)
	bm, ok2 := b.(proto.Message)
	return ok1 && ok2 && proto.Equal(am, bm)
}

// goldenStep decodes a step's request.
func goldenStep(t *testing.T, b []byte) proto.Message {
	t.Helper()
	var m proto.Message
	switch b[0] {
	case tagEtcdPut:
		m = &pb.PutRequest{}
	case tagEtcdDelete:
		m = &pb.DeleteRangeRequest{}
	case tagEtcdTxn:
		m = &pb.TxnRequest{}
	case tagCompact:
		m = &pb.CompactionRequest{}
	case tagLeaseGrant:
		m = &pb.LeaseGrantRequest{}
	case tagLeaseRevoke, tagLeaseExpire:
		m = &pb.LeaseRevokeRequest{}
	case tagRange:
		m = &pb.RangeRequest{}
	default:
		t.Fatalf("step type 0x%02x", b[0])
	}
	if err := proto.Unmarshal(b[1:], m); err != nil {
		t.Fatalf("step 0x%02x: %v", b[0], err)
	}
	return m
}

// rangedCompare reports whether m is a Txn comparing a range of keys.
func rangedCompare(m proto.Message) bool {
	r, ok := m.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, c := range r.Compare {
		if len(c.RangeEnd) > 0 {
			return true
		}
	}
	return false
}

// keysOnlyLeased reports whether step is a keys_only Range not sorting
// by value whose answer has a key with a lease.
func keysOnlyLeased(step proto.Message, answer any) bool {
	q, ok := step.(*pb.RangeRequest)
	r, ok2 := answer.(*pb.RangeResponse)
	if !ok || !ok2 || !q.KeysOnly || q.SortTarget == pb.RangeRequest_VALUE {
		return false
	}
	for _, kv := range r.Kvs {
		if kv.Lease != 0 {
			return true
		}
	}
	return false
}
