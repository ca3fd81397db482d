package kvserver_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/kv/kvclient"
	"github.com/tenure-io/tenure/rsm/kv/kvserver"

	_ "github.com/tenure-io/tenure/store/filestore"
)

// runNode runs a one-node group on dir until the returned stop, and
// returns its API's URL.
func runNode(t *testing.T, dir string, c kvserver.NodeConfig) (apiURL string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Server.HTTPAddr = "127.0.0.1:0"
	c.Server.Peer = rsm.HostConfig{ID: "n1", Addr: ln.Addr().String(), Listener: ln}
	c.StoreURL, c.Group = "file://"+dir, "kv"
	c.Options = rsm.Options{FlushInterval: 5 * time.Millisecond, MaxMessageSize: kv.MessageSize(kv.DefaultMaxValueSize)}
	c.MaxValueSize, c.Logger = kv.DefaultMaxValueSize, slog.New(slog.DiscardHandler)
	served := make(chan string, 1)
	c.OnServing = func(u string) { served <- u }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- kvserver.Run(ctx, c) }()
	select {
	case apiURL = <-served:
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before serving: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("the node did not serve within 30s")
	}
	stopped := false
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return apiURL, stop
}

// Run serves the API once the node has joined, reports it ready, keeps
// what was written across a restart, and returns nil when its context
// ends.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	api, stop := runNode(t, dir, kvserver.NodeConfig{})
	c := kvclient.New(api, nil, "")
	if r, err := c.Do(t.Context(), http.MethodPut, kvclient.KeyPath("k"), []byte("v")); err != nil || r.Status != http.StatusOK {
		t.Fatalf("put: %d %s, %v", r.Status, r.Body, err)
	}
	r, err := c.Do(t.Context(), http.MethodGet, "/readyz", nil)
	var st struct {
		Ready   bool   `json:"ready"`
		Command string `json:"command"`
		Role    string `json:"role"`
	}
	if err != nil || r.Decode(&st) != nil || !st.Ready || st.Command != "kv serve" || st.Role != "leader" {
		t.Fatalf("/readyz: %d %s, %v", r.Status, r.Body, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	api, _ = runNode(t, dir, kvserver.NodeConfig{})
	r, err = kvclient.New(api, nil, "").Do(t.Context(), http.MethodGet, kvclient.KeyPath("k"), nil)
	var it kvclient.Item
	if err != nil || r.Decode(&it) != nil || string(it.Value) != "v" {
		t.Fatalf("get after a restart: %d %s, %v", r.Status, r.Body, err)
	}
}

// Run refuses a configuration its server would not serve, naming the
// fields as the caller does, before it touches the store.
func TestRunRefusesConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = kvserver.Run(t.Context(), kvserver.NodeConfig{
		Server: kvserver.Config{HTTPAddr: "192.0.2.1:7480", Peer: rsm.HostConfig{ID: "n1", Addr: ln.Addr().String(), Listener: ln},
			Names: map[string]string{"HTTPAddr": "--http"}},
		StoreURL: "file://" + t.TempDir(), Group: "kv", Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil || !strings.Contains(err.Error(), "--http 192.0.2.1:7480 is not a loopback address") {
		t.Fatalf("%v; want the non-loopback address refused, named as --http", err)
	}
}

// TestStopClosesPortBeforeAPI: once the node stops, its port takes no new
// connection, before the API's stop closes the connections it serves. A
// gRPC client reconnects at once when its connection closes, and a
// connection accepted then went to the HTTP server after its Shutdown
// had told the others to go away: the stop waited for it until the
// request timeout, and a supervisor that allows a SIGTERM ten seconds
// killed the node.
func TestStopClosesPortBeforeAPI(t *testing.T) {
	var apiAddr string
	dialed := make(chan error, 1)
	c := kvserver.NodeConfig{API: func(_ *rsm.Node, _ *kv.Machine, apiURL string) (http.Handler, func(), error) {
		apiAddr = strings.TrimPrefix(apiURL, "http://")
		stop := func() {
			conn, err := net.DialTimeout("tcp", apiAddr, 2*time.Second)
			if err == nil {
				conn.Close()
			}
			dialed <- err
		}
		return http.NotFoundHandler(), stop, nil
	}}
	_, stop := runNode(t, t.TempDir(), c)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case err := <-dialed:
		if err == nil {
			t.Fatalf("a dial of %s while the API stopped was accepted; want the port closed first", apiAddr)
		}
	default:
		t.Fatal("the API's stop was not called")
	}
}
