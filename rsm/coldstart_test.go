package rsm_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// countingDriver counts the bytes and reads of each key read through it.
type countingDriver struct {
	driver.Store
	mu    sync.Mutex
	bytes map[string]int
	reads map[string]int
}

func newCountingDriver(inner driver.Store) *countingDriver {
	return &countingDriver{Store: inner, bytes: map[string]int{}, reads: map[string]int{}}
}

func (c *countingDriver) count(key string, data []byte) {
	c.mu.Lock()
	c.bytes[key] += len(data)
	c.reads[key]++
	c.mu.Unlock()
}

func (c *countingDriver) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := c.Store.Get(ctx, key)
	c.count(key, data)
	return data, v, err
}

func (c *countingDriver) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	data, v, err := c.Store.GetLimited(ctx, key, max)
	c.count(key, data)
	return data, v, err
}

func (c *countingDriver) Close() error { return nil } // the shared store outlives each node

// writeGroup leaves group g1 in mem with a snapshot and log entries after
// it, written by node "a", and returns the snapshot's size.
func writeGroup(t *testing.T, mem *memstore.Store, opts rsm.Options) int {
	return writeGroupOf(t, mem, opts, &counter{})
}

// writeGroupOf is writeGroup with the machine m as "counter".
func writeGroupOf(t *testing.T, mem *memstore.Store, opts rsm.Options, m rsm.StateMachine) int {
	t.Helper()
	st := store.New(newCountingDriver(mem))
	h := startHost(t, st, "a")
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": m}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	for i := 0; i < 3*opts.SnapshotThreshold+opts.SnapshotThreshold/2; i++ {
		if _, err := n.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.Status().SnapshotIndex < uint64(2*opts.SnapshotThreshold) {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.Leave(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	snap, _, err := mem.Get(t.Context(), "g1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	return len(snap)
}

// checkReadOnce fails if a node read the snapshot, an object it
// references (a base part, a segment) or a log entry more than once.
func checkReadOnce(t *testing.T, who string, c *countingDriver, snapSize int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	logs, objs := 0, 0
	for key, n := range c.reads {
		switch {
		case key == "g1/snapshot":
			if c.bytes[key] > snapSize {
				t.Errorf("%s read %d snapshot bytes in %d reads; the snapshot is %d bytes", who, c.bytes[key], n, snapSize)
			}
		case strings.HasPrefix(key, "g1/log/"):
			logs++
			if n > 1 {
				t.Errorf("%s read %s %d times", who, key, n)
			}
		case strings.HasPrefix(key, "g1/snap/"):
			objs++
			if n > 1 {
				t.Errorf("%s read %s %d times", who, key, n)
			}
		}
	}
	if objs == 0 {
		t.Errorf("%s read no object of the snapshot (base part or segment)", who)
	}
	if c.bytes["g1/snapshot"] == 0 {
		t.Errorf("%s never read the snapshot", who)
	}
	if logs == 0 {
		t.Errorf("%s read no log entry", who)
	}
}

// TestColdStartReadsEachObjectOnce: a node starting on a group's objects
// reads the snapshot once and each log entry once before it serves.
func TestColdStartReadsEachObjectOnce(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	size := writeGroup(t, mem, opts)
	cd := newCountingDriver(mem)
	h := startHost(t, store.New(cd), "a")
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	if _, err := n.Read(ctxT(t, 10*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	checkReadOnce(t, "the restarted node", cd, size)
}

// TestThreeColdNodesReadEachObjectOnce: three nodes starting together on
// a group's objects each read the snapshot and each log entry at most
// once to reach the group's state.
func TestThreeColdNodesReadEachObjectOnce(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	size := writeGroup(t, mem, opts)
	// Slow heartbeats: no node gives up on the leader while the others
	// catch up, so every read counted is a start's.
	opts.HeartbeatInterval, opts.MaxMissedHeartbeats = 500*time.Millisecond, 20
	var nodes []*rsm.Node
	var counts []*countingDriver
	for _, id := range []string{"a", "b", "c"} {
		cd := newCountingDriver(mem)
		h := startHost(t, store.New(cd), id)
		n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes, counts = append(nodes, n), append(counts, cd)
	}
	leader := waitLeader(t, nodes...)
	if _, err := leader.Command(ctxT(t, 10*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	want := leader.Status().ApplyIndex
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for n.Status().ApplyIndex < want || n.Status().State != "JOINED" {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not reach index %d: %+v", n.Status().ID, want, n.Status())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, n := range nodes {
		checkReadOnce(t, n.Status().ID, counts[i], size)
	}
}

// paddedCounter is a counter whose snapshot is its count then pad bytes:
// a base large enough that the snapshots after it add log segments.
type paddedCounter struct {
	counter
	pad int
}

func (p *paddedCounter) Snapshot(w io.Writer) error {
	if err := p.counter.Snapshot(w); err != nil {
		return err
	}
	_, err := w.Write(make([]byte, p.pad))
	return err
}

func (p *paddedCounter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return p.counter.Restore(bytes.NewReader(make([]byte, 8)))
	}
	if len(b) != 8+p.pad {
		return fmt.Errorf("padded counter: a snapshot of %d bytes, want %d", len(b), 8+p.pad)
	}
	return p.counter.Restore(bytes.NewReader(b[:8]))
}

// gatedCounter is a padded counter whose first restore of a count above 0
// (from a snapshot, not a reset to the empty state) waits for a signal.
type gatedCounter struct {
	paddedCounter
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedCounter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) >= 8 && !bytes.Equal(b[:8], make([]byte, 8)) {
		g.once.Do(func() {
			close(g.entered)
			<-g.release
		})
	}
	return g.paddedCounter.Restore(bytes.NewReader(b))
}

// TestRestoringReportsTheLoad: while a node loads a snapshot, Restoring
// gives the stored sizes of its base and segments without waiting for the
// load (Status would), and nothing once the state is loaded.
func TestRestoringReportsTheLoad(t *testing.T) {
	mem := memstore.New()
	opts := fastOptions()
	// A base of 64 KiB: 3.5 snapshot thresholds of counter commands are
	// far less than baseFactor times it, so the later snapshots add
	// segments.
	const pad = 64 << 10
	writeGroupOf(t, mem, opts, &paddedCounter{pad: pad})
	var bases, segs uint64 // the bytes under g1/snap/ of each kind
	items, err := mem.List(t.Context(), "g1/snap/", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		switch {
		case strings.HasPrefix(it.Key, "g1/snap/b"):
			bases += uint64(it.Size)
		case strings.HasPrefix(it.Key, "g1/snap/s"):
			segs += uint64(it.Size)
		}
	}
	if bases == 0 || segs == 0 {
		t.Fatalf("the group stored %d bytes of bases and %d of segments; want both", bases, segs)
	}
	h := startHost(t, store.New(newCountingDriver(mem)), "a")
	g := &gatedCounter{paddedCounter: paddedCounter{pad: pad}, entered: make(chan struct{}), release: make(chan struct{})}
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": g}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n.Restoring() != (rsm.Restore{}) {
		// Join returned before the load began: nothing to compare yet.
		t.Log("the load began before Join returned")
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("the snapshot was not restored")
	}
	got := n.Restoring()
	close(g.release)
	if got.Base == 0 || got.Base > bases || got.Segments == 0 || got.Segments > segs || got.Size() != got.Base+got.Segments {
		t.Fatalf("Restoring during the load = %+v (size %d); want the base's and the segments' sizes, within the %d and %d bytes stored of each", got, got.Size(), bases, segs)
	}
	waitLeader(t, n)
	if _, err := n.Read(ctxT(t, 10*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	if r := n.Restoring(); r != (rsm.Restore{}) {
		t.Fatalf("Restoring after the load = %+v, want none", r)
	}
}

// preparingCounter is a paddedCounter that prepares its commands.
type preparingCounter struct {
	paddedCounter
	prepares, applied atomic.Int64
}

func (*preparingCounter) BorrowsCommands() {}

func (p *preparingCounter) Prepare(cmd []byte) any {
	p.prepares.Add(1)
	return len(cmd)
}

func (p *preparingCounter) ApplyPrepared(cmd []byte, prepared any) []byte {
	p.applied.Add(1)
	if prepared != len(cmd) {
		panic(fmt.Sprintf("ApplyPrepared given %v for a command of %d bytes", prepared, len(cmd)))
	}
	return p.Apply(cmd)
}

// TestColdStartPrepares: a node that starts cold from a base and segments
// prepares the segments' commands (here whatever their size), applies
// them prepared, and reaches the state the group had.
func TestColdStartPrepares(t *testing.T) {
	t.Cleanup(rsm.SetPrepareFrom(0))
	mem := memstore.New()
	opts := fastOptions()
	const pad = 64 << 10 // a base large enough that later snapshots add segments
	writeGroupOf(t, mem, opts, &paddedCounter{pad: pad})
	h := startHost(t, store.New(mem), "b")
	m := &preparingCounter{paddedCounter: paddedCounter{pad: pad}}
	n, err := h.Join(t.Context(), "g1", map[string]rsm.StateMachine{"counter": m}, opts)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	got, err := n.Read(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(3*opts.SnapshotThreshold + opts.SnapshotThreshold/2); decodeCount(t, got) != want {
		t.Fatalf("the cold node counts %d, want %d", decodeCount(t, got), want)
	}
	if m.applied.Load() == 0 || m.prepares.Load() < m.applied.Load() {
		t.Fatalf("%d commands prepared, %d applied prepared; want some applied, each prepared", m.prepares.Load(), m.applied.Load())
	}
}
