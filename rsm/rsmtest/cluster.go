package rsmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// Config describes a cluster. Zero values mean the defaults.
type Config struct {
	// Nodes is the number of hosts. Default 3.
	Nodes int
	// Group is the group every node joins. Default "rsmtest".
	Group string
	// Options are every node's group options.
	Options rsm.Options
	// NodeOptions, if set, gives node i's options instead of Options, for
	// members on different settings (a rolling change of one).
	NodeOptions func(i int) rsm.Options
	// Machines returns a fresh set of state machines for node i. It is
	// called at every start and restart of the node. Required.
	Machines func(i int) map[string]rsm.StateMachine
	// Seed seeds the fault draws of every faultstore and pause gate, so a
	// sequence of calls meets the same faults on every run (concurrent
	// calls still draw in the order they arrive). 0 picks a random seed.
	Seed uint64
	// Logger receives the nodes' logs, each with its node's ID. Default:
	// discarded.
	Logger *slog.Logger
	// ConnectTimeout and HandshakeTimeout are the hosts'. Default 1 s each,
	// so that a node notices a partition quickly.
	ConnectTimeout   time.Duration
	HandshakeTimeout time.Duration
	// Registerer receives every node's metrics (each series labelled
	// with its node's ID). Default: none are registered.
	Registerer prometheus.Registerer
}

// Cluster is a group of rsm nodes in one process: one host per node, each
// with its own loopback listener and a Dialer that honours the cluster's
// partition table, over one shared in-memory store. Faults can be injected
// into the store as every node sees it (Faults), into one node's path to
// the store (NodeFaults), and into the network between nodes (Partition,
// Isolate). Nodes can be crashed, restarted, paused and resumed.
//
// The store is layered, from the memstore outwards: Faults (shared), then
// per node NodeFaults and a pause gate, then the node's *store.Store.
//
// Cluster is safe for concurrent use: a nemesis goroutine may break the
// cluster while clients use its nodes.
type Cluster struct {
	cfg    Config
	mem    *memstore.Store
	faults *faultstore.Store
	net    *network

	mu     sync.Mutex
	slots  []*slot
	closed bool
}

// slot is one node's place in the cluster, kept across restarts.
type slot struct {
	id     string
	faults *faultstore.Store
	gate   *gate
	st     *store.Store

	host     *rsm.Host
	node     *rsm.Node
	machines map[string]rsm.StateMachine
	starts   int
	// pauseCut are the links Pause cut, which Resume restores.
	pauseCut []int
}

// Start starts cfg.Nodes hosts, each joined to cfg.Group, and registers
// Close with t.Cleanup. It does not wait for a leader: see WaitLeader.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// New is Start without t.Cleanup and t.Fatal: the caller must Close the
// cluster. ctx bounds the start only.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Group == "" {
		cfg.Group = "rsmtest"
	}
	if cfg.Machines == nil {
		return nil, errors.New("rsmtest: Config.Machines is required")
	}
	if cfg.Nodes < 0 {
		return nil, fmt.Errorf("rsmtest: Config.Nodes is %d; it must be positive", cfg.Nodes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = time.Second
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = time.Second
	}
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	opt := func(k uint64) []faultstore.Option {
		if seed == 0 {
			return nil
		}
		return []faultstore.Option{faultstore.WithSeed(seed*1000 + k)}
	}
	mem := memstore.New()
	c := &Cluster{cfg: cfg, mem: mem, faults: faultstore.New(mem, opt(0)...), net: newNetwork()}
	for i := range cfg.Nodes {
		fs := faultstore.New(shared{c.faults}, opt(uint64(i)+1)...)
		g := newGate(fs, seed*1000+uint64(i)+500)
		c.slots = append(c.slots, &slot{id: fmt.Sprintf("n%d", i), faults: fs, gate: g, st: store.New(g)})
	}
	for i := range c.slots {
		if err := c.start(ctx, i, true); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// start starts node i's host and joins the group. The caller must not hold c.mu.
func (c *Cluster) start(ctx context.Context, i int, probe bool) error {
	c.mu.Lock()
	s := c.slots[i]
	if c.closed {
		c.mu.Unlock()
		return rsm.ErrClosed
	}
	if s.host != nil {
		c.mu.Unlock()
		return fmt.Errorf("rsmtest: node %d is running", i)
	}
	c.mu.Unlock()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("rsmtest: listen for node %d: %w", i, err)
	}
	addr := lis.Addr().String()
	c.net.setAddr(i, addr)
	h, err := rsm.NewHost(ctx, s.st, rsm.HostConfig{
		ID: s.id, Addr: addr, Listener: lis,
		Dialer:         c.net.dialer(i),
		ConnectTimeout: c.cfg.ConnectTimeout, HandshakeTimeout: c.cfg.HandshakeTimeout,
		Logger:     c.cfg.Logger.With("id", s.id),
		SkipProbe:  !probe,
		Registerer: c.cfg.Registerer,
	})
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("rsmtest: start node %d: %w", i, err)
	}
	machines := c.cfg.Machines(i)
	opts := c.cfg.Options
	if c.cfg.NodeOptions != nil {
		opts = c.cfg.NodeOptions(i)
	}
	n, err := h.Join(ctx, c.cfg.Group, machines, opts)
	if err != nil {
		_ = h.Close()
		return fmt.Errorf("rsmtest: node %d joins %q: %w", i, c.cfg.Group, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = h.Close()
		return rsm.ErrClosed
	}
	s.host, s.node, s.machines = h, n, machines
	s.starts++
	return nil
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.slots) }

// ID is node i's ID, the same across restarts.
func (c *Cluster) ID(i int) string { return c.slots[i].id }

// Group is the group the nodes joined.
func (c *Cluster) Group() string { return c.cfg.Group }

// Node returns node i, or nil while it is crashed. After a restart it
// returns the new node.
func (c *Cluster) Node(i int) *rsm.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots[i].node
}

// Host returns node i's host, or nil while it is crashed.
func (c *Cluster) Host(i int) *rsm.Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots[i].host
}

// Machines returns the machines node i runs now (nil while crashed).
func (c *Cluster) Machines(i int) map[string]rsm.StateMachine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots[i].machines
}

// Faults is the store every node sees: faults set on it hit every node.
func (c *Cluster) Faults() *faultstore.Store { return c.faults }

// NodeFaults is node i's path to the store: faults set on it hit only
// node i, such as SetPartition(faultstore.Partitioned) to cut it off from
// the store.
func (c *Cluster) NodeFaults(i int) *faultstore.Store { return c.slots[i].faults }

// Store returns node i's view of the store (through every fault layer).
func (c *Cluster) Store(i int) *store.Store { return c.slots[i].st }

// Raw returns the shared store with no fault layer, for checks that must
// not be disturbed by injected faults. Closing it does nothing.
func (c *Cluster) Raw() *store.Store { return store.New(shared{c.mem}) }

// Partition cuts the network link between nodes a and b, both ways: dials
// fail and the connections across the link are closed.
func (c *Cluster) Partition(a, b int) { c.net.setCut(a, b, true) }

// Isolate cuts node a from every other node. It can still reach the store.
func (c *Cluster) Isolate(a int) {
	for b := range c.slots {
		c.net.setCut(a, b, true)
	}
}

// Heal restores every network link, including those of paused nodes (whose
// store calls stay held until Resume).
func (c *Cluster) Heal() {
	c.net.healAll()
	c.mu.Lock()
	for _, s := range c.slots {
		s.pauseCut = nil
	}
	c.mu.Unlock()
}

// Partitioned reports whether the link between a and b is cut.
func (c *Cluster) Partitioned(a, b int) bool { return c.net.isCut(a, b) }

// HealAll heals the network, resumes every paused node and clears every
// store fault, shared and per node.
func (c *Cluster) HealAll() {
	c.Heal()
	for i := range c.slots {
		c.Resume(i)
		c.slots[i].faults.ClearFaults()
	}
	c.faults.ClearFaults()
}

// Crash stops node i abruptly: its store calls are held from now on (so
// nothing it does while stopping reaches the store), then its host is
// closed, which waits for its goroutines, and its connections are closed.
// Crashing a crashed node does nothing.
func (c *Cluster) Crash(i int) error {
	c.mu.Lock()
	s := c.slots[i]
	h := s.host
	s.host, s.node, s.machines = nil, nil, nil
	c.mu.Unlock()
	if h == nil {
		return nil
	}
	s.gate.pause(0)
	err := h.Close()
	s.gate.resume()
	c.net.closeNode(i)
	return err
}

// Restart starts a crashed node again: a new host with the same ID, on a
// new port, with fresh machines from Config.Machines. A node paused when
// it crashed runs again.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	s := c.slots[i]
	if s.host != nil {
		c.mu.Unlock()
		return fmt.Errorf("rsmtest: node %d is running; crash it first", i)
	}
	cut := s.pauseCut
	s.pauseCut = nil
	c.mu.Unlock()
	for _, b := range cut {
		c.net.setCut(i, b, false)
	}
	s.gate.resume()
	return c.start(ctx, i, false)
}

// Pause simulates a stopped process (SIGSTOP, a long GC pause, a VM
// migration): node i is cut from every other node, and its store calls
// are held until Resume; a write it makes while paused lands at once with
// chance land and only its response is held, as a request already sent
// would. Its timers still run: rsmtest cannot stop a goroutine.
func (c *Cluster) Pause(i int, land float64) {
	c.mu.Lock()
	s := c.slots[i]
	var cut []int
	for b := range c.slots {
		if b != i && !c.net.isCut(i, b) {
			cut = append(cut, b)
		}
	}
	s.pauseCut = append(s.pauseCut, cut...)
	c.mu.Unlock()
	s.gate.pause(land)
	for _, b := range cut {
		c.net.setCut(i, b, true)
	}
}

// Stall simulates a stopped process (SIGSTOP) more closely than Pause: node
// i's connections stay open but carry nothing either way, and new ones are
// accepted but never answered, so its peers see no error, only silence;
// its store calls are held as by Pause (a write lands with chance land).
// Resume undoes it.
func (c *Cluster) Stall(i int, land float64) {
	c.mu.Lock()
	s := c.slots[i]
	c.mu.Unlock()
	s.gate.pause(land)
	c.net.setStalled(i, true)
}

// Settled waits until none of node i's store calls is between the gate
// Pause holds calls at and the store: after Pause, until the calls it made
// before have returned; or until ctx ends.
func (c *Cluster) Settled(ctx context.Context, i int) error {
	c.mu.Lock()
	s := c.slots[i]
	c.mu.Unlock()
	return s.gate.settle(ctx)
}

// Resume undoes Pause and Stall: the links Pause cut are restored and the
// held store calls go on.
func (c *Cluster) Resume(i int) {
	c.net.setStalled(i, false)
	c.mu.Lock()
	s := c.slots[i]
	cut := s.pauseCut
	s.pauseCut = nil
	c.mu.Unlock()
	for _, b := range cut {
		c.net.setCut(i, b, false)
	}
	s.gate.resume()
}

// Leader returns the index of the running node that reports itself the
// joined leader with the highest term, or -1.
func (c *Cluster) Leader() int {
	best, term := -1, uint64(0)
	for i := range c.slots {
		n := c.Node(i)
		if n == nil {
			continue
		}
		st := n.Status()
		if st.Role == rsm.Leader.String() && st.State == rsm.Joined.String() && (best < 0 || st.Term > term) {
			best, term = i, st.Term
		}
	}
	return best
}

// WaitLeader waits until some running node leads and every other running
// node follows it, and returns the leader's index.
func (c *Cluster) WaitLeader(ctx context.Context) (int, error) {
	for {
		if l := c.Leader(); l >= 0 && c.settled(l) {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("rsmtest: no settled leader: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *Cluster) settled(l int) bool {
	lead := c.Node(l)
	if lead == nil {
		return false
	}
	ls := lead.Status()
	for i := range c.slots {
		n := c.Node(i)
		if i == l || n == nil {
			continue
		}
		st := n.Status()
		if st.State != rsm.Joined.String() || st.Role != rsm.Follower.String() || st.LeaderID != ls.ID || st.Term != ls.Term {
			return false
		}
	}
	return true
}

// Statuses returns the status of every running node, for logs.
func (c *Cluster) Statuses() []rsm.Status {
	var out []rsm.Status
	for i := range c.slots {
		if n := c.Node(i); n != nil {
			out = append(out, n.Status())
		}
	}
	return out
}

// Close crashes every node and closes the stores. It is idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.HealAll()
	var wg sync.WaitGroup
	for i := range c.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Crash(i)
		}()
	}
	wg.Wait()
	for _, s := range c.slots {
		_ = s.st.Close()
	}
	_ = c.faults.Close()
}
