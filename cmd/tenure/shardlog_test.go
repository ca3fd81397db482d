package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// tenure shards in shard mode runs one election per shard; its output
// stays a few lines however many shards there are: no INFO line per
// shard, and the held set printed at most once a second.
func TestShardsLogsDoNotFlood(t *testing.T) {
	const shards = 60
	ctx, cancel := context.WithCancel(t.Context())
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: out, stderr: errb}, []string{"shards", "--store", tempStore(t), "--shards", "60",
			"--mode", "shard", "--id", "a", "--lease", "2s", "--renew", "500ms", "--log-level", "info"})
	}()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !strings.Contains(out.String(), "leads 60 shards"); {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	stdout, stderr := strings.Split(strings.TrimSpace(out.String()), "\n"), strings.TrimSpace(errb.String())
	if !strings.Contains(out.String(), "leads 60 shards") || !strings.Contains(out.String(), "leads 0 shards: none\nstopped: released every shard") {
		t.Fatalf("output lacks the held sets:\n%s", out.String())
	}
	// One line per shard would be 60 lines of output and 180 of logs.
	if len(stdout) >= shards/2 {
		t.Errorf("%d lines of output for %d shards:\n%s", len(stdout), shards, out.String())
	}
	if n := strings.Count(stderr, "\n") + 1; stderr != "" && n >= shards/2 {
		t.Errorf("%d log lines for %d shards:\n%.2000s", n, shards, stderr)
	}
}

// Each per-shard warning is logged once per interval, saying how many
// like it were left out; the per-shard INFO lines are DEBUG; the
// coordinator's own lines pass.
func TestShardLogHandler(t *testing.T) {
	var buf bytes.Buffer
	h := newShardLogHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}), 10*time.Second)
	group := slog.New(h)
	t0 := time.Now()
	logAt := func(l *slog.Logger, at time.Time, level slog.Level, msg string) {
		r := slog.NewRecord(at, level, msg, 0)
		if l.Handler().Enabled(context.Background(), level) {
			_ = l.Handler().Handle(context.Background(), r)
		}
	}
	for i := range 5 {
		shard := group.With("shard", i)
		logAt(shard, t0, slog.LevelInfo, "became leader")
		logAt(shard, t0.Add(time.Duration(i)*time.Second), slog.LevelWarn, "renewal failed")
	}
	logAt(group.With("shard", 9), t0.Add(11*time.Second), slog.LevelWarn, "renewal failed")
	logAt(group, t0, slog.LevelInfo, "shards changed")
	got := buf.String()
	if strings.Contains(got, "became leader") {
		t.Errorf("a per-shard INFO line at INFO:\n%s", got)
	}
	if n := strings.Count(got, "renewal failed"); n != 2 || !strings.Contains(got, "similarLinesLeftOut=4") {
		t.Errorf("%d warnings; want 2, the second saying 4 were left out:\n%s", n, got)
	}
	if !strings.Contains(got, "shards changed") {
		t.Errorf("the coordinator's line is missing:\n%s", got)
	}
}
