package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// ExitLeakChecked runs the tests and exits, failing the run if they pass
// but leave goroutines behind (a node, client, server, connection or call
// that was not stopped): a goroutine leaks if its stack mentions tenure, a
// test, or one of markers (e.g. "net/http"), and it is still there 5 s
// after the tests end.
func ExitLeakChecked(m *testing.M, markers ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := LeakedGoroutines(5*time.Second, markers...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakedGoroutines waits up to d for the goroutines ExitLeakChecked looks
// for to end, and returns the stacks of those that do not.
func LeakedGoroutines(d time.Duration, markers ...string) string {
	markers = append([]string{"tenure-io/tenure", "testing.tRunner"}, markers...)
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// The first stack is this goroutine's own.
		stacks := strings.Split(string(buf), "\n\n")[1:]
		var leaked []string
		for _, g := range stacks {
			for _, mk := range markers {
				if strings.Contains(g, mk) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
