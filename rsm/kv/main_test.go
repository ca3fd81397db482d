package kv_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// TestMain fails the run if a test leaves goroutines behind, such as an
// HTTP server or connection that was not closed.
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

func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		stacks := strings.Split(string(buf), "\n\n")[1:] // the first is this goroutine
		var leaked []string
		for _, g := range stacks {
			if strings.Contains(g, "tenure-io/tenure") || strings.Contains(g, "net/http") || strings.Contains(g, "testing.tRunner") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// *rsm.Node is the Submitter tenure uses.
var _ kv.Submitter = (*rsm.Node)(nil)

// direct applies commands and queries to a machine in the calling
// goroutine, one at a time, as a node's leader would; err, if set, is
// returned instead. It is enough to test the client and the HTTP layer.
type direct struct {
	mu  sync.Mutex
	m   *kv.Machine
	err error
}

func newDirect() *direct { return &direct{m: kv.New()} }

func (d *direct) Command(ctx context.Context, machine string, cmd []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	if machine != kv.MachineName {
		return nil, fmt.Errorf("%w: %q", rsm.ErrUnknownMachine, machine)
	}
	return d.m.Apply(cmd), nil
}

func (d *direct) Read(ctx context.Context, machine string, q []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	if machine != kv.MachineName {
		return nil, fmt.Errorf("%w: %q", rsm.ErrUnknownMachine, machine)
	}
	return d.m.Query(q)
}

func (d *direct) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}
