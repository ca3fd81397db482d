package kvserver_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv/kvserver"
)

const token = "0123456789abcdef0123"

func opsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ops "+r.URL.Path) })
}

// The constructor refuses every configuration that leaves a way in open
// while another is guarded, naming the fields as the caller names them.
func TestConfigRules(t *testing.T) {
	withCAs := &tls.Config{ClientCAs: x509.NewCertPool()}
	peerTLS := rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7400", ServerTLS: &tls.Config{}, ClientTLS: &tls.Config{}}
	plain := rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7400", PlaintextLoopback: true}
	cases := []struct {
		name string
		cfg  kvserver.Config
		want []string // substrings of the error; nil: accepted
	}{
		{"loopback plain HTTP", kvserver.Config{HTTPAddr: "127.0.0.1:7480"}, nil},
		{"plain HTTP on every interface", kvserver.Config{HTTPAddr: "0.0.0.0:7480"}, []string{"HTTPAddr 0.0.0.0:7480 is not a loopback address", "TLS", "InsecureHTTP"}},
		{"plain HTTP on every interface, asked for", kvserver.Config{HTTPAddr: "0.0.0.0:7480", InsecureHTTP: true}, nil},
		{"HTTPS on every interface", kvserver.Config{HTTPAddr: ":7480", TLS: &tls.Config{}}, nil},
		{"client certificates without CAs", kvserver.Config{HTTPAddr: "127.0.0.1:7480", RequireClientCert: true}, []string{"RequireClientCert needs TLS with client CAs"}},
		{"short token", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: "abc"}, []string{"Token", "want at least 16"}},
		{"token of two words", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: "0123456789 abcdef"}, []string{"whitespace"}},
		{"token, peer keys", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: token, Peer: rsm.HostConfig{ID: "a", Addr: "10.0.0.1:7400"}}, nil},
		{"token, peer TLS", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: token, Peer: peerTLS}, nil},
		{"plaintext peers alone", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Peer: plain}, nil},
		{"plaintext peers and a token", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: token, Peer: plain}, []string{"PlaintextLoopback with Token or RequireClientCert", "peer port"}},
		{"plaintext peers and client certificates", kvserver.Config{HTTPAddr: "127.0.0.1:7480", TLS: withCAs, RequireClientCert: true, Peer: plain}, []string{"PlaintextLoopback with Token or RequireClientCert"}},
		{"plaintext peers off loopback", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Peer: rsm.HostConfig{ID: "a", Addr: "10.0.0.1:7400", PlaintextLoopback: true}}, []string{"PlaintextLoopback needs a loopback address", "10.0.0.1:7400"}},
		{"plaintext peers and peer TLS", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Peer: rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7400", PlaintextLoopback: true, ServerTLS: &tls.Config{}}}, []string{"exclusive"}},
		{"flag names", kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: token, Peer: plain, Names: map[string]string{"PlaintextLoopback": "--peer-plaintext", "Token": "--token-file"}}, []string{"--peer-plaintext with --token-file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Ops = opsHandler()
			s, err := kvserver.New(c.cfg)
			if c.want == nil {
				if err != nil || s == nil {
					t.Fatalf("New: %v, want it accepted", err)
				}
				return
			}
			if err == nil || !errors.Is(err, kvserver.ErrConfig) {
				t.Fatalf("New: %v, want an error matching ErrConfig", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := kvserver.New(kvserver.Config{HTTPAddr: "127.0.0.1:7480"}); err == nil || !strings.Contains(err.Error(), "Ops is required") {
		t.Errorf("New without Ops: %v", err)
	}
}

func get(t *testing.T, h http.Handler, path, auth string, mod func(*http.Request)) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// The token guards every path but the probes: /status, /metrics and the
// API; the API answers 503 and why until it is set.
func TestTokenGuardsEverythingButTheProbes(t *testing.T) {
	s, err := kvserver.New(kvserver.Config{HTTPAddr: "127.0.0.1:7480", Token: token, Ops: opsHandler(), NotReady: func() string { return "store unreachable: x" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/livez", "/readyz", "/healthz"} {
		if code, body := get(t, s, p, "", nil); code != 200 || body != "ops "+p {
			t.Errorf("%s without a token: %d %q, want the probe", p, code, body)
		}
	}
	for _, p := range []string{"/status", "/metrics", "/v1/kv/a", "/v1/list"} {
		for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token, token} {
			if code, _ := get(t, s, p, auth, nil); code != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: %d, want 401", p, auth, code)
			}
		}
	}
	if code, body := get(t, s, "/status", "Bearer "+token, nil); code != 200 || body != "ops /status" {
		t.Errorf("/status with the token: %d %q", code, body)
	}
	if code, body := get(t, s, "/v1/kv/a", "Bearer "+token, nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "store unreachable: x") {
		t.Errorf("the API before SetAPI: %d %q, want 503 and the reason", code, body)
	}
	s.SetAPI(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") }))
	if code, body := get(t, s, "/v1/kv/a", "bearer "+token, nil); code != 200 || body != "api" {
		t.Errorf("the API with the token: %d %q", code, body)
	}
	if code, _ := get(t, s, "/v1/kv/a", "", nil); code != http.StatusUnauthorized {
		t.Errorf("the API without the token: %d, want 401", code)
	}
}

// RequireClientCert refuses a request without a verified client
// certificate on every path but the probes.
func TestClientCertGuardsEverythingButTheProbes(t *testing.T) {
	s, err := kvserver.New(kvserver.Config{HTTPAddr: ":7480", TLS: &tls.Config{ClientCAs: x509.NewCertPool()}, RequireClientCert: true, Ops: opsHandler()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetAPI(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") }))
	if code, _ := get(t, s, "/readyz", "", nil); code != 200 {
		t.Errorf("/readyz without a certificate: %d", code)
	}
	for _, p := range []string{"/status", "/metrics", "/v1/kv/a"} {
		if code, body := get(t, s, p, "", nil); code != http.StatusUnauthorized || !strings.Contains(body, "client_certificate_required") {
			t.Errorf("%s without a certificate: %d %q", p, code, body)
		}
		unverified := func(r *http.Request) { r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}} }
		if code, _ := get(t, s, p, "", unverified); code != http.StatusUnauthorized {
			t.Errorf("%s with an unverified certificate: %d", p, code)
		}
	}
	verified := func(r *http.Request) {
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
	}
	if code, body := get(t, s, "/v1/kv/a", "", verified); code != 200 || body != "api" {
		t.Errorf("the API with a verified certificate: %d %q", code, body)
	}
}

func TestReadiness(t *testing.T) {
	leader := rsm.Status{State: "JOINED", Role: "LEADER", LeaderID: "a", Term: 3}
	follower := rsm.Status{State: "JOINED", Role: "FOLLOWER", LeaderID: "a", Term: 3}
	cases := []struct {
		name   string
		h      kvserver.Health
		ready  bool
		reason string
	}{
		{"leader", kvserver.Health{Status: leader}, true, ""},
		{"follower of a known leader", kvserver.Health{Status: follower}, true, ""},
		{"follower without a leader", kvserver.Health{Status: rsm.Status{State: "JOINED", Role: "FOLLOWER"}}, false, "no leader known"},
		{"joining", kvserver.Health{Status: rsm.Status{State: "JOINING", Role: "NONE"}}, false, "joining"},
		{"store unreachable at start", kvserver.Health{Starting: "store unreachable: refused"}, false, "store unreachable: refused"},
		{"store failing", kvserver.Health{Status: leader, StoreErr: errors.New("timeout")}, false, "store unreachable: timeout"},
		{"corrupt object", kvserver.Health{Status: rsm.Status{State: "JOINING", Role: "NONE", Problem: `rsm: corrupt object "kv/log/1" in the store`}}, false, `refusing to serve: rsm: corrupt object "kv/log/1"`},
		{"stopping", kvserver.Health{Status: leader, Stopping: true}, false, "shutting down"},
	}
	for _, c := range cases {
		ready, reason := kvserver.Readiness(c.h)
		if ready != c.ready || !strings.Contains(reason, c.reason) {
			t.Errorf("%s: ready %v, %q; want %v, %q", c.name, ready, reason, c.ready, c.reason)
		}
	}
}

// APITLS verifies a client certificate if given, and leaves requiring one
// to the Server, so that the probes answer without; PeerTLS presents the
// node's certificate both ways and trusts the CA's.
func TestLoadTLS(t *testing.T) {
	ca, err := tlsutil.NewCA("kvserver test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := ca.WriteFiles(dir, "node", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	cert, key, caFile := kvserver.PeerTLSFiles(dir)
	api, err := kvserver.APITLS(cert, key, caFile)
	if err != nil || api.ClientAuth != tls.VerifyClientCertIfGiven || api.ClientCAs == nil || len(api.Certificates) != 1 {
		t.Fatalf("APITLS with a client CA: %+v, %v", api, err)
	}
	if api, err = kvserver.APITLS(cert, key, ""); err != nil || api.ClientAuth != tls.NoClientCert {
		t.Fatalf("APITLS without a client CA: %+v, %v", api, err)
	}
	server, client, err := kvserver.PeerTLS(cert, key, caFile)
	if err != nil || server.ClientCAs == nil || client.RootCAs == nil {
		t.Fatalf("PeerTLS: %+v %+v, %v", server, client, err)
	}
	if _, _, err := kvserver.PeerTLS(cert, key, filepath.Join(dir, "missing.pem")); err == nil {
		t.Fatal("PeerTLS loaded a CA file that does not exist")
	}
}
