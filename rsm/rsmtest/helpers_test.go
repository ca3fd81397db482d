package rsmtest_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// counter is the replicated counter of rsmtest.
type counter = rsmtest.Counter

func decodeCount(b []byte) (uint64, error) { return rsmtest.DecodeCount(b) }

func counterMachines(int) map[string]rsm.StateMachine {
	return map[string]rsm.StateMachine{"counter": &counter{}}
}

// fastOptions make failover take well under a second (as in rsm's tests).
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

// logBuffer collects the nodes' logs; they are saved with the artifacts
// when a test fails, and streamed to the test log with -v and
// RSMTEST_LOG=1.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// nodeLogger returns a logger for the cluster's nodes whose output is
// saved under the test's artifacts directory if the test fails.
func nodeLogger(t *testing.T) *slog.Logger {
	b := &logBuffer{}
	var w io.Writer = b
	if os.Getenv("RSMTEST_LOG") != "" {
		w = io.MultiWriter(b, os.Stderr)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir, err := rsmtest.ArtifactsDir(t)
		if err == nil {
			b.mu.Lock()
			err = os.WriteFile(filepath.Join(dir, "nodes.log"), b.buf.Bytes(), 0o644)
			b.mu.Unlock()
		}
		if err != nil {
			t.Logf("saving the nodes' logs: %v", err)
			return
		}
		t.Logf("nodes' logs in %s", filepath.Join(dir, "nodes.log"))
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
