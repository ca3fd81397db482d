package rsm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestSnapshotLoadLogged: a node that starts on a stored snapshot logs
// what it loaded, at Info: the end index, the bytes of the base and of
// the segments it read, and how long it took; an operator reads there
// why a restart took the time it did.
func TestSnapshotLoadLogged(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	const pad = 64 << 10 // a base large enough that later snapshots add segments
	writeGroupOf(t, mem, opts, &paddedCounter{pad: pad})

	n, logs := startLoggedLeader(t, mem, opts, pad, nil)
	snapIndex := n.Status().SnapshotIndex
	if snapIndex == 0 {
		t.Fatal("the node loaded no snapshot")
	}
	var found []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(logs.bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if rec["msg"] == "snapshot loaded" {
			found = append(found, rec)
		}
	}
	if len(found) == 0 {
		t.Fatalf("no \"snapshot loaded\" line in the log:\n%s", logs.bytes())
	}
	rec := found[len(found)-1]
	num := func(k string) float64 {
		v, ok := rec[k].(float64)
		if !ok {
			t.Fatalf("%q is %v in %v", k, rec[k], rec)
		}
		return v
	}
	if end := num("end"); uint64(end) != snapIndex {
		t.Fatalf("logged end %v, the node's snapshot index %d", end, snapIndex)
	}
	if num("base_bytes") < pad || num("segment_bytes") <= 0 || num("took") <= 0 {
		t.Fatalf("logged %v; want a base of at least %d bytes, some segment bytes and a duration", rec, pad)
	}
}

// startLoggedLeader starts node "b" of group g1 on mem, a padded counter
// of pad bytes, its Info log recorded (and its metrics on reg, if not
// nil), and waits for it to lead.
func startLoggedLeader(t *testing.T, mem *memstore.Store, opts rsm.Options, pad int, reg prometheus.Registerer) (*rsm.Node, *logRecorder) {
	t.Helper()
	logs := &logRecorder{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), store.New(mem), rsm.HostConfig{ID: "b", Addr: lis.Addr().String(), Listener: lis, Registerer: reg,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &paddedCounter{pad: pad}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	return n, logs
}

// TestSnapshotSizesReported: a node's Status and its gauges size the
// snapshot it last loaded or wrote, its base and its segments, which
// is what a cold start reads: after a cold start, as the load logged
// them; as the leader adds segments; and after it writes a new base (the
// segments then none).
func TestSnapshotSizesReported(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	const pad = 4 << 10 // a base small enough that the leader soon writes another
	writeGroupOf(t, mem, opts, &paddedCounter{pad: pad})

	reg := prometheus.NewRegistry()
	n, logs := startLoggedLeader(t, mem, opts, pad, reg)
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no gauge %s of one group", name)
		return 0
	}
	// check compares s with the gauges, read while the node's snapshot
	// stays the one s names (the leader may write the next meanwhile).
	check := func(s rsm.Status) {
		t.Helper()
		for try := 0; ; try++ {
			b, sg := gauge("tenure_rsm_snapshot_base_bytes"), gauge("tenure_rsm_snapshot_segment_bytes")
			if now := n.Status(); now.SnapshotIndex != s.SnapshotIndex && try < 100 {
				s = now
				continue
			}
			if uint64(b) != s.SnapshotBaseBytes || uint64(sg) != s.SnapshotSegmentBytes {
				t.Fatalf("gauges: base %v, segments %v bytes; status: %+v", b, sg, s)
			}
			break
		}
		if s.SnapshotBaseBytes < pad || (s.SnapshotSegments == 0) != (s.SnapshotSegmentBytes == 0) {
			t.Fatalf("status %+v: want a base of at least %d bytes, and segment bytes if and only if segments", s, pad)
		}
	}

	loaded := n.Status()
	check(loaded)
	var rec map[string]any
	sc := bufio.NewScanner(bytes.NewReader(logs.bytes()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil && r["msg"] == "snapshot loaded" {
			rec = r
		}
	}
	if rec == nil || rec["base_bytes"] != float64(loaded.SnapshotBaseBytes) || rec["segment_bytes"] != float64(loaded.SnapshotSegmentBytes) || loaded.SnapshotSegments == 0 {
		t.Fatalf("status %+v after a cold start that logged %v", loaded, rec)
	}

	// Commands until the leader has written a segment, then a new base.
	grew, rebased := false, false
	for i := 0; i < 5000 && !rebased; i++ {
		if _, err := n.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
		s := n.Status()
		if s.SnapshotIndex == loaded.SnapshotIndex {
			continue
		}
		check(s)
		switch {
		case s.SnapshotSegments == 0:
			rebased = true
		case s.SnapshotBaseBytes == loaded.SnapshotBaseBytes && s.SnapshotSegmentBytes > loaded.SnapshotSegmentBytes && s.SnapshotSegments > loaded.SnapshotSegments:
			grew = true
		}
	}
	if !grew || !rebased {
		t.Fatalf("segments grew: %v; a new base: %v; status %+v", grew, rebased, n.Status())
	}
}

// TestQuietBase: a leader whose group goes quiet (no command for an idle
// period) writes a new base once the segments reach 1.5 times the base,
// below the three times that call for one under writes, so that a
// restart after a busy period reads the base alone; a node started
// then loads no segment.
func TestQuietBase(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	const pad = 16 << 10 // a base many segments large
	writeGroupOf(t, mem, opts, &paddedCounter{pad: pad})
	h := startHost(t, store.New(mem), "b")
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &paddedCounter{pad: pad}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	command := func() {
		t.Helper()
		if _, err := n.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	// Segments of at least 1.5 times the base, below three times (past
	// them, as a segment written late may take them, the next due
	// snapshot is a base: go on to the next).
	st := n.Status()
	for i := 0; st.SnapshotBaseBytes == 0 || 2*st.SnapshotSegmentBytes < 3*st.SnapshotBaseBytes ||
		st.SnapshotSegmentBytes >= 3*st.SnapshotBaseBytes; i++ {
		if i == 20000 {
			t.Fatalf("segments did not come to between 1.5 and 3 times the base: %+v", st)
		}
		command()
		st = n.Status()
	}
	// Quiet from here: a new base, with no segments, within a few idle
	// periods (4 × 50 ms here). A snapshot that took every entry leaves
	// none for a base to add: one command more then.
	rebased := func() bool {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s := n.Status(); s.SnapshotSegments == 0 && s.SnapshotIndex > st.SnapshotIndex {
				return true
			}
		}
		return false
	}
	if !rebased() {
		if s := n.Status(); s.ApplyIndex != s.SnapshotIndex {
			t.Fatalf("no base written in a quiet group: %+v, segments at 1.5 times the base then: %+v", s, st)
		}
		command()
		if !rebased() {
			t.Fatalf("no base written in a quiet group: %+v", n.Status())
		}
	}
	base := n.Status()

	// A node started now loads the base alone.
	h2 := startHost(t, store.New(mem), "c")
	n2, err := h2.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &paddedCounter{pad: pad}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n2.Status().SnapshotIndex < base.SnapshotIndex {
		if time.Now().After(deadline) {
			t.Fatalf("the second node did not load the new base: %+v", n2.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := n2.Status(); s.SnapshotSegments != 0 || s.SnapshotBaseBytes != base.SnapshotBaseBytes {
		t.Fatalf("the second node loaded %+v; the leader's snapshot: %+v", s, base)
	}
}
