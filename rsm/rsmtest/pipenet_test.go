package rsmtest_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// pipeNet is an in-memory network of net.Pipe connections, so that a
// group of hosts runs inside a synctest bubble, in virtual time. Links
// are cut by address pair: dials across a cut link fail and connections
// across it are closed.
type pipeNet struct {
	mu    sync.Mutex
	lis   map[string]*pipeListener
	cut   map[[2]string]bool
	conns map[net.Conn][2]string
}

func newPipeNet() *pipeNet {
	return &pipeNet{lis: map[string]*pipeListener{}, cut: map[[2]string]bool{}, conns: map[net.Conn][2]string{}}
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (pn *pipeNet) listen(addr string) *pipeListener {
	l := &pipeListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
	pn.mu.Lock()
	pn.lis[addr] = l
	pn.mu.Unlock()
	return l
}

// dialer returns the Dialer of the host at from.
func (pn *pipeNet) dialer(from string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		pn.mu.Lock()
		l, p := pn.lis[addr], pairOf(from, addr)
		if l == nil || pn.cut[p] {
			pn.mu.Unlock()
			return nil, fmt.Errorf("pipenet: %s cannot reach %s", from, addr)
		}
		c, s := net.Pipe()
		pn.conns[c], pn.conns[s] = p, p
		pn.mu.Unlock()
		select {
		case l.ch <- s:
			return c, nil
		case <-l.done:
		case <-ctx.Done():
		}
		c.Close()
		s.Close()
		return nil, fmt.Errorf("pipenet: %s does not accept", addr)
	}
}

// setCut cuts or restores the link between a and b.
func (pn *pipeNet) setCut(a, b string, cut bool) {
	pn.mu.Lock()
	p := pairOf(a, b)
	pn.cut[p] = cut
	var doomed []net.Conn
	if cut {
		for c, q := range pn.conns {
			if q == p {
				doomed = append(doomed, c)
				delete(pn.conns, c)
			}
		}
	}
	pn.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

type pipeListener struct {
	addr string
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// pipeGroup is three hosts on a pipeNet and one memstore, joined to one
// group with opts.
type pipeGroup struct {
	net   *pipeNet
	addrs []string
	hosts []*rsm.Host
	nodes []*rsm.Node
}

func startPipeGroup(t *testing.T, opts rsm.Options) *pipeGroup {
	t.Helper()
	g := &pipeGroup{net: newPipeNet()}
	st := store.New(memstore.New())
	logger := nodeLogger(t)
	for i := range 3 {
		addr := fmt.Sprintf("n%d:1", i)
		h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: fmt.Sprintf("n%d", i), Addr: addr, Listener: g.net.listen(addr),
			Dialer: g.net.dialer(addr), ConnectTimeout: time.Second, HandshakeTimeout: time.Second, SkipProbe: true, Logger: logger.With("id", fmt.Sprintf("n%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		n, err := h.Join(t.Context(), "rejoin", counterMachines(i), opts)
		if err != nil {
			t.Fatal(err)
		}
		g.addrs, g.hosts, g.nodes = append(g.addrs, addr), append(g.hosts, h), append(g.nodes, n)
	}
	return g
}

func (g *pipeGroup) isolate(i int, cut bool) {
	for j := range g.addrs {
		if j != i {
			g.net.setCut(g.addrs[i], g.addrs[j], cut)
		}
	}
}

// leader waits for a node to lead, with every other following it.
func (g *pipeGroup) leader(t *testing.T) int {
	t.Helper()
	for range 1000 {
		for i, n := range g.nodes {
			st := n.Status()
			if st.Role != rsm.Leader.String() || len(st.Followers) != len(g.nodes)-1 {
				continue
			}
			return i
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader followed by every node")
	return -1
}

func (g *pipeGroup) statuses() []rsm.Status {
	var sts []rsm.Status
	for _, n := range g.nodes {
		sts = append(sts, n.Status())
	}
	return sts
}
