package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// snapshotV1 writes m's live keys as the previous kv machine's snapshot
// (format version 1, see snapshot.go): "TKVS" 1 revision count
// count×(key value create mod) crc32c.
func snapshotV1(t *testing.T, m *Machine) []byte {
	t.Helper()
	m.rlock()
	defer m.mu.RUnlock()
	b := []byte(snapshotMagic)
	b = binary.AppendUvarint(b, snapshotVersion1)
	b = binary.AppendUvarint(b, m.rev)
	b = binary.AppendUvarint(b, uint64(m.live))
	m.tree.Ascend(func(e entry) bool {
		if e.tomb {
			return true
		}
		b = appendString(b, e.key)
		b = binary.AppendUvarint(b, uint64(len(e.value)))
		b = append(b, e.value...)
		b = binary.AppendUvarint(b, e.create)
		b = binary.AppendUvarint(b, e.mod)
		return true
	})
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// oldCommands is a seeded sequence of the previous machine's commands
// (put, delete, swap) on a few keys, the swaps often expecting the key's
// revision.
func oldCommands(seed uint64, n int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x6c6567))
	mods := map[string]uint64{}
	var rev uint64
	var cmds [][]byte
	for i := range n {
		k := fmt.Sprintf("k/%02d", r.IntN(12))
		v := []byte(fmt.Sprint(i))
		var c command
		switch r.IntN(6) {
		case 0, 1, 2:
			c = command{op: tagPut, key: k, value: v}
			rev++
			mods[k] = rev
		case 3:
			c = command{op: tagDelete, key: k}
			if _, ok := mods[k]; ok {
				rev++
				delete(mods, k)
			}
		default:
			expect := mods[k]
			if r.IntN(4) == 0 {
				expect++
			}
			c = command{op: tagCAS, key: k, expect: expect, value: v}
			if mods[k] == expect {
				rev++
				mods[k] = rev
			}
		}
		cmds = append(cmds, c.encode())
	}
	return cmds
}

// applyOld applies cmds to m, every other one as a cold start does
// (Prepare, then ApplyPrepared).
func applyOld(m *Machine, cmds [][]byte) {
	for i, c := range cmds {
		if i%2 == 0 {
			m.Apply(c)
		} else {
			m.ApplyPrepared(c, m.Prepare(c))
		}
	}
}

// etcdProbe applies etcd's commands to m that answer by the versions,
// the history and the compact revision (Txns comparing versions, Ranges
// at past revisions, compactions, then writes and the same again), and
// returns every result with m's snapshot after each step.
func etcdProbe(t *testing.T, m *Machine) [][]byte {
	t.Helper()
	var out [][]byte
	record := func(res []byte) {
		out = append(out, res, snap(t, m))
	}
	probe := func() {
		rev := int64(m.Revision())
		for _, back := range []int64{0, 1, 3, 10} {
			q := must(RangeQuery(&pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), Revision: rev - back}))
			res, err := m.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			record(res)
		}
		for i := range 12 {
			k := []byte(fmt.Sprintf("k/%02d", i))
			for _, ver := range []int64{1, 2} {
				record(m.Apply(must(TxnCommand(&pb.TxnRequest{
					Compare: []*pb.Compare{{Key: k, Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: ver}}},
					Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: k}}}},
				}))))
			}
		}
		for _, back := range []int64{5, 1, 0} {
			record(m.Apply(must(CompactCommand(&pb.CompactionRequest{Revision: rev - back}))))
		}
	}
	probe() // its compactions leave the legacy era as it is
	for i := range 12 {
		if i%3 == 0 {
			record(m.Apply(must(PutCommand(&pb.PutRequest{Key: []byte(fmt.Sprintf("k/%02d", i)), Value: []byte("etcd")}))))
		}
	}
	probe()
	applyOld(m, oldCommands(99, 40))
	probe()
	return out
}

// TestLegacyMigrationConverges: replicas of a group the previous kv
// machine wrote reach the same state, whether one applied the whole log
// and another restored a format 1 snapshot taken part way and applied
// the rest: etcd's Txns comparing versions, Ranges at past revisions and
// compactions then answer alike on both, and both write the same
// snapshot.
func TestLegacyMigrationConverges(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		cmds := oldCommands(seed, 300)
		whole := New()
		applyOld(whole, cmds)
		want := etcdProbe(t, whole)
		for _, split := range []int{0, 1, 37, 150, 299, 300} {
			t.Run(fmt.Sprintf("seed=%d/split=%d", seed, split), func(t *testing.T) {
				m := New()
				applyOld(m, cmds[:split])
				restored := New()
				if err := restored.Restore(bytes.NewReader(snapshotV1(t, m))); err != nil {
					t.Fatal(err)
				}
				applyOld(restored, cmds[split:])
				got := etcdProbe(t, restored)
				if len(got) != len(want) {
					t.Fatalf("%d results; want %d", len(got), len(want))
				}
				for i := range got {
					if !bytes.Equal(got[i], want[i]) {
						what := "result"
						if i%2 == 1 {
							what = "snapshot after"
						}
						t.Fatalf("%s %d differs between the replica that restored a format 1 snapshot after %d commands and the one that applied the whole log:\n%x\nwant\n%x", what, i/2, split, got[i], want[i])
					}
				}
			})
		}
	}
}

// TestLegacyEraEnds: a new machine is in the legacy era, a compaction
// leaves it there and answers ErrCompacted (or ErrFutureRev), the first
// etcd write ends it on every replica alike, and a snapshot taken before
// or after carries the era.
func TestLegacyEraEnds(t *testing.T) {
	restore := func(b []byte) *Machine {
		n := New()
		if err := n.Restore(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return n
	}
	version := func(m *Machine, key string) int64 {
		resp, err := m.ReadView().Range(&pb.RangeRequest{Key: []byte(key)})
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("range %q: %v, %v", key, resp, err)
		}
		return resp.Kvs[0].Version
	}
	m := New()
	applyOld(m, oldCommands(5, 50))
	put := command{op: tagPut, key: "p", value: []byte("v")}.encode()
	applyOld(m, [][]byte{put, put, put})
	if !m.legacy || version(m, "p") != 1 || m.compact != m.rev {
		t.Fatalf("legacy %v, version %d, compact %d at %d; want the legacy era", m.legacy, version(m, "p"), m.compact, m.rev)
	}
	for _, rev := range []int64{0, int64(m.rev) - 1, int64(m.rev)} {
		if _, err := DecodeResult(m.Apply(must(CompactCommand(&pb.CompactionRequest{Revision: rev})))); !errors.Is(err, rpctypes.ErrGRPCCompacted) {
			t.Fatalf("compaction at %d in the legacy era: %v; want ErrGRPCCompacted", rev, err)
		}
	}
	if _, err := DecodeResult(m.Apply(must(CompactCommand(&pb.CompactionRequest{Revision: int64(m.rev) + 1})))); !errors.Is(err, rpctypes.ErrGRPCFutureRev) {
		t.Fatalf("compaction after the revision in the legacy era: %v; want ErrGRPCFutureRev", err)
	}
	if !m.legacy {
		t.Fatal("a compaction ended the legacy era")
	}
	before := snap(t, m)
	if b := restore(before); !b.legacy || !bytes.Equal(snap(t, b), before) {
		t.Fatal("a legacy era snapshot does not round-trip")
	}
	// The first etcd write, applied directly or as a cold start's
	// prepared command, ends it on every replica.
	first := must(PutCommand(&pb.PutRequest{Key: []byte("e"), Value: []byte("1")}))
	a, b := m, restore(before)
	a.Apply(first)
	b.ApplyPrepared(first, b.Prepare(first))
	for _, r := range []*Machine{a, b} {
		if r.legacy {
			t.Fatal("the legacy era outlived an etcd put")
		}
		applyOld(r, [][]byte{put, put})
		if v := version(r, "p"); v != 3 {
			t.Fatalf("version %d after two puts out of the legacy era; want 3", v)
		}
	}
	after := snap(t, a)
	if !bytes.Equal(snap(t, b), after) {
		t.Fatal("replicas differ after the legacy era ended")
	}
	if c := restore(after); c.legacy || !bytes.Equal(snap(t, c), after) {
		t.Fatal("a snapshot after the legacy era does not round-trip")
	}
	for _, cmd := range [][]byte{
		must(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 1, TTL: 5})),
		LeaseExpireCommand(1),
		must(TxnCommand(&pb.TxnRequest{})),
		must(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("none")})),
		{tagEtcdPut, 0xff}, // malformed: still an etcd write applied
	} {
		n := New()
		n.Apply(cmd)
		if n.legacy {
			t.Fatalf("command %x left the legacy era", cmd)
		}
	}
}

// TestEmptyGroupStartsAsEtcd: a new group reads to etcd's API as an empty
// etcd, empty at revision 1, and its first etcd write makes revision 2,
// alike whether a replica applied it to a new machine, as a cold start's
// prepared command, or after restoring a format 2 or a format 1
// snapshot of the empty group; a group with a legacy era write keeps its
// revisions.
func TestEmptyGroupStartsAsEtcd(t *testing.T) {
	restore := func(b []byte) *Machine {
		n := New()
		if err := n.Restore(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rangeAt := func(m *Machine, rev int64) (*pb.RangeResponse, error) {
		res, err := m.Query(must(RangeQuery(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := DecodeResult(res)
		if err != nil {
			return nil, err
		}
		return resp.(*pb.RangeResponse), nil
	}
	empty := New()
	for _, rev := range []int64{0, 1} {
		if resp, err := rangeAt(empty, rev); err != nil || resp.Header.Revision != 1 || resp.Count != 0 {
			t.Fatalf("range at %d of a new group: %v, %v; want empty at revision 1", rev, resp, err)
		}
	}
	if _, err := rangeAt(empty, 2); !errors.Is(err, rpctypes.ErrGRPCFutureRev) {
		t.Fatalf("range at 2 of a new group: %v; want ErrGRPCFutureRev", err)
	}
	first := must(PutCommand(&pb.PutRequest{Key: []byte("e"), Value: []byte("1")}))
	replicas := []*Machine{New(), New(), restore(snap(t, empty)), restore(snapshotV1(t, empty))}
	var want []byte
	for i, r := range replicas {
		var res []byte
		if i == 1 {
			res = r.ApplyPrepared(first, r.Prepare(first))
		} else {
			res = r.Apply(first)
		}
		resp, err := DecodeResult(res)
		if err != nil || resp.(*pb.PutResponse).Header.Revision != 2 {
			t.Fatalf("replica %d: the first etcd write: %v, %v; want revision 2", i, resp, err)
		}
		if r.compact != 0 {
			t.Fatalf("replica %d: compact revision %d; want 0", i, r.compact)
		}
		if i == 0 {
			want = snap(t, r)
		} else if !bytes.Equal(snap(t, r), want) {
			t.Fatalf("replica %d differs after the first etcd write", i)
		}
	}
	// A legacy era write keeps its revision.
	m := New()
	applyOld(m, [][]byte{command{op: tagPut, key: "p", value: []byte("v")}.encode()})
	if resp, err := DecodeResult(m.Apply(first)); err != nil || resp.(*pb.PutResponse).Header.Revision != 2 {
		t.Fatalf("an etcd write after one legacy write: %v, %v; want revision 2", resp, err)
	}
	m = New()
	applyOld(m, [][]byte{command{op: tagPut, key: "p", value: []byte("v")}.encode(), command{op: tagPut, key: "q", value: []byte("v")}.encode()})
	if resp, err := DecodeResult(m.Apply(first)); err != nil || resp.(*pb.PutResponse).Header.Revision != 3 {
		t.Fatalf("an etcd write after two legacy writes: %v, %v; want revision 3", resp, err)
	}
}
