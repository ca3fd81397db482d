package rsm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
)

// counter is a replicated counter: any command adds its 8-byte big-endian
// operand (1 if empty) and returns the new total.
type counter struct {
	mu sync.Mutex
	n  uint64
}

func (c *counter) Apply(cmd []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := uint64(1)
	if len(cmd) == 8 {
		d = binary.BigEndian.Uint64(cmd)
	}
	c.n += d
	return binary.BigEndian.AppendUint64(nil, c.n)
}

func (c *counter) Query([]byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.BigEndian.AppendUint64(nil, c.n), nil
}

func (c *counter) Snapshot(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, c.n))
	return err
}

func (c *counter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) != 8 {
		return errors.New("counter: snapshot is not 8 bytes")
	}
	c.mu.Lock()
	c.n = binary.BigEndian.Uint64(b)
	c.mu.Unlock()
	return nil
}

func decodeCount(t testing.TB, b []byte) uint64 {
	t.Helper()
	if len(b) != 8 {
		t.Fatalf("counter result %x is not 8 bytes", b)
	}
	return binary.BigEndian.Uint64(b)
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
