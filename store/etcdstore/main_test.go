package etcdstore_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
)

// TestMain shares one etcd server among the tests, then fails the run if
// a test left goroutines behind: a watch, a client or a call not ended.
func TestMain(m *testing.M) {
	testutil.Main(m)
	if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
		fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
		os.Exit(1)
	}
}

// leakedGoroutines waits up to d for goroutines that run tenure, etcd
// client or gRPC code, or a test, to finish, and returns the stacks of
// those that do not.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// The first stack is this goroutine's own.
		stacks := strings.Split(string(buf), "\n\n")[1:]
		var leaked []string
		for _, g := range stacks {
			if strings.Contains(g, "tenure-io/tenure") || strings.Contains(g, "go.etcd.io/") ||
				strings.Contains(g, "google.golang.org/grpc.") || strings.Contains(g, "testing.tRunner") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var prefixSeq atomic.Int64

// newPrefix returns a prefix no other test in this binary uses.
func newPrefix() string { return fmt.Sprintf("/tenure-test/%06d/", prefixSeq.Add(1)) }

// openOn opens a fresh, empty store on srv through store.Open, closed when
// t ends.
func openOn(t testing.TB, srv testutil.EtcdServer) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), srv.URL(newPrefix()))
	if err != nil {
		t.Fatalf("store.Open(%s): %v", srv.URL("..."), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
