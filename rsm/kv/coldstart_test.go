package kv_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/filestore"
)

// TestColdStartFromLentSegments: a Machine is an rsm.Borrower, so a node
// starting on a snapshot of a base and log segments lends it the
// segments' commands in memory it reads the next segments into (file://
// reads into it). The state it serves is the one written: every key's
// value and revisions, after puts, overwrites and deletes across many
// segments.
func TestColdStartFromLentSegments(t *testing.T) {
	if _, ok := any(kv.New()).(rsm.Borrower); !ok {
		t.Fatal("kv.Machine is not an rsm.Borrower")
	}
	dir := t.TempDir()
	fs, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(fs)
	defer st.Close()
	opts := rsm.Options{SnapshotThreshold: 20, FlushInterval: time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, LeadershipDelay: 10 * time.Millisecond}
	join := func(id string) (*rsm.Host, *rsm.Node) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: id, Addr: ln.Addr().String(), Listener: ln,
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

	h, n := join("a")
	c := kv.NewClient(n)
	want := map[string]kv.KeyValue{}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := t.Context()
	for i := range 600 {
		key := fmt.Sprintf("k%03d", rng.IntN(150))
		if i%7 == 6 {
			if _, _, err := c.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
			continue
		}
		value := []byte(strings.Repeat(fmt.Sprintf("%d:%s/", i, key), 1+rng.IntN(40)))
		rev, err := c.Put(ctx, key, value)
		if err != nil {
			t.Fatal(err)
		}
		kvw, ok := want[key]
		if !ok {
			kvw.CreateRevision = rev
		}
		kvw.Key, kvw.Value, kvw.ModRevision = key, value, rev
		want[key] = kvw
	}
	applied := n.Status().ApplyIndex
	waitStatus(t, n, func(s rsm.Status) bool { return s.SnapshotIndex+uint64(opts.SnapshotThreshold) > applied })
	if err := n.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	items, err := st.List(ctx, "g/snap/s", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) < 3 {
		t.Fatalf("%d log segments stored; want several", len(items))
	}

	h, n = join("b")
	defer func() { _ = n.Leave(context.Background()); _ = h.Close() }()
	c = kv.NewClient(n)
	for i := range 150 {
		key := fmt.Sprintf("k%03d", i)
		got, err := c.Get(ctx, key)
		w, ok := want[key]
		switch {
		case !ok && err == nil:
			t.Fatalf("%s: %+v after a cold start; want it deleted", key, got)
		case !ok:
			continue
		case err != nil:
			t.Fatalf("%s: %v after a cold start", key, err)
		case string(got.Value) != string(w.Value) || got.CreateRevision != w.CreateRevision || got.ModRevision != w.ModRevision:
			t.Fatalf("%s after a cold start: %.40q created %d modified %d; want %.40q, %d, %d", key,
				got.Value, got.CreateRevision, got.ModRevision, w.Value, w.CreateRevision, w.ModRevision)
		}
	}
}
