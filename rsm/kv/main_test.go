package kv_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// TestMain fails the run if a test leaves goroutines behind, such as an
// HTTP server or connection that was not closed.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m, "net/http") }

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
