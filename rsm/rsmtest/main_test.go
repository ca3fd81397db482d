package rsmtest_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if a test leaves goroutines behind: a node or a
// client that was not stopped.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to d for goroutines that run tenure code, or a
// test, to finish, and returns the stacks of those that do not.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// The first stack is this goroutine's own.
		stacks := strings.Split(string(buf), "\n\n")[1:]
		var leaked []string
		for _, g := range stacks {
			if strings.Contains(g, "tenure-io/tenure") || strings.Contains(g, "testing.tRunner") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
