package rsm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"testing"

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

	var logs logRecorder
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), store.New(mem), rsm.HostConfig{ID: "b", Addr: lis.Addr().String(), Listener: lis,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &paddedCounter{pad: pad}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
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
