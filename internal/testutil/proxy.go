package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address with a port free when it returned,
// for a server a test starts as a process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Proxy forwards TCP connections from its address to a target: a way to
// cut one process off from a server others still reach. While up it
// forwards; while down it refuses connections and has closed those it
// had; while black-holed it accepts them and never answers, as a frozen
// server does. A new Proxy is down; its address stays the same.
type Proxy struct {
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	hold   bool // black-holed
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// NewProxy returns a proxy to target, down; the test's cleanup takes it
// down and waits for its goroutines.
func NewProxy(t testing.TB, target string) *Proxy {
	p := &Proxy{addr: FreeAddr(t), target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		p.SetUp(t, false)
		p.wg.Wait()
	})
	return p
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.addr }

// SetUp brings the proxy up (forwarding) or down (refusing); either way
// the connections it had are closed, so their clients connect again.
func (p *Proxy) SetUp(t testing.TB, up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = false
	p.closeConnsLocked()
	if !up {
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		return
	}
	p.listenLocked(t)
}

// BlackHole makes the proxy accept connections and never answer on them;
// the connections it forwarded are closed, so their clients connect again.
func (p *Proxy) BlackHole(t testing.TB) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
	p.closeConnsLocked()
	p.listenLocked(t)
}

func (p *Proxy) closeConnsLocked() {
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) listenLocked(t testing.TB) {
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	p.mu.Lock()
	hold := p.hold
	if hold {
		p.conns[c] = true // closed when the proxy changes mode
	}
	p.mu.Unlock()
	if hold {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}
