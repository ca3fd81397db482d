package kv

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// streamMachine holds keys k/000..k/099 with 20-byte values, every
// seventh on a lease, k/050..k/059 deleted, k/000..k/009 written twice.
func streamMachine(t *testing.T) (m *Machine, before int64) {
	t.Helper()
	m = New()
	apply := applier(t, m)
	apply(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 9, TTL: 60}))
	for i := range 100 {
		var lease int64
		if i%7 == 0 {
			lease = 9
		}
		apply(PutCommand(&pb.PutRequest{Key: fmt.Appendf(nil, "k/%03d", i), Value: []byte(strings.Repeat("v", 20)), Lease: lease}))
	}
	before = int64(m.Revision())
	apply(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("k/050"), RangeEnd: []byte("k/060")}))
	for i := range 10 {
		apply(PutCommand(&pb.PutRequest{Key: fmt.Appendf(nil, "k/%03d", i), Value: []byte("second")}))
	}
	return m, before
}

func streamChunks(t *testing.T, v *ReadView, r *pb.RangeRequest, chunkBytes int) ([]*pb.RangeResponse, error) {
	t.Helper()
	var chunks []*pb.RangeResponse
	err := v.RangeStream(r, chunkBytes, func(c *pb.RangeResponse) error {
		chunks = append(chunks, c)
		return nil
	})
	return chunks, err
}

// TestRangeStreamChunks: a stream's chunks put together are the Range's
// answer at one revision (keys, count, more), only the last has a header,
// more and count, and the chunks' sizes follow etcd's: 10 keys first,
// then twice as many while a chunk is below half the target size, half
// as many while above twice, the rest when a limit is near.
func TestRangeStreamChunks(t *testing.T) {
	m, before := streamMachine(t)
	v := m.ReadView()
	all := func(r *pb.RangeRequest) *pb.RangeRequest { r.Key, r.RangeEnd = []byte("k/"), []byte("k0"); return r }
	for _, c := range []struct {
		r          *pb.RangeRequest
		chunkBytes int
		sizes      []int
	}{
		{all(&pb.RangeRequest{}), 3 << 19, []int{10, 20, 40, 20}},
		{all(&pb.RangeRequest{Limit: 35}), 3 << 19, []int{10, 20, 5}},
		{all(&pb.RangeRequest{Limit: 30}), 3 << 19, []int{10, 20}},
		{all(&pb.RangeRequest{Limit: 7}), 3 << 19, []int{7}},
		{all(&pb.RangeRequest{Limit: 90}), 3 << 19, []int{10, 20, 40, 20}},
		{all(&pb.RangeRequest{Limit: -1}), 3 << 19, []int{90}},
		{all(&pb.RangeRequest{KeysOnly: true}), 3 << 19, []int{10, 20, 40, 20}},
		{all(&pb.RangeRequest{Revision: before}), 3 << 19, []int{10, 20, 40, 30}},
		{all(&pb.RangeRequest{Revision: before, Limit: 95}), 3 << 19, []int{10, 20, 40, 25}},
		// 10 keys of about 35 bytes are above twice 100: halved to 5
		// (175 bytes), then kept within [50, 200]. Above twice 1 byte,
		// halved down to 1.
		{all(&pb.RangeRequest{}), 100, append([]int{10}, repeat(5, 16)...)},
		{all(&pb.RangeRequest{}), 1, append([]int{10, 5, 2}, repeat(1, 73)...)},
		{&pb.RangeRequest{Key: []byte("k/003")}, 3 << 19, []int{1}},
		{&pb.RangeRequest{Key: []byte("k/055")}, 3 << 19, []int{0}},
		{&pb.RangeRequest{Key: []byte("k/095"), RangeEnd: []byte{0}}, 3 << 19, []int{5}},
	} {
		chunks, err := streamChunks(t, v, c.r, c.chunkBytes)
		if err != nil {
			t.Fatalf("%v: %v", c.r, err)
		}
		want, err := v.Range(c.r)
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		got := &pb.RangeResponse{}
		for i, ch := range chunks {
			sizes = append(sizes, len(ch.Kvs))
			if last := i == len(chunks)-1; !last && (ch.Header != nil || ch.More || ch.Count != 0) {
				t.Errorf("%v: chunk %d of %d has a header, more or count: %v", c.r, i, len(chunks), ch)
			}
			proto.Merge(got, ch)
		}
		if !slices.Equal(sizes, c.sizes) {
			t.Errorf("%v, %d bytes: chunks of %v keys; want %v", c.r, c.chunkBytes, sizes, c.sizes)
		}
		if c.r.Limit < 0 {
			want.More = false // etcd's stream reads all with a negative limit, as its Range
		}
		if !proto.Equal(got, want) {
			t.Errorf("%v: the chunks make\n%v\nwant the Range's\n%v", c.r, got, want)
		}
	}
}

// TestRangeStreamCountOnly: a count_only stream is one chunk, the
// header and the count.
func TestRangeStreamCountOnly(t *testing.T) {
	m, before := streamMachine(t)
	v := m.ReadView()
	chunks, err := streamChunks(t, v, &pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), CountOnly: true, Revision: before}, 3<<19)
	want := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: v.Revision()}, Count: 100}
	if err != nil || len(chunks) != 1 || !proto.Equal(chunks[0], want) {
		t.Fatalf("count only: %v, %v; want %v", chunks, err, want)
	}
}

// TestRangeStreamErrors: a stream is refused as etcd 3.7 refuses it.
func TestRangeStreamErrors(t *testing.T) {
	m, _ := streamMachine(t)
	if _, err := DecodeResult(m.Apply(must(CompactCommand(&pb.CompactionRequest{Revision: 5})))); err != nil {
		t.Fatal(err)
	}
	v := m.ReadView()
	k := []byte("k/")
	for _, c := range []struct {
		r    *pb.RangeRequest
		want error
	}{
		{&pb.RangeRequest{}, rpctypes.ErrGRPCEmptyKey},
		{&pb.RangeRequest{Key: k, SortOrder: 7}, rpctypes.ErrGRPCInvalidSortOption},
		{&pb.RangeRequest{Key: k, SortOrder: pb.RangeRequest_DESCEND}, status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")},
		{&pb.RangeRequest{Key: k, SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_MOD}, status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")},
		{&pb.RangeRequest{Key: k, MinModRevision: 3}, status.Error(codes.Unimplemented, "RangeStream does not support revision filters")},
		{&pb.RangeRequest{Key: k, MaxCreateRevision: 3}, status.Error(codes.Unimplemented, "RangeStream does not support revision filters")},
		{&pb.RangeRequest{Key: k, Revision: 4}, rpctypes.ErrGRPCCompacted},
		{&pb.RangeRequest{Key: k, Revision: 1 << 40}, rpctypes.ErrGRPCFutureRev},
		{&pb.RangeRequest{Key: k, SortOrder: pb.RangeRequest_ASCEND}, nil},
		{&pb.RangeRequest{Key: k, SortTarget: pb.RangeRequest_VALUE}, nil},
	} {
		_, err := streamChunks(t, v, c.r, 3<<19)
		if c.want == nil && err != nil || c.want != nil && (err == nil || err.Error() != c.want.Error() || status.Code(err) != status.Code(c.want)) {
			t.Errorf("%v: %v; want %v", c.r, err, c.want)
		}
	}
	sendErr := errors.New("client gone")
	calls := 0
	err := v.RangeStream(&pb.RangeRequest{Key: k, RangeEnd: []byte("k0")}, 3<<19, func(*pb.RangeResponse) error { calls++; return sendErr })
	if !errors.Is(err, sendErr) || calls != 1 {
		t.Errorf("a failing send: %v after %d chunks; want the send's error after 1", err, calls)
	}
}

func repeat(n, times int) []int { return slices.Repeat([]int{n}, times) }

// TestRangeStreamSortsChunks: a sort target with no order sorts each
// chunk on its own, as etcd 3.7 does: the first 11 keys in key order
// (k/0..k/9, k/a), sorted by create revision, cut to 10 (k/a left out);
// the next chunk reads from after the key sorted last (k/0), so it
// sends k/1..k/9 again.
func TestRangeStreamSortsChunks(t *testing.T) {
	m := New()
	for _, k := range []string{"k/9", "k/8", "k/7", "k/6", "k/5", "k/4", "k/3", "k/2", "k/1", "k/0", "k/a", "k/b"} {
		if _, err := DecodeResult(m.Apply(must(PutCommand(&pb.PutRequest{Key: []byte(k), Value: []byte("v")})))); err != nil {
			t.Fatal(err)
		}
	}
	chunks, err := streamChunks(t, m.ReadView(), &pb.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0"), SortTarget: pb.RangeRequest_CREATE}, 3<<19)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, c := range chunks {
		var ks []string
		for _, kv := range c.Kvs {
			ks = append(ks, string(kv.Key))
		}
		got = append(got, ks)
	}
	want := "[[k/9 k/8 k/7 k/6 k/5 k/4 k/3 k/2 k/1 k/0] [k/9 k/8 k/7 k/6 k/5 k/4 k/3 k/2 k/1 k/a k/b]]"
	if fmt.Sprint(got) != want {
		t.Errorf("chunks %v; want etcd's %s", got, want)
	}
}
