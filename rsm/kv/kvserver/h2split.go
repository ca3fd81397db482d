package kvserver

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// h2Preface is what an HTTP/2 client sends first on a connection in
// clear (h2c with prior knowledge, as gRPC clients do).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// prefaceTimeout bounds the wait for a new connection's first bytes, as
// the HTTP server's ReadHeaderTimeout bounds a request's header.
const prefaceTimeout = 10 * time.Second

// splitListener hands the connections of a plain-HTTP port to two
// servers: those that open with HTTP/2's preface to the listener set with
// h2 (a gRPC server's own transport, about half the CPU per call of gRPC
// served through net/http), the others, and all of them while none is
// set, to its own Accept (net/http). Reading a connection's first bytes
// happens on a goroutine of its own, so a slow client holds up no other.
// It is safe for concurrent use.
type splitListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	close sync.Once
	wg    sync.WaitGroup

	mu      sync.Mutex
	grpc    *connListener         // nil while none is set
	routing map[net.Conn]struct{} // connections whose first bytes are awaited
	err     error                 // why the port stopped accepting
}

func newSplitListener(l net.Listener) *splitListener {
	s := &splitListener{Listener: l, conns: make(chan net.Conn), done: make(chan struct{}), routing: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.run()
	return s
}

// h2 returns a listener whose Accept gives the HTTP/2 connections
// accepted from now on, until it or s is closed.
func (s *splitListener) h2() net.Listener {
	c := &connListener{addr: s.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	s.grpc = c
	s.mu.Unlock()
	return c
}

func (s *splitListener) run() {
	defer s.wg.Done()
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			s.mu.Lock()
			select {
			case <-s.done: // closed
			default:
				s.err = err
			}
			s.mu.Unlock()
			_ = s.shut()
			return
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		s.routing[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.route(c)
		}()
	}
}

// route reads c's first bytes and hands it on: to the HTTP/2 listener if
// they are HTTP/2's preface and one is set, else to Accept.
func (s *splitListener) route(c net.Conn) {
	buf := make([]byte, len(h2Preface))
	n := 0
	_ = c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil || !bytes.HasPrefix([]byte(h2Preface), buf[:n]) {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	s.mu.Lock()
	delete(s.routing, c)
	s.mu.Unlock()
	pc := &prefixConn{Conn: c, prefix: buf[:n]}
	if n == len(buf) && string(buf) == h2Preface {
		s.mu.Lock()
		g := s.grpc
		s.mu.Unlock()
		if g != nil && g.deliver(pc) {
			return
		}
	}
	select {
	case s.conns <- pc:
	case <-s.done:
		_ = c.Close()
	}
}

// Accept gives the connections that are not the HTTP/2 listener's.
func (s *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return nil, s.err
		}
		return nil, net.ErrClosed
	}
}

// Close closes the port and both listeners, closes the connections whose
// first bytes are awaited, and waits for them.
func (s *splitListener) Close() error {
	err := s.shut()
	s.wg.Wait()
	return err
}

// shut closes the port and both listeners, and the connections being
// routed, once.
func (s *splitListener) shut() error {
	var err error
	s.close.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.routing {
			_ = c.Close()
		}
		if s.grpc != nil {
			_ = s.grpc.Close()
		}
		s.mu.Unlock()
		err = s.Listener.Close()
	})
	return err
}

// connListener is a listener whose connections are handed to it.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	close sync.Once
}

// deliver hands c to Accept; false if the listener is closed.
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
