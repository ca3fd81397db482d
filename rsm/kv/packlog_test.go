package kv_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/filestore"
)

// noPacks hides a driver's packing, as a version of tenure without packs
// saw the store: the log it writes is a file per entry.
type noPacks struct{ driver.Store }

// TestExistingLogMovesIntoPack: a group whose log was written as a file
// per entry (by a version without packs) gets a packed log from the first
// leader that can pack it, at its first quiet moment, and nothing written
// before or after is lost: a cold start reads it all.
func TestExistingLogMovesIntoPack(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "g.d", "log.d")
	opts := rsm.Options{SnapshotThreshold: 20, FlushInterval: time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, LeadershipDelay: 10 * time.Millisecond}
	join := func(id string, d driver.Store) (*rsm.Host, *rsm.Node) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h, err := rsm.NewHost(t.Context(), store.New(d), rsm.HostConfig{ID: id, Addr: ln.Addr().String(), Listener: ln,
			Logger: slog.New(slog.DiscardHandler), SkipProbe: true})
		if err != nil {
			t.Fatal(err)
		}
		n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{kv.MachineName: kv.New()}, opts)
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, n, func(s rsm.Status) bool { return s.Role == "LEADER" })
		return h, n
	}
	open := func() *filestore.Store {
		fs, err := filestore.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	ctx := t.Context()
	want := map[string]string{}
	put := func(n *rsm.Node, from, to int) {
		t.Helper()
		c := kv.NewClient(n)
		for i := from; i < to; i++ {
			key, value := fmt.Sprintf("k%03d", i%40), fmt.Sprintf("v%d", i)
			if _, err := c.Put(ctx, key, []byte(value)); err != nil {
				t.Fatal(err)
			}
			want[key] = value
		}
	}
	check := func(n *rsm.Node, when string) {
		t.Helper()
		c := kv.NewClient(n)
		for key, value := range want {
			got, err := c.Get(ctx, key)
			if err != nil || string(got.Value) != value {
				t.Fatalf("%s: %s = %q, %v; want %q", when, key, got.Value, err, value)
			}
		}
	}
	stop := func(h *rsm.Host, n *rsm.Node) {
		if err := n.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		_ = h.Close()
	}

	h, n := join("a", noPacks{open()})
	put(n, 0, 55)
	stop(h, n)
	entries, err := os.ReadDir(logPath)
	if err != nil || len(entries) == 0 {
		t.Fatalf("the old layout's log: %d files, %v; want a directory of entries", len(entries), err)
	}

	h, n = join("b", open())
	deadline := time.Now().Add(20 * time.Second)
	for {
		fi, err := os.Lstat(logPath)
		if err == nil && fi.Mode().IsRegular() {
			break // the pack's head
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log is still stored as files (%v, %v)", fi.Mode(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(n, "after the log moved into a pack")
	put(n, 55, 100)
	stop(h, n)
	if segs, err := os.ReadDir(filepath.Join(dir, "g.d", "log.p")); err != nil || len(segs) == 0 {
		t.Fatalf("no pack segments after writes: %d, %v", len(segs), err)
	}

	h, n = join("c", open())
	defer stop(h, n)
	check(n, "after a cold start")
}
