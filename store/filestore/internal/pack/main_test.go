package pack

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if a test leaves goroutines of tenure's code
// behind (a Log closes dropped segments on goroutines of its own).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var leaked []string
		// Goroutines that have been told to stop may take a moment to end.
		for range 100 {
			if leaked = leakedGoroutines(); len(leaked) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutines leaked:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	var leaked []string
	for _, g := range stacks[1:] { // the first is this goroutine
		if strings.Contains(g, "github.com/tenure-io/tenure/") {
			leaked = append(leaked, g)
		}
	}
	return leaked
}
