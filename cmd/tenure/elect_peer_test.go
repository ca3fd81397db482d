package main

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
)

func electConfigFromFlags(t *testing.T, args ...string) (map[string]any, error) {
	t.Helper()
	fs := flag.NewFlagSet("elect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ef := addElectFlags(fs)
	if err := fs.Parse(append([]string{"--lock", tempStore(t) + "/leader.json"}, args...)); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := ef.config(&env{stdout: io.Discard, stderr: io.Discard})
	if err != nil {
		return nil, err
	}
	return map[string]any{"addr": cfg.ServerAddr, "listen": cfg.PeerListenAddr, "peerMode": cfg.PeerMode,
		"disabled": cfg.PeerDisabled, "serverTLS": cfg.PeerServerTLS != nil}, nil
}

func TestElectAddrAloneIsPeerMode(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want map[string]any // nil: refused
		says string
	}{
		{"advertise alone", []string{"--advertise", "node1.example:8443"},
			map[string]any{"addr": "node1.example:8443", "listen": "node1.example:8443", "peerMode": false, "disabled": false, "serverTLS": false}, ""},
		{"loopback advertised", []string{"--advertise", "127.0.0.1:8443"},
			map[string]any{"addr": "127.0.0.1:8443", "listen": "127.0.0.1:8443", "peerMode": false, "disabled": false, "serverTLS": false}, ""},
		{"every interface asked for", []string{"--advertise", "10.0.0.1:8443", "--peer-listen", ":8443"},
			map[string]any{"addr": "10.0.0.1:8443", "listen": ":8443", "peerMode": false, "disabled": false, "serverTLS": false}, ""},
		{"peer-listen given", []string{"--advertise", "10.0.0.1:8443", "--peer-listen", "127.0.0.1:9000"},
			map[string]any{"addr": "10.0.0.1:8443", "listen": "127.0.0.1:9000", "peerMode": false, "disabled": false, "serverTLS": false}, ""},
		{"store only", []string{"--advertise", "node1.example:8443", "--no-peer"},
			map[string]any{"addr": "node1.example:8443", "listen": "", "peerMode": false, "disabled": true, "serverTLS": false}, ""},
		{"require-peer", []string{"--advertise", "127.0.0.1:0", "--require-peer"},
			map[string]any{"addr": "127.0.0.1:0", "listen": "127.0.0.1:0", "peerMode": true, "disabled": false, "serverTLS": false}, ""},
		// The spellings of earlier releases still work.
		{"deprecated --addr --listen --peer", []string{"--addr", "10.0.0.1:8443", "--listen", "127.0.0.1:9000", "--peer"},
			map[string]any{"addr": "10.0.0.1:8443", "listen": "127.0.0.1:9000", "peerMode": true, "disabled": false, "serverTLS": false}, ""},
		{"no address", nil, map[string]any{"addr": "", "listen": "", "peerMode": false, "disabled": false, "serverTLS": false}, ""},
		{"address without port", []string{"--advertise", "node1"}, nil, "--advertise"},
		{"--require-peer and --no-peer", []string{"--advertise", "127.0.0.1:0", "--require-peer", "--no-peer"}, nil, "--no-peer: cannot be set with --require-peer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := electConfigFromFlags(t, c.args...)
			if c.want == nil {
				if err == nil || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("config = %v, %v; want an error naming %s", got, err, c.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %v; want %v", k, got[k], v)
				}
			}
		})
	}
}

func TestElectListensWhereAdvertiseSays(t *testing.T) {
	// A loopback address advertised is a loopback address listened on:
	// the peer port is not opened on every interface unless --peer-listen
	// says so. 127.0.0.2 is another address of the same host (Linux): a
	// listener on every interface would hold the port there too.
	probe, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("this host has no 127.0.0.2 to test with: %v", err)
	}
	probe.Close()
	advertise := testutil.FreeAddr(t)
	_, port, _ := net.SplitHostPort(advertise)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	errb := &lockedBuffer{}
	go func() {
		done <- run(ctx, &env{stdout: &lockedBuffer{}, stderr: errb},
			append([]string{"elect", "--lock", tempStore(t) + "/leader.json", "--id", "m1", "--http", "", "--advertise", advertise}, fastFlags...))
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	}()
	// The peer server is up once it accepts a connection at the address.
	var conn net.Conn
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("tcp", advertise); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatalf("nothing listens at --advertise %s: %v\n%s", advertise, err, errb.String())
		}
	}
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port))
	if err != nil {
		t.Fatalf("port %s is held on 127.0.0.2 too, so the peer server listens on every interface: %v", port, err)
	}
	other.Close()
}
