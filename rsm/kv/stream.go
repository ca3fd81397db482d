package kv

import (
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// etcd 3.7's answers to a RangeStream it does not serve.
var (
	errStreamSort    = status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	errStreamFilters = status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
)

// firstStreamChunk is the key limit of a stream's first chunk (etcd's).
const firstStreamChunk = 10

// CheckRangeStream checks a RangeStream request as etcd 3.7 does: as a
// Range (ErrGRPCEmptyKey, ErrGRPCInvalidSortOption), then refusing a
// custom sort order or revision filters as codes.Unimplemented.
func CheckRangeStream(r *pb.RangeRequest) error {
	if err := checkRangeRequest(r); err != nil {
		return err
	}
	if !defaultOrdering(r.SortTarget, r.SortOrder) {
		return errStreamSort
	}
	if hasRevisionFilters(r) {
		return errStreamFilters
	}
	return nil
}

// RangeStream answers r as etcd 3.7's KV.RangeStream does, from the
// view, handing send each chunk in turn. Every chunk is read at the one
// revision r names (the view's when 0). A count_only request is one
// chunk holding the count. Otherwise the first chunk holds at most 10
// keys and each next one twice or half the last's limit when the last's
// encoded size was below half or above twice chunkBytes (etcd's
// --max-request-bytes); the last chunk alone has a header (the view's
// revision), more (r.Limit cut the range short) and count (the keys
// sent, and those the limit left out). Chunks other than the last hold
// only keys, and their boundaries are etcd's for the same state. A sort
// target with no order sorts each chunk on its own, as etcd does. Errors
// are those of Range; a custom sort order or revision filters are
// refused as codes.Unimplemented, as etcd refuses them. The chunks'
// values share the view's memory: marshal them, never change them.
func (v *ReadView) RangeStream(r *pb.RangeRequest, chunkBytes int, send func(*pb.RangeResponse) error) error {
	if err := CheckRangeStream(r); err != nil {
		return err
	}
	return v.s.rangeStream(r, max(v.s.rev, 1), chunkBytes, send)
}

func (s *state) rangeStream(r *pb.RangeRequest, cur uint64, chunkBytes int, send func(*pb.RangeResponse) error) error {
	rev, err := s.checkRev(r.Revision, cur)
	if err != nil {
		return err
	}
	header := func() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: int64(cur)} }
	kr := rangeOf(r.Key, r.RangeEnd)
	if r.CountOnly {
		return send(&pb.RangeResponse{Header: header(), Count: s.count(kr, rev)})
	}
	total := r.Limit
	if total == 0 {
		total = math.MaxInt64
	}
	limit := min(int64(firstStreamChunk), total)
	var count int64
	for {
		kvs, more, visited := s.chunk(kr, rev, limit, r)
		count += int64(len(kvs))
		out := &pb.RangeResponse{Kvs: kvs}
		done := !more || count == total
		var next string
		if more {
			next = string(kvs[len(kvs)-1].Key) + "\x00"
		}
		if done {
			out.Header, out.More, out.Count = header(), more, count
			if more {
				out.Count += s.count(keyRange{key: next, end: kr.end}, rev)
			}
		}
		if err := send(out); err != nil {
			return err
		}
		if done {
			return nil
		}
		// The size etcd weighs is its range's answer for the chunk: with
		// the header and the keys it visited as the count.
		size := proto.Size(&pb.RangeResponse{Header: header(), Kvs: kvs, More: more, Count: visited})
		kr.key = next
		limit = min(nextChunkLimit(limit, size, chunkBytes), total-count)
	}
}

// nextChunkLimit is etcd's: the last limit doubled when its chunk's size
// was below half the target, halved above twice, and never 0.
func nextChunkLimit(last int64, size, target int) int64 {
	switch {
	case size < target/2:
		last *= 2
	case size > target*2:
		last /= 2
	}
	return max(last, 1)
}

// count is the number of live keys of kr at rev.
func (s *state) count(kr keyRange, rev uint64) int64 {
	var n int64
	s.ascend(kr, func(e *entry) bool {
		if e.at(rev) != nil {
			n++
		}
		return true
	})
	return n
}

// chunk reads one chunk of a stream as etcd's range without its total
// count does: it visits up to limit+1 live keys (all for a limit of 0
// or less), sorts them as r asks (by value, version, create or mod
// revision ascending, when r names that target with no order), answers
// the first limit of them with more set if there were more, and
// reports how many it visited. As etcd's, a sorted chunk may leave out
// a key of the range (sorted past the limit) and the next chunk starts
// after the key sorted last.
func (s *state) chunk(kr keyRange, rev uint64, limit int64, r *pb.RangeRequest) (kvs []*mvccpb.KeyValue, more bool, visited int64) {
	visit := limit
	if visit > 0 && visit < math.MaxInt64 {
		visit++
	}
	s.ascend(kr, func(e *entry) bool {
		if visit > 0 && int64(len(kvs)) >= visit {
			return false
		}
		if v := e.at(rev); v != nil {
			kvs = append(kvs, kvOf(e.key, v))
		}
		return true
	})
	visited = int64(len(kvs))
	sortKVs(kvs, r)
	if limit > 0 && int64(len(kvs)) > limit {
		kvs, more = kvs[:limit], true
	}
	if r.KeysOnly {
		keysOnlyKVs(kvs, r.SortTarget)
	}
	return kvs, more, visited
}

// keysOnlyKVs strips kvs for a keys_only answer as etcd 3.7 does: no
// value, and no lease unless the range sorts by value.
func keysOnlyKVs(kvs []*mvccpb.KeyValue, target pb.RangeRequest_SortTarget) {
	for _, kv := range kvs {
		kv.Value = nil
		if target != pb.RangeRequest_VALUE {
			kv.Lease = 0
		}
	}
}
