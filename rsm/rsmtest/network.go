package rsmtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// network is the simulated network between a cluster's hosts: a table of
// cut links, consulted by every host's Dialer, and the connections each
// Dialer opened, so that cutting a link also breaks the connections that
// cross it. Links are symmetric. It is safe for concurrent use.
type network struct {
	mu    sync.Mutex
	addrs map[string]int // current RPC address -> node index
	cut   map[link]bool  // cut links
	conns map[*conn]bool // open connections made by the Dialers
	// stalled nodes: their connections stay open but carry nothing, as
	// a stopped process's do.
	stalled map[int]bool
}

// link is an unordered pair of node indexes, a < b.
type link struct{ a, b int }

func linkOf(a, b int) link {
	if a > b {
		a, b = b, a
	}
	return link{a, b}
}

func newNetwork() *network {
	return &network{addrs: map[string]int{}, cut: map[link]bool{}, conns: map[*conn]bool{}, stalled: map[int]bool{}}
}

// setAddr records that node i now listens on addr, forgetting its old
// address.
func (nw *network) setAddr(i int, addr string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for a, j := range nw.addrs {
		if j == i {
			delete(nw.addrs, a)
		}
	}
	nw.addrs[addr] = i
}

// setCut cuts (or restores) the link between a and b, closing the
// connections across it when it is cut.
func (nw *network) setCut(a, b int, cut bool) {
	if a == b {
		return
	}
	nw.mu.Lock()
	l := linkOf(a, b)
	var doomed []*conn
	if cut {
		nw.cut[l] = true
		for c := range nw.conns {
			if c.link == l {
				doomed = append(doomed, c)
			}
		}
	} else {
		delete(nw.cut, l)
	}
	nw.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
}

// healAll restores every link.
func (nw *network) healAll() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.cut = map[link]bool{}
}

func (nw *network) isCut(a, b int) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.cut[linkOf(a, b)]
}

// dialer returns the Dialer of node from.
func (nw *network) dialer(from int) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nw.mu.Lock()
		to, known := nw.addrs[addr]
		blocked := known && nw.cut[linkOf(from, to)]
		nw.mu.Unlock()
		if blocked {
			return nil, fmt.Errorf("rsmtest: node %d cannot reach node %d at %s: partitioned", from, to, addr)
		}
		var d net.Dialer
		raw, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		if !known {
			// A crashed node's old address: nothing to track.
			return raw, nil
		}
		c := &conn{Conn: raw, nw: nw, link: linkOf(from, to)}
		nw.mu.Lock()
		if nw.cut[c.link] {
			// Cut while we were dialing.
			nw.mu.Unlock()
			_ = raw.Close()
			return nil, fmt.Errorf("rsmtest: node %d cannot reach node %d at %s: partitioned", from, to, addr)
		}
		nw.conns[c] = true
		nw.mu.Unlock()
		return c, nil
	}
}

// setStalled stalls (or releases) every connection to or from node i.
func (nw *network) setStalled(i int, stalled bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if stalled {
		nw.stalled[i] = true
	} else {
		delete(nw.stalled, i)
	}
}

func (nw *network) isStalled(l link) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.stalled[l.a] || nw.stalled[l.b]
}

// closeNode closes every connection to or from node i, as a crash of its
// process would.
func (nw *network) closeNode(i int) {
	nw.mu.Lock()
	var doomed []*conn
	for c := range nw.conns {
		if c.link.a == i || c.link.b == i {
			doomed = append(doomed, c)
		}
	}
	nw.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
}

// openConns counts the tracked connections across the link a-b.
func (nw *network) openConns(a, b int) int {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	n := 0
	for c := range nw.conns {
		if c.link == linkOf(a, b) {
			n++
		}
	}
	return n
}

// conn is a connection opened by a Dialer, tracked until it is closed.
type conn struct {
	net.Conn
	nw   *network
	link link
	once sync.Once
	done atomic.Bool
}

// hold waits while the link is stalled; it fails once the connection is
// closed.
func (c *conn) hold() error {
	for c.nw.isStalled(c.link) {
		if c.done.Load() {
			return net.ErrClosed
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func (c *conn) Read(p []byte) (int, error) {
	if err := c.hold(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		// Data read just as the link stalled is held until it is released.
		if herr := c.hold(); herr != nil {
			return 0, herr
		}
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	if err := c.hold(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	var err error
	c.once.Do(func() {
		c.done.Store(true)
		c.nw.mu.Lock()
		delete(c.nw.conns, c)
		c.nw.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}
