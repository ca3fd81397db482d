package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBenchEtcd runs tenure bench etcd briefly on one node and on three,
// on file:// with a little latency, and checks that its counts agree:
// every committed write was seen by the watcher of its resource exactly
// once and in revision order, the lists were whole, and each kind of
// request was timed.
func TestBenchEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd serve node processes and drives them for several seconds")
	}
	var stderr strings.Builder
	profiles := t.TempDir()
	res, err := Etcd(t.Context(), EtcdConfig{Store: "file://" + t.TempDir(), Latency: 2 * time.Millisecond, Nodes: []int{1, 3},
		Writers: 8, Listers: 2, Watchers: 3, Objects: 60, Duration: 2 * time.Second, RefDuration: 100 * time.Millisecond,
		ListInterval: 100 * time.Millisecond, Exe: buildTenure(t), Profile: profiles, Stderr: &stderr})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if len(res.Runs) != 2 || res.Ref.Ops < 20 || res.Ref.P50 < 2*time.Millisecond {
		t.Fatalf("runs %d, reference %+v", len(res.Runs), res.Ref)
	}
	for _, r := range res.Runs {
		if r.Errors != 0 {
			t.Errorf("%d nodes: %d errors, the first: %s", r.Nodes, r.Errors, r.FirstError)
		}
		if r.Writes <= 0 || r.WritesPerSec <= 0 || r.Creates+r.Updates+r.Deletes != r.Writes {
			t.Errorf("%d nodes: %d writes (%d creates, %d updates, %d deletes), %.1f/s", r.Nodes, r.Writes, r.Creates, r.Updates, r.Deletes, r.WritesPerSec)
		}
		if c := r.Ops["update"].Count; c != r.Updates || c == 0 {
			t.Errorf("%d nodes: %d update latencies for %d updates", r.Nodes, c, r.Updates)
		}
		if r.Ops["conflict"].Count != r.Conflicts {
			t.Errorf("%d nodes: %d conflict latencies for %d conflicts", r.Nodes, r.Ops["conflict"].Count, r.Conflicts)
		}
		if r.Ops["list"].Count == 0 || r.Ops["page"].Count < r.Ops["list"].Count || r.Ops["count"].Count != r.Ops["list"].Count || r.ListsShort != 0 {
			t.Errorf("%d nodes: lists %+v, pages %+v, counts %+v, %d short", r.Nodes, r.Ops["list"], r.Ops["page"], r.Ops["count"], r.ListsShort)
		}
		// The three watchers cover the three resources: together they
		// saw every write once.
		var expected int64
		for _, w := range r.Watches {
			expected += w.Expected
			if w.Seen != w.Expected || w.Missing != 0 || w.Duplicates != 0 || w.OutOfOrder != 0 || w.Unexpected != 0 || w.ProgressBehind != 0 {
				t.Errorf("%d nodes: watch %+v", r.Nodes, w)
			}
			if w.Progress == 0 {
				t.Errorf("%d nodes: watch of %s got no progress notification in %v of requests every %v", r.Nodes, w.Prefix, r.Elapsed, etcdProgressEvery)
			}
		}
		if len(r.Watches) != 3 || expected != r.Writes {
			t.Errorf("%d nodes: %d watches expected %d writes in all, want %d", r.Nodes, len(r.Watches), expected, r.Writes)
		}
		// A write is one command in a log entry: at least one write per
		// entry, and the entries were written to the store.
		if r.LogEntries <= 0 || r.StoreRequests["put-create"] < r.LogEntries || r.WritesPerEntry < 1 {
			t.Errorf("%d nodes: %d log entries, %d create-if-absent puts, %.2f writes per entry", r.Nodes, r.LogEntries, r.StoreRequests["put-create"], r.WritesPerEntry)
		}
		if len(r.RSS) != r.Nodes || (runtime.GOOS == "linux" && r.RSS[0] <= 0) {
			t.Errorf("%d nodes: RSS %v", r.Nodes, r.RSS)
		}
	}
	// Each node's CPU profile is a gzipped protobuf (pprof's format).
	for _, name := range []string{"etcd-n1-node-0.cpu.pprof", "etcd-n3-node-0.cpu.pprof", "etcd-n3-node-2.cpu.pprof"} {
		b, err := os.ReadFile(filepath.Join(profiles, name))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("profile %s: %d bytes, %v", name, len(b), err)
		}
	}
	var out strings.Builder
	if err := res.Print(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"writes/s", "watch /registry/pods/ on node", "store requests per write"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed result lacks %q:\n%s", want, out.String())
		}
	}
}
