package rsm_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store"
)

// counter is the replicated counter of rsmtest.
type counter = rsmtest.Counter

func decodeCount(t testing.TB, b []byte) uint64 {
	t.Helper()
	n, err := rsmtest.DecodeCount(b)
	if err != nil {
		t.Fatalf("%v: %x", err, b)
	}
	return n
}

// fastOptions make failover take well under a second.
func fastOptions() rsm.Options {
	return rsm.Options{
		FlushInterval:       2 * time.Millisecond,
		BatchMinCount:       64,
		HeartbeatInterval:   50 * time.Millisecond,
		MaxMissedHeartbeats: 4,
		LeadershipDelay:     30 * time.Millisecond,
		RequestTimeout:      5 * time.Second,
		StoreTimeout:        time.Second,
		SnapshotThreshold:   20,
		Retry:               rsm.RetryOptions{BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, ThrottleDelay: 20 * time.Millisecond},
	}
}

func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct {
	t  testing.TB
	mu sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// startHost starts a host on a loopback port.
func startHost(t testing.TB, st *store.Store, id string) *rsm.Host {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: id, Addr: lis.Addr().String(), Listener: lis, Logger: quietLogger(t).With("id", id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// startPlainHost starts a host on a loopback port without peer
// authentication (HostConfig.PlaintextLoopback).
func startPlainHost(t testing.TB, st *store.Store, id string) *rsm.Host {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: id, Addr: lis.Addr().String(), Listener: lis, PlaintextLoopback: true, Logger: quietLogger(t).With("id", id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// waitLeader waits until exactly one of nodes is a joined leader.
func waitLeader(t testing.TB, nodes ...*rsm.Node) *rsm.Node {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []*rsm.Node
		for _, n := range nodes {
			if n == nil {
				continue
			}
			if s := n.Status(); s.Role == "LEADER" && s.State == "JOINED" {
				leaders = append(leaders, n)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no single leader within 20 s")
	return nil
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
