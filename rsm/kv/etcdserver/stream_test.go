package etcdserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestRangeStream: etcd 3.7's streamed range through the etcd client, on
// a follower: a linearizable stream sees a write acknowledged through
// the leader just before, in chunks whose sum is Get's answer at one
// revision with the group's header on the last; a serializable stream
// reads the follower's state; a custom sort order is refused as
// Unimplemented, which Kubernetes takes to list page by page instead.
func TestRangeStream(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 30*time.Second)
	lc := g.client(g.leader())
	for i := range 150 {
		if _, err := lc.Put(ctx, fmt.Sprintf("s/%03d", i), strings.Repeat("x", i)); err != nil {
			t.Fatal(err)
		}
	}
	fc := g.client(g.follower())
	for round := range 3 {
		key := fmt.Sprintf("s/%03d", 150+round)
		put, err := lc.Put(ctx, key, "last")
		if err != nil {
			t.Fatal(err)
		}
		stream, err := fc.GetStream(ctx, "s/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var chunks []*pb.RangeResponse
		for r := range stream {
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, r.RangeResponse)
		}
		got := &pb.RangeResponse{}
		for _, c := range chunks {
			proto.Merge(got, c)
		}
		if len(chunks) < 3 || len(chunks[0].Kvs) != 10 {
			t.Errorf("round %d: %d chunks, the first of %d keys; want several, the first of 10", round, len(chunks), len(chunks[0].Kvs))
		}
		h := chunks[len(chunks)-1].Header
		if h == nil || h.Revision < put.Header.Revision || h.ClusterId == 0 || h.MemberId == 0 || h.RaftTerm == 0 {
			t.Fatalf("round %d: last chunk's header %v; want the group's, at revision %d or later", round, h, put.Header.Revision)
		}
		want, err := fc.Get(ctx, "s/", clientv3.WithPrefix(), clientv3.WithRev(h.Revision))
		if err != nil {
			t.Fatal(err)
		}
		if got.Count != int64(151+round) || len(got.Kvs) != 151+round || string(got.Kvs[len(got.Kvs)-1].Key) != key {
			t.Errorf("round %d: the stream holds %d keys (count %d), the last %q; want %d up to %q", round, len(got.Kvs), got.Count, got.Kvs[len(got.Kvs)-1].Key, 151+round, key)
		}
		got.Header, want.Header = nil, nil
		if !proto.Equal(got, (*pb.RangeResponse)(want)) {
			t.Errorf("round %d: the stream's keys differ from Get's at revision %d", round, h.Revision)
		}
	}

	// Serializable, with a limit: the follower's state, cut short.
	sresp, err := streamGet(ctx, fc, "s/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithLimit(25))
	if err != nil {
		t.Fatal(err)
	}
	if len(sresp.Kvs) != 25 || !sresp.More || sresp.Count != 153 {
		t.Errorf("serializable, limit 25: %d keys, more %v, count %d; want 25, true, 153", len(sresp.Kvs), sresp.More, sresp.Count)
	}

	_, err = streamGet(ctx, fc, "s/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("a stream sorted descending: %v; want Unimplemented", err)
	}
}

func streamGet(ctx context.Context, c *clientv3.Client, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	s, err := c.GetStream(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return clientv3.GetStreamToGetResponse(s)
}

// TestRangeStreamNewGroup: a linearizable stream on a group no etcd write
// has reached yet (revision 1, as Kubernetes' first list of a new
// cluster finds it) answers at once with no keys, on the leader and on a
// follower, instead of waiting for a write.
func TestRangeStreamNewGroup(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 30*time.Second)
	for _, c := range []*clientv3.Client{g.client(g.leader()), g.client(g.follower())} {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := streamGet(sctx, c, "/pods/", clientv3.WithPrefix())
		cancel()
		if err != nil {
			t.Fatalf("linearizable stream on a new group: %v", err)
		}
		if len(resp.Kvs) != 0 || resp.Count != 0 || resp.Header == nil || resp.Header.Revision != 1 {
			t.Errorf("linearizable stream on a new group: %d keys, count %d, header %v; want none at revision 1", len(resp.Kvs), resp.Count, resp.Header)
		}
	}
}
