// Package kvserver is the server of a kv node (tenure kv serve): the
// policy of its two ports and the HTTP front of its API.
//
// One constructor, New, enforces the rules (docs/security.md):
//
//   - the HTTP API is plain HTTP only on a loopback address, unless
//     InsecureHTTP says otherwise; RequireClientCert needs TLS with client
//     CAs; a Token is one word of at least MinTokenLen bytes;
//   - the peer port (the node's rsm.HostConfig) is authenticated whenever
//     the API is: PlaintextLoopback is refused with a Token or
//     RequireClientCert, since the peer RPCs reach the state the API
//     guards.
//
// The Server it returns answers the probes (/livez, /readyz, /healthz)
// without credentials, requires the client certificate and the token on
// every other path, serves /status and /metrics from the operations
// handler, and the API once SetAPI gives it (until then, 503 and why).
//
// New does not listen: its caller serves the Server on its listeners.
// Run runs a whole node as tenure kv serve does: it listens, connects to
// the store (retrying while it does not answer), joins the group, serves
// the API, and leaves the group when its context ends. Flags and signals
// stay with the caller.
package kvserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/tenure-io/tenure/rsm"
)

// MinTokenLen is the shortest bearer token accepted, in bytes.
const MinTokenLen = 16

// ErrConfig matches every error of Config.Validate.
var ErrConfig = errors.New("kvserver: invalid configuration")

// Config is a kv node's server configuration. Names, if set, gives the
// names its caller uses for the fields (flags, for the command line), and
// errors say those.
type Config struct {
	// HTTPAddr is the address the API listens on (host:port). Required.
	HTTPAddr string
	// TLS serves the API over HTTPS. Nil: plain HTTP.
	TLS *tls.Config
	// InsecureHTTP allows plain HTTP on an HTTPAddr that is not loopback.
	InsecureHTTP bool
	// RequireClientCert requires a client certificate that TLS verified
	// against TLS.ClientCAs on every request but the probes.
	RequireClientCert bool
	// Token, if set, is required as "Authorization: Bearer TOKEN" on every
	// request but the probes, compared in constant time.
	Token string
	// Peer is the node's host configuration: its peer port.
	Peer rsm.HostConfig
	// Ops serves the probes, /status and /metrics. Required.
	Ops http.Handler
	// NotReady says why the API is not served yet. Default: "starting".
	NotReady func() string
	// Names maps a field's name to the caller's name for it, in errors.
	Names map[string]string
}

func (c Config) name(field string) string {
	if n, ok := c.Names[field]; ok {
		return n
	}
	return field
}

// Validate reports every rule c breaks, naming the fields.
func (c Config) Validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	switch {
	case c.HTTPAddr == "":
		add("%s is required", c.name("HTTPAddr"))
	case c.TLS == nil && !c.InsecureHTTP && !Loopback(c.HTTPAddr):
		add("%s %s is not a loopback address: serve HTTPS there with %s, or set %s to serve plain HTTP anyway",
			c.name("HTTPAddr"), c.HTTPAddr, c.name("TLS"), c.name("InsecureHTTP"))
	}
	if c.RequireClientCert && (c.TLS == nil || c.TLS.ClientCAs == nil) {
		add("%s needs %s with client CAs", c.name("RequireClientCert"), c.name("TLS"))
	}
	if c.Token != "" {
		switch {
		case strings.ContainsAny(c.Token, " \t\r\n"):
			add("%s holds whitespace inside the token; want one word", c.name("Token"))
		case len(c.Token) < MinTokenLen:
			add("%s: the token is %d bytes; want at least %d (e.g. openssl rand -hex 32)", c.name("Token"), len(c.Token), MinTokenLen)
		}
	}
	if c.Peer.PlaintextLoopback {
		if c.Peer.ServerTLS != nil || c.Peer.ClientTLS != nil {
			add("%s and the peer TLS (%s) are exclusive", c.name("PlaintextLoopback"), c.name("ServerTLS"))
		}
		if c.Token != "" || c.RequireClientCert {
			add("%s with %s or %s: the API would be protected and the peer port, which reaches the same state, not (any local process could submit commands and read state past the token); drop %s, peers then authenticate with keys published in the store",
				c.name("PlaintextLoopback"), c.name("Token"), c.name("RequireClientCert"), c.name("PlaintextLoopback"))
		}
		if c.Peer.Addr != "" && !Loopback(c.Peer.Addr) {
			add("%s needs a loopback address, and the other nodes dial %s: drop %s (peers then authenticate with keys published in the store) or listen on loopback",
				c.name("PlaintextLoopback"), c.Peer.Addr, c.name("PlaintextLoopback"))
		}
	}
	if c.Ops == nil {
		add("%s is required", c.name("Ops"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}

// Server is a kv node's HTTP front. It is safe for concurrent use.
type Server struct {
	token       *[sha256.Size]byte // of the bearer token; nil: none required
	clientCerts bool
	ops         http.Handler
	notReady    func() string
	api         atomic.Pointer[http.Handler]
}

// New checks c (Config.Validate) and returns its server.
func New(c Config) (*Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Server{clientCerts: c.RequireClientCert, ops: c.Ops, notReady: c.NotReady}
	if c.Token != "" {
		sum := sha256.Sum256([]byte(c.Token))
		s.token = &sum
	}
	return s, nil
}

// SetAPI starts serving the API with h.
func (s *Server) SetAPI(h http.Handler) { s.api.Store(&h) }

// ServeHTTP answers the probes, then authenticates, then serves /status,
// /metrics and the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/livez", "/readyz", "/healthz":
		// Kubelets and load balancers probe without credentials.
		s.ops.ServeHTTP(w, r)
		return
	}
	if s.clientCerts && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "this server requires a client certificate (tenure kv: --cert and --key)", "code": "client_certificate_required"})
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tenure kv"`)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "missing or wrong bearer token: send Authorization: Bearer TOKEN (tenure kv: --token-file or $TENURE_KV_TOKEN)", "code": "unauthorized"})
		return
	}
	if r.URL.Path == "/metrics" || r.URL.Path == "/status" {
		s.ops.ServeHTTP(w, r)
		return
	}
	api := s.api.Load()
	if api == nil {
		reason := ""
		if s.notReady != nil {
			reason = s.notReady()
		}
		if reason == "" {
			reason = "starting"
		}
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "not ready: " + reason, "code": "not_ready", "outcome": "not_applied"})
		return
	}
	(*api).ServeHTTP(w, r)
}

// authorized compares the bearer token in constant time (of hashes, so the
// length does not show either).
func (s *Server) authorized(r *http.Request) bool {
	if s.token == nil {
		return true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// Health is what readiness is decided on.
type Health struct {
	Stopping bool
	Starting string // why there is no node yet
	Status   rsm.Status
	StoreErr error // the store's calls have been failing
}

// Readiness: ready while the node leads, or follows a leader it knows, on
// a store that answers, and refuses nothing: a corrupt or missing object
// the group needs (docs/rsm.md, rule 12) keeps it out of service, named,
// until it is repaired and the node serves again.
func Readiness(h Health) (ready bool, reason string) {
	switch {
	case h.Stopping:
		return false, "shutting down"
	case h.Starting != "":
		return false, h.Starting
	case h.Status.Problem != "":
		return false, "refusing to serve: " + h.Status.Problem
	case h.StoreErr != nil:
		return false, "store unreachable: " + h.StoreErr.Error()
	case h.Status.State != rsm.Joined.String():
		return false, "joining the group"
	case h.Status.Role == rsm.Leader.String():
		return true, ""
	case h.Status.Role == rsm.Follower.String() && h.Status.LeaderID != "":
		return true, ""
	case h.Status.Role == rsm.Follower.String():
		return false, "no leader known"
	}
	return false, "no role in the group (" + h.Status.Role + ")"
}

// Loopback reports whether addr (host:port) is a loopback address.
func Loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; a failed write has no one to tell
}
