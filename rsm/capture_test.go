package rsm_test

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// slowCounter is a counter whose snapshots block until release is closed,
// as a huge state's serialization would take long.
type slowCounter struct {
	counter
	armed   atomic.Bool // only snapshots after the start block
	once    sync.Once
	writing chan struct{} // closed when the first snapshot starts writing
	release chan struct{}
}

type slowView struct {
	c *slowCounter
	n uint64
}

func (c *slowCounter) Capture() rsm.StateView {
	b, _ := c.Query(nil)
	return &slowView{c: c, n: binary.BigEndian.Uint64(b)}
}

func (v *slowView) WriteTo(w io.Writer) (int64, error) {
	if v.c.armed.Load() {
		v.c.once.Do(func() { close(v.c.writing) })
		<-v.c.release
	}
	k, err := w.Write(binary.BigEndian.AppendUint64(nil, v.n))
	return int64(k), err
}

// Snapshot is what a snapshotter without Capturer calls, under the apply
// lock: it blocks the same way.
func (c *slowCounter) Snapshot(w io.Writer) error {
	_, err := c.Capture().WriteTo(w)
	return err
}

// TestSnapshotSerializationDoesNotHoldCommands: while a snapshot of a
// Capturer machine is being serialized, commands keep committing.
func TestSnapshotSerializationDoesNotHoldCommands(t *testing.T) {
	st := store.New(memstore.New())
	h := startHost(t, st, "a")
	c := &slowCounter{writing: make(chan struct{}), release: make(chan struct{})}
	opts := fastOptions()
	opts.SnapshotThreshold = 5
	released := false
	release := func() {
		if !released {
			released = true
			close(c.release)
		}
	}
	t.Cleanup(release)
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": c}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	c.armed.Store(true)
	for i := 0; i < 10; i++ {
		if _, err := n.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.writing:
			i = 10
		default:
		}
	}
	select {
	case <-c.writing:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot started within 10 s")
	}
	// The snapshot is blocked in its serialization: commands still commit.
	for i := 0; i < 20; i++ {
		if _, err := n.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatalf("command %d while a snapshot is being written: %v", i, err)
		}
	}
	release()
}

// TestCommandTooLargeForAnEntry: a command whose log entry could not be
// sent to a follower is refused at submit, before it reaches the log.
func TestCommandTooLargeForAnEntry(t *testing.T) {
	st := store.New(memstore.New())
	h := startHost(t, st, "a")
	opts := fastOptions()
	opts.MaxMessageSize = 64 << 10
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	_, err = n.Command(ctxT(t, 10*time.Second), "counter", make([]byte, opts.MaxMessageSize-2048))
	if !errors.Is(err, rsm.ErrTooLarge) {
		t.Fatalf("a command of MaxMessageSize-2048 bytes: %v, want ErrTooLarge", err)
	}
	if _, err := n.Command(ctxT(t, 10*time.Second), "counter", make([]byte, opts.MaxMessageSize/2)); err != nil {
		t.Fatalf("a command of half MaxMessageSize: %v", err)
	}
}
