package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/grpclog"

	"github.com/tenure-io/tenure/internal/grpcslog"
	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
)

// TestKVServeHTTPS serves the API over HTTPS with a test CA, then with
// client certificates required, and uses it with the client commands.
func TestKVServeHTTPS(t *testing.T) {
	ca, err := tlsutil.NewCA("kv api test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srvFiles, err := ca.WriteFiles(dir, "api", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cliFiles, err := ca.WriteFiles(dir, "client", "client")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsutil.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherFiles, err := other.WriteFiles(t.TempDir(), "client", "client")
	if err != nil {
		t.Fatal(err)
	}
	storeURL := "file://" + t.TempDir()

	t.Run("server TLS", func(t *testing.T) {
		addr, stop := startKVServe(t, "--store", storeURL, "--group", "tls", "--http-tls-cert", srvFiles.Cert, "--http-tls-key", srvFiles.Key)
		if !strings.HasPrefix(addr, "https://") {
			t.Fatalf("address %s; want https://", addr)
		}
		if code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--ca", srvFiles.CA); code != 0 || out != "revision 1\n" {
			t.Fatalf("put over HTTPS: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		if code, _, errs := runCmd(t, "kv", "get", "k", "--server", addr); code != 1 || !strings.Contains(errs, "certificate") {
			t.Errorf("get without --ca (the test CA is not a system root): exit %d, stderr %q; want a certificate error", code, errs)
		}
		plain := "http://" + strings.TrimPrefix(addr, "https://")
		if code, _, errs := runCmd(t, "kv", "get", "k", "--server", plain); code != 1 {
			t.Errorf("plain HTTP to the HTTPS port: exit %d, stderr %q; want 1", code, errs)
		}
		if code, _, errs := runCmd(t, "kv", "get", "k", "--server", plain, "--ca", srvFiles.CA); code != 1 || !strings.Contains(errs, "need an https://") {
			t.Errorf("--ca with an http:// address: exit %d, stderr %q", code, errs)
		}
		if code, logs := stop(); code != 0 {
			t.Fatalf("exit %d:\n%s", code, logs)
		}
	})

	t.Run("client certificates", func(t *testing.T) {
		addr, stop := startKVServe(t, "--store", storeURL, "--group", "mtls",
			"--http-tls-cert", srvFiles.Cert, "--http-tls-key", srvFiles.Key, "--http-client-ca", srvFiles.CA)
		if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--ca", srvFiles.CA); code != 1 || !strings.Contains(errs, "requires a client certificate") {
			t.Errorf("put without a client certificate: exit %d, stderr %q; want it refused", code, errs)
		}
		if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--ca", srvFiles.CA, "--cert", otherFiles.Cert, "--key", otherFiles.Key); code != 1 || !strings.Contains(errs, "requires a client certificate") && !strings.Contains(errs, "cannot reach") {
			// Go's client withholds a certificate the server's CAs did not
			// sign; another client would have its handshake refused.
			t.Errorf("put with a certificate from another CA: exit %d, stderr %q; want it refused", code, errs)
		}
		if code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--ca", srvFiles.CA, "--cert", cliFiles.Cert, "--key", cliFiles.Key); code != 0 || out != "revision 1\n" {
			t.Fatalf("put with a client certificate: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		// A client that sends a certificate the CA did not sign anyway is
		// refused in the handshake.
		foreign, err := other.Issue("client", "client")
		if err != nil {
			t.Fatal(err)
		}
		forced, err := tlsutil.LoadClient(srvFiles.CA, "", "")
		if err != nil {
			t.Fatal(err)
		}
		forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
		if code, body, err := kvGet(addr+"/v1/status", forced); err == nil {
			t.Errorf("a certificate from another CA: %d %s; want the handshake refused", code, body)
		}
		// Probes answer without one: kubelets and load balancers have none.
		hc, err := tlsutil.LoadClient(srvFiles.CA, "", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/livez", "/readyz"} {
			code, body := kvProbe(t, addr+path, hc)
			if code != 200 {
				t.Errorf("%s without a client certificate: %d %s; want 200", path, code, body)
			}
		}
		if code, logs := stop(); code != 0 {
			t.Fatalf("exit %d:\n%s", code, logs)
		}
	})
}

// TestKVServeToken: the client commands send the token from --token-file
// or $TENURE_KV_TOKEN; the server refuses the rest.
func TestKVServeToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("token", "  correct-horse-battery-staple\n")
	wrong := write("wrong", "correct-horse-battery-stapl")
	addr, _ := startKVServe(t, "--store", tempStore(t), "--token-file", good)
	t.Setenv("TENURE_KV_TOKEN", "")
	if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr); code != 1 || !strings.Contains(errs, "HTTP 401") {
		t.Errorf("put without a token: exit %d, stderr %q; want 401", code, errs)
	}
	if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--token-file", wrong); code != 1 || !strings.Contains(errs, "HTTP 401") {
		t.Errorf("put with a wrong token: exit %d, stderr %q; want 401", code, errs)
	}
	if code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", addr, "--token-file", good); code != 0 || out != "revision 1\n" {
		t.Errorf("put with --token-file: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Setenv("TENURE_KV_TOKEN", "correct-horse-battery-staple")
	if code, out, errs := runCmd(t, "kv", "get", "k", "--server", addr); code != 0 || out != "v" {
		t.Errorf("get with TENURE_KV_TOKEN: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// With a token, /status and /metrics on --http need it; --metrics-http
// serves /metrics alone without it; the probes never need it.
func TestKVServeMetricsHTTP(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("correct-horse-battery-staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := testutil.FreeAddr(t)
	addr, _ := startKVServe(t, "--store", tempStore(t), "--token-file", token, "--metrics-http", metricsAddr)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _, _ := kvGet(addr+"/readyz", nil); code == http.StatusOK {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the node was not ready within 30s")
		}
	}
	for _, c := range []struct {
		url  string
		want int
	}{
		{addr + "/status", http.StatusUnauthorized},
		{addr + "/metrics", http.StatusUnauthorized},
		{addr + "/livez", http.StatusOK},
		{addr + "/readyz", http.StatusOK},
		{addr + "/healthz", http.StatusOK},
		{"http://" + metricsAddr + "/metrics", http.StatusOK},
		{"http://" + metricsAddr + "/status", http.StatusNotFound},
	} {
		code, body, err := kvGet(c.url, nil)
		if err != nil || code != c.want {
			t.Errorf("GET %s: %d %.200s (%v); want %d", c.url, code, body, err, c.want)
		}
		if strings.HasSuffix(c.url, metricsAddr+"/metrics") && !strings.Contains(body, "# TYPE tenure_store_requests_total counter") {
			t.Errorf("GET %s: not the store's metrics:\n%.300s", c.url, body)
		}
	}
}

// TestKVServeRefuses: flags that would leave the API open, or limits that
// do not agree, stop kv serve at start with a message.
func TestKVServeRefuses(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	_ = os.WriteFile(short, []byte("abc"), 0o600)
	good := filepath.Join(dir, "good")
	_ = os.WriteFile(good, []byte("0123456789abcdef0123"), 0o600)
	ca, err := tlsutil.NewCA("kv test")
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := filepath.Join(dir, "peer")
	_ = os.Mkdir(peerTLS, 0o700)
	if _, err := ca.WriteFiles(peerTLS, "node", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	api, err := ca.WriteFiles(dir, "api", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"kv", "serve", "--store", tempStore(t), "--peer-listen", "127.0.0.1:0"}
	cases := []struct {
		name     string
		args     []string
		mentions []string
	}{
		{"plain HTTP on every interface", []string{"--http", "0.0.0.0:0"}, []string{"not a loopback address", "--insecure-http", "--http-tls-cert"}},
		{"plain HTTP on a port alone", []string{"--http", ":0"}, []string{"not a loopback address"}},
		{"certificate without key", []string{"--http-tls-cert", "x.pem"}, []string{"--http-tls-cert and --http-tls-key go together"}},
		{"client CA without certificate", []string{"--http-client-ca", "ca.pem"}, []string{"go together"}},
		{"empty token", []string{"--token-file", empty}, []string{"is empty"}},
		{"short token", []string{"--token-file", short}, []string{"at least 16"}},
		{"missing token file", []string{"--token-file", filepath.Join(dir, "nope")}, []string{"--token-file", "no such file"}},
		{"value larger than an RPC message", []string{"--max-value-size", "70000000"},
			[]string{"--max-value-size 70000000", "rsm.MaxMessageSizeLimit", "kv.MaxValueSizeLimit"}},
		{"unknown store scheme", []string{"--store", "nope://x"}, []string{"unknown URL scheme"}},
		// The peer port reaches the state the API guards: it is never left
		// open while the API is protected, nor off loopback.
		{"plaintext peers with a token", []string{"--peer-plaintext", "--token-file", good}, []string{"--peer-plaintext with --token-file", "peer port"}},
		{"plaintext peers with API client certificates", []string{"--peer-plaintext", "--http-tls-cert", api.Cert, "--http-tls-key", api.Key, "--http-client-ca", api.CA},
			[]string{"--peer-plaintext with --token-file or --http-client-ca"}},
		{"plaintext peers with peer TLS", []string{"--peer-plaintext", "--tls-dir", peerTLS}, []string{"--peer-plaintext and the peer TLS", "exclusive"}},
		{"plaintext peers off loopback", []string{"--peer-plaintext", "--advertise", "10.0.0.1:7400"}, []string{"--peer-plaintext needs a loopback address", "10.0.0.1:7400"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Bounded: a kv serve that accepts the flags would serve on.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			code, out, errs := runCmdCtx(t, ctx, append(append([]string{}, base...), c.args...)...)
			if code != 1 {
				t.Errorf("exit %d; want 1\nstdout: %s\nstderr: %s", code, out, errs)
			}
			for _, m := range c.mentions {
				if !strings.Contains(errs, m) {
					t.Errorf("stderr lacks %q: %s", m, errs)
				}
			}
		})
	}
	// The limit itself is accepted.
	addr, stop := startKVServe(t, "--store", tempStore(t), "--max-value-size", strconv.Itoa(kv.MaxValueSizeLimit), "--http", "0.0.0.0:0", "--insecure-http")
	waitRole(t, addr, true)
	if code, out, errs := runCmd(t, "kv", "status", "--server", addr); code != 0 || !strings.Contains(out, "LEADER") {
		t.Errorf("kv serve with --max-value-size at the limit, on 0.0.0.0 with --insecure-http: status exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, logs := stop(); code != 0 {
		t.Errorf("exit %d:\n%s", code, logs)
	}
}

// TestKVServeLargeValue: a value twice the default RPC message limit goes
// through a follower to the leader and back, because --max-value-size sets
// the group's MaxMessageSize.
func TestKVServeLargeValue(t *testing.T) {
	storeURL := "file://" + t.TempDir()
	const size = 1 << 20
	var addrs []string
	for _, id := range []string{"a", "b"} {
		addr, _ := startKVServe(t, "--store", storeURL, "--group", "large", "--id", id, "--max-value-size", "1048576")
		addrs = append(addrs, addr)
		waitRole(t, addr, map[string]bool{"a": true}[id])
	}
	value := strings.Repeat("x", size)
	if code, out, errs := runWithStdin(t, value, "kv", "put", "big", "-", "--server", addrs[1]); code != 0 || out != "revision 1\n" {
		t.Fatalf("put of %d bytes through the follower: exit %d, stdout %q, stderr %q", size, code, out, errs)
	}
	for i, addr := range addrs {
		code, out, errs := runCmd(t, "kv", "get", "big", "--server", addr)
		if code != 0 || out != value {
			t.Errorf("get through node %d: exit %d, %d bytes, stderr %q", i, code, len(out), errs)
		}
	}
	if code, _, errs := runWithStdin(t, value+"x", "kv", "put", "big", "-", "--server", addrs[1]); code != 1 || !strings.Contains(errs, "HTTP 413") {
		t.Errorf("put of %d bytes: exit %d, stderr %q; want 413", size+1, code, errs)
	}
}

// waitRole waits until the node at addr leads (or follows a leader).
func waitRole(t *testing.T, addr string, leader bool) {
	t.Helper()
	want := "FOLLOWER"
	if leader {
		want = "LEADER"
	}
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, out, _ := runCmd(t, "kv", "status", "--server", addr)
		if strings.Contains(out, want) {
			return
		}
		last = out
	}
	t.Fatalf("node at %s never became %s:\n%s", addr, want, last)
}

// gRPC's logs go through kv serve's logger, as JSON when it is.
func TestGRPCLogsThroughSlog(t *testing.T) {
	var buf lockedBuffer
	prev := grpcslog.SetLogger(nil)
	defer grpcslog.SetLogger(prev)
	code := run(t.Context(), &env{stdout: &bytes.Buffer{}, stderr: &buf}, []string{"kv", "serve", "--store", "nope://", "--peer-listen", "127.0.0.1:0", "--log-format", "json"})
	if code != 1 || grpcslog.Current() == nil {
		t.Fatalf("exit %d, logger set %v", code, grpcslog.Current() != nil)
	}
	// A reconnection's warning is below the default level: a follower
	// whose leader died would print one per attempt.
	grpclog.Warningf("[core] addrConn.createTransport failed to connect to %s", "127.0.0.1:1")
	grpclog.Infof("[core] Channel Connectivity change to %s", "IDLE")
	if strings.Contains(buf.String(), "createTransport") || strings.Contains(buf.String(), "Connectivity") {
		t.Errorf("gRPC's warnings and info print at the default level:\n%s", buf.String())
	}
	grpclog.Errorf("transport: %s", "boom")
	lines := parseJSONLines(t, buf.String())
	if len(lines) == 0 || lines[len(lines)-1]["msg"] != "transport: boom" || lines[len(lines)-1]["component"] != "grpc" || lines[len(lines)-1]["level"] != "ERROR" {
		t.Errorf("gRPC's error is not a JSON line of kv serve's logger:\n%s", buf.String())
	}
}

func kvProbe(t *testing.T, url string, cfg *tls.Config) (int, string) {
	t.Helper()
	code, body, err := kvGet(url, cfg)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, body
}

func kvGet(url string, cfg *tls.Config) (int, string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func parseJSONLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("a line that is not JSON: %q", sc.Text())
			continue
		}
		if _, ok := l["level"].(string); !ok {
			t.Errorf("a line without a level: %q", sc.Text())
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// randomSuffix names a store, prefix or bucket of one test run.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// A corrupt object in the store keeps the node out of service, and
// /readyz says so.
func TestKVServeCorruptNotReady(t *testing.T) {
	url := tempStore(t)
	st, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Put(t.Context(), "kv/leader_state.json", []byte("not a leader state"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	addr, _ := startKVServe(t, "--store", url)
	var code int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, body, err = kvGet(addr+"/readyz", nil); err == nil && code == 503 && strings.Contains(body, "corrupt object") {
			return
		}
	}
	t.Fatalf("/readyz: %d %s (%v); want 503 naming a corrupt object", code, body, err)
}

// With --log-format json, the HTTP server's own errors (a plain request to
// the HTTPS port) are JSON lines too, and nothing goes to stdout.
func TestKVServeJSONErrorLog(t *testing.T) {
	ca, err := tlsutil.NewCA("kv json test")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(t.TempDir(), "api", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: &out, stderr: &errb}, []string{"kv", "serve", "--store", tempStore(t),
			"--http", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--log-format", "json",
			"--http-tls-cert", files.Cert, "--http-tls-key", files.Key})
	}()
	var api string
	for deadline := time.Now().Add(30 * time.Second); api == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range parseJSONLines(t, errb.String()) {
			if l["msg"] == "serving" {
				api, _ = l["api"].(string)
			}
		}
	}
	if api == "" {
		cancel()
		<-done
		t.Fatalf("no \"serving\" line:\n%s", errb.String())
	}
	plain := "http://" + strings.TrimPrefix(api, "https://")
	if code, _, err := kvGet(plain+"/livez", nil); err == nil && code == 200 {
		t.Errorf("plain HTTP to the HTTPS port answered 200")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, errb.String())
	}
	if out.String() != "" {
		t.Errorf("stdout with --log-format json: %q; want nothing", out.String())
	}
	found := false
	for _, l := range parseJSONLines(t, errb.String()) {
		if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "TLS handshake error") {
			found = true
		}
	}
	if !found {
		t.Errorf("the HTTP server's handshake error is not a JSON line:\n%s", errb.String())
	}
}
