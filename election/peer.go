package election

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"
)

// The peer protocol. The leader serves GET {PeerHealthPath} over HTTPS with
// the record it last wrote successfully, as JSON (the same document as in
// the store, so S3lect's followers can read it), and the record's store
// version in the header X-Tenure-Version. Past its renew deadline, or if it
// does not lead, it answers 503.
//
// Beyond S3lect, a follower may long-poll: ?after=VERSION&wait=DURATION
// holds the request until the leader's version differs from VERSION (the
// next renewal, or a release), or wait passes. A follower thus hears of each
// renewal and of a release at once, with no store reads, and notices a crash
// when the connection breaks.

// VersionHeader carries the store version of the record in a peer answer.
const VersionHeader = "X-Tenure-Version"

type peerHandler struct{ e *Elector }

type peerState int

const (
	peerServe  peerState = iota // answer with the record
	peerRefuse                  // 503: not the leader
	peerHold                    // stepping down: hold the request until the release is written
)

// peerView returns the record to serve and what to do with the request: our
// last successful write is served while we lead within the deadline, and
// our release once written; while we step down, requests wait for it.
func (e *Elector) peerView() (rec Record, version string, state peerState, changed <-chan struct{}) {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pub
	switch {
	case p.version != "" && (p.record.Released || (p.leading && now.Before(p.deadline) && p.term == p.record.Term)):
		state = peerServe
	case p.releasing:
		state = peerHold
	default:
		state = peerRefuse
	}
	return p.record, p.version, state, e.changed
}

func (h peerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	var wait time.Duration
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			http.Error(w, "bad wait: want a duration such as 7.5s", http.StatusBadRequest)
			return
		}
		wait = min(d, h.e.cfg.InfrequentInterval)
	}
	after := q.Get("after")
	var timeout <-chan time.Time
	if wait > 0 {
		t := h.e.clk.NewTimer(wait)
		defer t.Stop()
		timeout = t.C()
	}
	for {
		rec, version, state, changed := h.e.peerView()
		if state == peerRefuse || (state == peerHold && wait == 0) {
			writeJSON(w, http.StatusServiceUnavailable, "", map[string]string{"error": notLeaderText})
			return
		}
		if state == peerServe && (wait == 0 || version != after || rec.Released) {
			writeJSON(w, http.StatusOK, version, rec)
			return
		}
		select {
		case <-changed:
		case <-timeout:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, version string, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if version != "" {
		w.Header().Set(VersionHeader, version)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errPeerNotLeading is a peer's answer that it does not lead: a 503 with
// notLeaderText, as a member's peer endpoint gives it. Another 503 (a proxy
// in front, say) is a failure like any other and says nothing of the
// leader.
var errPeerNotLeading = errors.New("election: peer answered 503: it does not lead")

const notLeaderText = "not the leader"

// decodePeerResponse checks a peer answer: status 200, a version, and a
// record that decodes.
func decodePeerResponse(status int, version string, body []byte) (Record, error) {
	if status == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"error":"`+notLeaderText+`"`)) {
		return Record{}, errPeerNotLeading
	}
	if status != http.StatusOK {
		return Record{}, fmt.Errorf("election: peer answered %d %s", status, http.StatusText(status))
	}
	if version == "" || len(version) > 1024 {
		return Record{}, fmt.Errorf("election: peer answer has no valid %s header", VersionHeader)
	}
	return DecodeRecord(body)
}

type peerServer struct {
	srv  *http.Server
	done chan struct{}
}

func startPeerServer(e *Elector) (*peerServer, error) {
	tlsCfg, key := e.cfg.PeerServerTLS, configuredPeerKey(e.cfg.PeerServerTLS)
	if tlsCfg == nil {
		cert, fp, err := newPeerIdentity(e.cfg.ServerID)
		if err != nil {
			return nil, err
		}
		tlsCfg, key = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, fp
	}
	ln, err := net.Listen("tcp", e.cfg.PeerListenAddr)
	if err != nil {
		return nil, fmt.Errorf("election: peer server: %w", err)
	}
	// Only a member that serves the endpoint names a key: followers ask
	// no leader whose record names none (unless configured to).
	e.core.peerKey = key
	// Advertise the port the system chose when asked for port 0.
	if host, port, err := net.SplitHostPort(e.cfg.ServerAddr); err == nil && port == "0" {
		_, real, _ := net.SplitHostPort(ln.Addr().String())
		addr := net.JoinHostPort(host, real)
		e.mu.Lock()
		e.cfg.ServerAddr = addr
		e.mu.Unlock()
		e.core.addr = addr
	}
	mux := http.NewServeMux()
	mux.Handle(e.cfg.PeerHealthPath, peerHandler{e})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: e.cfg.PeerTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
		TLSConfig:         tlsCfg,
	}
	ps := &peerServer{srv: srv, done: make(chan struct{})}
	go func() {
		defer close(ps.done)
		if err := srv.Serve(tls.NewListener(ln, tlsCfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("peer server stopped", "err", err)
		}
	}()
	return ps, nil
}

// close lets waiting long-polls see the final state (they return as soon
// as the release is published), then stops the server.
func (ps *peerServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := ps.srv.Shutdown(ctx); err != nil {
		_ = ps.srv.Close()
	}
	<-ps.done
}

// peerable reports whether a follower asks the observed leader rather
// than the store: peer mode is on, the leader has an address, and either
// its record names the key to check it by or this member is configured to
// check leaders otherwise (PeerClientTLS, or PeerMode with system roots).
// A leader whose record names no key serves no endpoint of its own (an
// older version, or peer mode off): asking it would only fail.
func (c *core) peerable() bool {
	return c.peerMode && c.obs.rec.LeaderAddr != "" && (c.obs.rec.PeerKey != "" || c.peerAnyLeader)
}

// peerClient returns the client that asks a leader whose record names key:
// the configured one (PeerClientTLS, or system roots when the record names
// no key), else one that accepts only that key. The choice is made for
// each leadership from its own record: a client made for a leader that
// named no key is never used for one that names a key. Only the loop
// goroutine calls it.
func (e *Elector) peerClient(key string) *http.Client {
	newClient := func(tc *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			TLSClientConfig:     tc,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     2 * e.cfg.InfrequentInterval,
			TLSHandshakeTimeout: e.cfg.PeerTimeout,
		}}
	}
	if e.testPeerClient != nil {
		return e.testPeerClient
	}
	if e.cfg.PeerClientTLS != nil || key == "" {
		if e.httpClient == nil {
			e.httpClient = newClient(e.cfg.PeerClientTLS)
		}
		return e.httpClient
	}
	if e.pinClient == nil || e.pinKey != key {
		// A new leadership, a new key: connections checked against the
		// old key must not be reused.
		if e.pinClient != nil {
			e.pinClient.CloseIdleConnections()
		}
		e.pinClient, e.pinKey = newClient(pinnedTLS(key)), key
	}
	return e.pinClient
}

func (e *Elector) closePeerClients() {
	for _, c := range []*http.Client{e.testPeerClient, e.httpClient, e.pinClient} {
		if c != nil {
			c.CloseIdleConnections()
		}
	}
}

// peerCheck long-polls the leader once and feeds the answer to the core.
func (e *Elector) peerCheck(ctx context.Context) {
	c := e.core
	wait := e.cfg.FrequentInterval + e.cfg.FrequentInterval/2
	u := url.URL{Scheme: "https", Host: c.obs.rec.LeaderAddr, Path: e.cfg.PeerHealthPath,
		RawQuery: url.Values{"after": {c.obs.version}, "wait": {wait.String()}}.Encode()}
	rctx, cancel := context.WithTimeout(ctx, wait+e.cfg.PeerTimeout)
	defer cancel()
	// The key to check comes from the record as the store holds it: a
	// peer answer that named another would not be from this leader.
	key := c.obs.rec.PeerKey
	rec, version, err := e.askPeer(rctx, e.peerClient(key), u.String())
	now := e.clk.Now()
	if err == nil && (rec.Session != c.obs.rec.Session || rec.PeerKey != key) {
		err = fmt.Errorf("election: peer %s answered for session %q with key %q, not the leader's %q with %q",
			c.obs.rec.LeaderAddr, rec.Session, rec.PeerKey, c.obs.rec.Session, key)
	}
	if err == nil && rec.Term < c.obs.rec.Term {
		err = fmt.Errorf("election: peer %s answered with term %d, older than %d", c.obs.rec.LeaderAddr, rec.Term, c.obs.rec.Term)
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		e.log.Info("peer check failed; reading the store", "leader", c.obs.rec.LeaderAddr, "err", err)
		if errors.Is(err, errPeerNotLeading) {
			c.peerNotLeading(now)
		} else {
			c.failed(opPeer, now, now, nil)
		}
		return
	}
	c.peerAnswered(now, rec, version)
}

func (e *Elector) askPeer(ctx context.Context, client *http.Client, u string) (Record, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Record{}, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Record{}, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxRecordSize+1))
	if err != nil {
		return Record{}, "", err
	}
	version := resp.Header.Get(VersionHeader)
	rec, err := decodePeerResponse(resp.StatusCode, version, body)
	return rec, version, err
}
