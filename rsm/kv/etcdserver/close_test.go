package etcdserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestCloseWhileWatchesArrive: watch streams that arrive while the
// server closes neither race with Close's wait nor outlive it, and a
// stream that arrives after Close is told the server stopped.
func TestCloseWhileWatchesArrive(t *testing.T) {
	g := startGroup(t, nil)
	conn, err := grpc.NewClient(g.addr(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wc := pb.NewWatchClient(conn)
	s := g.server(0)

	// Streams open one after another from four goroutines until the
	// server has closed.
	closed := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-closed:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				if w, err := wc.Watch(ctx); err == nil {
					_ = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}})
					_, _ = w.Recv()
				}
				cancel()
			}
		}()
	}
	// Let streams be in flight, then close beneath them.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	w, err := wc.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || !r.Created {
		t.Fatalf("watch before close: %v, %v", r, err)
	}
	cancel()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(closed)
	wg.Wait()

	// After Close, a new stream is refused as etcd refuses one on a
	// stopping server.
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	w, err = wc.Watch(ctx)
	if err == nil {
		_ = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}})
		_, err = w.Recv()
	}
	if got, want := status.Convert(err).Message(), status.Convert(rpctypes.ErrGRPCStopped).Message(); got != want {
		t.Fatalf("watch after close: %v, want %q", err, want)
	}
}
