package rsmtest_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// gatedMachine is a counter whose Apply of the command "block" waits until
// the test releases it.
type gatedMachine struct {
	counter
	entered  chan struct{} // closed when Apply of "block" starts
	release  chan struct{} // closed by the test to let it return
	returned atomic.Bool   // Apply of "block" returned
	once     sync.Once
}

func (m *gatedMachine) Apply(cmd []byte) []byte {
	if string(cmd) == "block" {
		m.once.Do(func() { close(m.entered) })
		<-m.release
		defer m.returned.Store(true)
	}
	return m.counter.Apply(nil)
}

func (m *gatedMachine) Snapshot(w io.Writer) error { return m.counter.Snapshot(w) }

// TestHostCloseWaitsAfterTimedOutLeave: a Leave whose ctx ends while the
// node is still inside Apply returns, but the node's goroutines run on;
// Host.Close must still wait for them, however the Leave before it ended.
// In virtual time: once every goroutine is blocked, Close must not have
// returned while Apply has not.
func TestHostCloseWaitsAfterTimedOutLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pn := newPipeNet()
		st := store.New(memstore.New())
		h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: "n0", Addr: "n0:1", Listener: pn.listen("n0:1"),
			Dialer: pn.dialer("n0:1"), SkipProbe: true, Logger: nodeLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		m := &gatedMachine{entered: make(chan struct{}), release: make(chan struct{})}
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { close(m.release) }) }
		defer release() // a failed check must not leave Apply blocked
		n, err := h.Join(t.Context(), "close", map[string]rsm.StateMachine{"m": m}, fastOptions())
		if err != nil {
			t.Fatal(err)
		}
		cmdDone := make(chan error, 1)
		go func() {
			_, err := n.Command(t.Context(), "m", []byte("block"))
			cmdDone <- err
		}()
		<-m.entered

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := n.Leave(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Leave while Apply blocks: %v, want its ctx's deadline", err)
		}
		closed := make(chan struct{})
		go func() {
			_ = h.Close()
			close(closed)
		}()
		synctest.Wait() // every goroutine blocked: Close waits, or it returned
		select {
		case <-closed:
			t.Fatal("Host.Close returned while the node was still inside Apply")
		default:
		}
		release()
		<-closed
		if !m.returned.Load() {
			t.Fatal("Host.Close returned before Apply did")
		}
		<-cmdDone
		if err := n.Leave(t.Context()); err != nil {
			t.Fatalf("Leave after Close: %v", err)
		}
	})
}
