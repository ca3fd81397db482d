package rsmtest

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves connections on a loopback port until the test ends,
// copying what it reads back.
func echo(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

func TestNetworkCutClosesConnections(t *testing.T) {
	nw := newNetwork()
	addr1, addr2 := echo(t), echo(t)
	nw.setAddr(1, addr1)
	nw.setAddr(2, addr2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c01, err := nw.dialer(0)(ctx, addr1)
	if err != nil {
		t.Fatal(err)
	}
	defer c01.Close()
	c02, err := nw.dialer(0)(ctx, addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer c02.Close()
	if n := nw.openConns(0, 1); n != 1 {
		t.Fatalf("%d tracked connections 0-1, want 1", n)
	}

	nw.setCut(1, 0, true) // either order names the link
	if !nw.isCut(0, 1) || nw.isCut(0, 2) {
		t.Fatal("cut the wrong link")
	}
	if n := nw.openConns(0, 1); n != 0 {
		t.Fatalf("%d connections 0-1 still tracked after the cut", n)
	}
	if _, err := c01.Write([]byte("x")); err == nil {
		t.Error("wrote on a connection across a cut link")
	}
	if _, err := nw.dialer(0)(ctx, addr1); err == nil {
		t.Error("dialed across a cut link")
	}
	// The other link is untouched.
	if _, err := c02.Write([]byte("y")); err != nil {
		t.Errorf("the link 0-2 broke: %v", err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c02, buf); err != nil || buf[0] != 'y' {
		t.Errorf("echo over 0-2: %q, %v", buf, err)
	}

	nw.setCut(0, 1, false)
	c, err := nw.dialer(0)(ctx, addr1)
	if err != nil {
		t.Fatalf("dial after healing: %v", err)
	}
	nw.closeNode(1)
	if _, err := c.Write([]byte("z")); err == nil {
		t.Error("closeNode left a connection to the node open")
	}
	nw.setAddr(1, "127.0.0.1:1") // node 1 moved: its old address is not tracked
	nw.setCut(0, 1, true)
	if c, err := nw.dialer(0)(ctx, addr1); err != nil {
		t.Errorf("dial to an address no node has any more: %v", err)
	} else {
		_ = c.Close()
	}
}
