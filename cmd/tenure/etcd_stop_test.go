package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestEtcdServeStopsWithStreamsInFlight: etcd serve stops promptly when
// its context ends (as on SIGTERM) while clients hold streams it cannot
// finish: a watch whose client stopped reading after a burst of large
// events, a watch cancelled while it catches up from history, a
// RangeStream whose client stopped reading mid-way, and lease
// keep-alive streams. None of them may hold the process until its
// request timeout (10 s by default) or longer.
func TestEtcdServeStopsWithStreamsInFlight(t *testing.T) {
	url, stop := startEtcdServe(t, "--store", "file://"+t.TempDir(), "--id", "node-1")
	// Small fixed windows (no BDP growth): a client that stops reading
	// soon blocks the server's writes.
	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(url, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	kvc, wc, lc := pb.NewKVClient(conn), pb.NewWatchClient(conn), pb.NewLeaseClient(conn)

	// 40 values of 256 KiB: 10 MiB of history, far more than the windows.
	value := bytes.Repeat([]byte("v"), 256<<10)
	for i := range 40 {
		if _, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte{'k', byte('a' + i%26), byte('0' + i/26)}, Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(w pb.Watch_WatchClient) {
		t.Helper()
		if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A watch whose client reads one response, then stops reading.
	stalled, err := wc.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create(stalled)
	if _, err := stalled.Recv(); err != nil {
		t.Fatal(err)
	}
	// A watch cancelled (by its client) while it catches up.
	wctx, wcancel := context.WithCancel(ctx)
	catching, err := wc.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	create(catching)
	// A RangeStream read once, then no more.
	rs, err := kvc.RangeStream(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Recv(); err != nil {
		t.Fatal(err)
	}
	// Lease keep-alive streams, one kept alive once.
	g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ka, err := lc.LeaseKeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := ka.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// Let more events queue behind the stalled watch, then cancel the
	// catching-up one and stop at once.
	for i := range 8 {
		if _, err := kvc.Put(ctx, &pb.PutRequest{Key: []byte{'k', 'z', byte('0' + i)}, Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	wcancel()

	start := time.Now()
	code, out := stop()
	// The bound is liveness, not speed: a stop that waits on the request
	// timeout (10 s) or hangs exceeds it; one that does not takes well
	// under a second.
	took := time.Since(start)
	t.Logf("stopped in %v", took)
	if took > 5*time.Second {
		t.Fatalf("etcd serve took %v to stop with streams in flight:\n%s", took, out)
	}
	if code != 0 {
		t.Fatalf("etcd serve stopped with %d:\n%s", code, out)
	}
}
