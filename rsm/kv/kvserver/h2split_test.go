package kvserver

import (
	"io"
	"net"
	"testing"
	"time"
)

// The split listener gives a connection that opens with HTTP/2's preface
// to the HTTP/2 listener while one is set and open, and every other
// connection, with the bytes it read first, to its own Accept; closing it
// closes a connection whose first bytes never came.
func TestSplitListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newSplitListener(ln)
	defer s.Close()
	dial := func(first string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte(first)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	accept := func(l net.Listener, want string) {
		t.Helper()
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := l.Accept()
			ch <- res{c, err}
		}()
		var r res
		select {
		case r = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no connection accepted; want one that sent %q", want)
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer r.c.Close()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r.c, got); err != nil || string(got) != want {
			t.Fatalf("accepted a connection that reads %q (%v), want %q", got, err, want)
		}
	}

	dial("GET /\r\n") // shorter than the preface, and not its start
	accept(s, "GET /\r\n")
	dial(h2Preface + "x")
	accept(s, h2Preface+"x") // no HTTP/2 listener yet
	h := s.h2()
	dial(h2Preface + "y")
	accept(h, h2Preface+"y")
	dial("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	accept(s, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	dial(h2Preface + "z")
	accept(s, h2Preface+"z") // the HTTP/2 listener closed

	// A connection that sent part of the preface and waits.
	c := dial("PRI * ")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a connection the closed listener was routing; want it closed", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the closed listener left a connection it was routing open")
	}
	if _, err := s.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}
