package rsm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/internal/peerkey"
	"github.com/tenure-io/tenure/internal/recordkind"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// Peer authentication (docs/security.md). Every RPC between nodes is
// authenticated, in one of three modes:
//
//   - peerKeys (no certificates configured, the default): each Host makes
//     an ephemeral key and a self-signed certificate at NewHost, whose
//     common name is its node ID. Before its first RPC in a group, a node
//     publishes the key's fingerprint in its own record, {group}/peers/{id}.
//     A server requires a client certificate and accepts only a key the
//     group's record of the node that certificate names lists; a client
//     accepts only a server whose key a record lists for the address it
//     dialled. Whoever can write the store can already lead the group, so
//     this adds no trust beyond the store's.
//   - peerCA (ServerTLS and ClientTLS configured): mutual TLS; the
//     configured CA vouches for every peer.
//   - peerPlain (PlaintextLoopback): no TLS, loopback only.
//
// On top of that, a follower applies Synchronize only from the node that
// leader_state.json names as leader of the request's term, proving the key
// that record names (leaderState.LeaderKey).
type peerMode int

const (
	peerKeys peerMode = iota
	peerCA
	peerPlain
)

func (m peerMode) String() string {
	switch m {
	case peerCA:
		return "mutual TLS"
	case peerPlain:
		return "plaintext"
	default:
		return "peer keys"
	}
}

const (
	peersDir       = "peers/"
	peerRecordKind = recordkind.RSMPeer
	// maxPeerKeys bounds the keys a peer record keeps: the newest process
	// under the ID and those before it, so that an earlier process still
	// running under the same ID is recognised as a member (and reported as
	// a duplicate) rather than refused as a stranger.
	maxPeerKeys = 4
	// maxPeerRecord bounds a peer record's size: what maxPeerKeys entries
	// of the longest ID and address take, with room to spare.
	maxPeerRecord = 16 << 10
	// peerRefetch is the least time between two reads of one peer record
	// made because a key was not found in it.
	peerRefetch = 100 * time.Millisecond
	// peerReadsPerSecond bounds the peer records one host reads per second
	// on behalf of keys it does not know: strangers cannot make it read
	// the store without end.
	peerReadsPerSecond = 50
)

// peerRecord is {group}/peers/{id}: the keys of the processes that ran
// under the node ID id, newest first. Only the node itself writes it.
type peerRecord struct {
	Kind        string        `json:"kind"`
	Group       string        `json:"group"`
	ID          string        `json:"id"`
	Keys        []peerKeyInfo `json:"keys"`
	LastUpdated string        `json:"lastUpdated"` // for people only
	Nonce       string        `json:"nonce"`
}

type peerKeyInfo struct {
	Key         string `json:"key"`
	Addr        string `json:"addr"`
	Incarnation string `json:"incarnation"`
}

func peerKey(group, id string) string { return group + "/" + peersDir + id }

// decodePeerRecord decodes the record read at {group}/peers/{id}.
func decodePeerRecord(b []byte, group, id string) (peerRecord, error) {
	if err := recordkind.Check(b, peerRecordKind); err != nil {
		return peerRecord{}, err
	}
	var r peerRecord
	if err := json.Unmarshal(b, &r); err != nil {
		if d := recordkind.Describe(b); d != "" {
			return peerRecord{}, fmt.Errorf("peer record does not decode (%s): %w", d, err)
		}
		return peerRecord{}, fmt.Errorf("peer record does not decode: %w", err)
	}
	switch {
	case r.Kind != peerRecordKind:
		return peerRecord{}, fmt.Errorf("record of kind %q, not a peer record (%q)", r.Kind, peerRecordKind)
	case r.Group != group || r.ID != id:
		return peerRecord{}, fmt.Errorf("peer record of node %q in group %q, stored as node %q of group %q", r.ID, r.Group, id, group)
	case len(r.Keys) == 0 || len(r.Keys) > maxPeerKeys:
		return peerRecord{}, fmt.Errorf("peer record holds %d keys, want 1 to %d", len(r.Keys), maxPeerKeys)
	case r.Nonce == "":
		return peerRecord{}, errors.New("peer record has no nonce")
	}
	for _, k := range r.Keys {
		if !strings.HasPrefix(k.Key, "sha256:") || k.Addr == "" {
			return peerRecord{}, fmt.Errorf("peer record holds key %q at address %q: want a sha256: fingerprint and an address", k.Key, k.Addr)
		}
	}
	return r, nil
}

// lists reports whether r lists key, at addr unless addr is "".
func (r peerRecord) lists(key, addr string) bool {
	return slices.ContainsFunc(r.Keys, func(k peerKeyInfo) bool { return k.Key == key && (addr == "" || k.Addr == addr) })
}

// withKey is r with k first, and no more than maxPeerKeys keys; false if r
// lists k first already.
func (r peerRecord) withKey(k peerKeyInfo) (peerRecord, bool) {
	if len(r.Keys) > 0 && r.Keys[0] == k {
		return r, false
	}
	keys := []peerKeyInfo{k}
	for _, o := range r.Keys {
		if o.Key != k.Key && len(keys) < maxPeerKeys {
			keys = append(keys, o)
		}
	}
	r.Keys = keys
	return r, true
}

// peerTrust caches the peer records a host has read, per group and node.
type peerTrust struct {
	mu      sync.Mutex
	recs    map[string]peerRecord // by store key
	fetched map[string]time.Time  // by store key: the last read
	second  time.Time             // the start of the current rate window
	reads   int                   // reads in it
}

func (t *peerTrust) has(group, id, key, addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.recs[peerKey(group, id)]
	return ok && r.lists(key, addr)
}

// hasAny reports whether a record of node id read in any group lists key
// at addr.
func (t *peerTrust) hasAny(id, key, addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.recs {
		if r.ID == id && r.lists(key, addr) {
			return true
		}
	}
	return false
}

func (t *peerTrust) store(r peerRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.recs == nil {
		t.recs = map[string]peerRecord{}
	}
	t.recs[peerKey(r.Group, r.ID)] = r
}

// reserve reserves a read of the record at k: it returns how long to wait
// first (so that k is read at most once per peerRefetch), or false when a
// read of k already waits (it brings what this one would; the caller
// retries) or, for a node whose record this host has never read, when the
// host has read peerReadsPerSecond such records in the last second. A
// stranger naming IDs at random thus cannot lock out a known node that
// restarted with a new key, nor queue reads of one record without end.
func (t *peerTrust) reserve(k string, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fetched == nil {
		t.fetched = map[string]time.Time{}
	}
	last, seen := t.fetched[k]
	if seen && last.After(now) {
		return 0, false
	}
	if _, known := t.recs[k]; !known {
		if now.Sub(t.second) >= time.Second {
			t.second, t.reads = now, 0
		}
		if t.reads >= peerReadsPerSecond {
			return 0, false
		}
		t.reads++
	}
	at := now
	if seen && last.Add(peerRefetch).After(now) {
		at = last.Add(peerRefetch)
	}
	if len(t.fetched) > 10000 { // strangers naming IDs at random
		clear(t.fetched)
	}
	t.fetched[k] = at
	return at.Sub(now), true
}

// refresh reads the record of node id in gs's group, if allowed now.
func (t *peerTrust) refresh(ctx context.Context, gs *groupStore, id string) error {
	if id == "" || validID(id) != nil {
		return nil
	}
	wait, ok := t.reserve(peerKey(gs.group, id), time.Now())
	if !ok {
		return errors.New("a read of its record already waits, or too many unknown nodes in the last second; try again")
	}
	if err := sleepCtx(ctx, wait); err != nil {
		return err
	}
	r, _, err := gs.readPeerRecord(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	t.store(r)
	return nil
}

// readPeerRecord reads node id's record; store.ErrNotFound if absent.
func (g *groupStore) readPeerRecord(ctx context.Context, id string) (peerRecord, string, error) {
	var data []byte
	var version string
	key := peerKey(g.group, id)
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		data, version, e = g.st.GetLimited(ctx, key, maxPeerRecord)
		return e
	})
	if err != nil {
		if errors.Is(err, store.ErrTooLarge) {
			return peerRecord{}, "", &CorruptError{Key: key, Err: err}
		}
		return peerRecord{}, "", err
	}
	r, err := decodePeerRecord(data, g.group, id)
	if err != nil {
		return peerRecord{}, "", &CorruptError{Key: key, Err: err}
	}
	return r, version, nil
}

// publishKey writes this node's key into its peer record, first, before
// the node's first RPC in the group. A worker of run.
func (n *Node) publishKey(ctx context.Context) error {
	h := n.host
	if h.mode != peerKeys {
		return nil
	}
	me := peerKeyInfo{Key: h.key, Addr: h.cfg.Addr, Incarnation: n.incarnation}
	key := peerKey(n.group, h.cfg.ID)
	for attempt := 0; ; attempt++ {
		r, version, err := n.gs.readPeerRecord(ctx, h.cfg.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			r, version = peerRecord{Kind: peerRecordKind, Group: n.group, ID: h.cfg.ID}, ""
		case err != nil:
			return fmt.Errorf("rsm: publishing this node's peer key: %w", err)
		}
		next, changed := r.withKey(me)
		if !changed {
			h.trust.store(r)
			return nil
		}
		next.Nonce = newNonceHex()
		next.LastUpdated = time.Now().UTC().Format(time.RFC3339)
		data, _ := json.MarshalIndent(next, "", "  ")
		cond := store.IfAbsent()
		if version != "" {
			cond = store.IfMatch(version)
		}
		_, err = store.PutResolved(ctx, n.gs.st, key, data, cond, n.gs.resolve(nil, maxPeerRecord))
		if err == nil {
			h.trust.store(next)
			n.log.Debug("published the node's peer key", "key", h.key)
			return nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || attempt >= 2*n.opts.Retry.MaxAttempts {
			return fmt.Errorf("rsm: publishing this node's peer key at %s: %w", key, err)
		}
		// Another process under this ID wrote it meanwhile: read again.
	}
}

// caller is the authenticated node behind an RPC: its ID (as its
// certificate names it; "" without peer keys) and key ("" in plaintext).
type caller struct {
	id, key string
}

// authorize authenticates the caller of an RPC for group n.group and
// returns it; a caller not authenticated as a member of the group is
// refused with codes.PermissionDenied (codes.Unauthenticated without a
// client certificate).
func (h *Host) authorize(ctx context.Context, n *Node) (caller, error) {
	if h.mode == peerPlain {
		return caller{}, nil
	}
	p, _ := peer.FromContext(ctx)
	var info credentials.TLSInfo
	ok := false
	if p != nil {
		info, ok = p.AuthInfo.(credentials.TLSInfo)
	}
	if !ok || len(info.State.PeerCertificates) == 0 {
		h.m.badHandshakes.Inc()
		return caller{}, status.Errorf(codes.Unauthenticated, "%v: no client certificate (a node of a version without peer authentication? see docs/security.md)", ErrPeerUnauthenticated)
	}
	cert := info.State.PeerCertificates[0]
	c := caller{key: peerkey.Of(cert)}
	if h.mode == peerCA {
		return c, nil // the handshake verified its chain
	}
	c.id = cert.Subject.CommonName
	if err := h.member(ctx, n, c.id, c.key, ""); err != nil {
		h.m.badHandshakes.Inc()
		return caller{}, status.Error(codes.PermissionDenied, err.Error())
	}
	return c, nil
}

// member checks that the group of n lists key for node id (at addr, unless
// addr is ""), reading the node's record again if the cached one does
// not.
func (h *Host) member(ctx context.Context, n *Node, id, key, addr string) error {
	if h.trust.has(n.group, id, key, addr) {
		return nil
	}
	if err := h.trust.refresh(ctx, n.gs, id); err != nil {
		return fmt.Errorf("%w: reading the peer record of node %q: %w", ErrPeerUnauthenticated, id, err)
	}
	if h.trust.has(n.group, id, key, addr) {
		return nil
	}
	at := ""
	if addr != "" {
		at = " at " + addr
	}
	return fmt.Errorf("%w: the peer names itself node %q of group %q%s and proves key %s, which %s does not list (not a member, or a version without peer authentication: see docs/security.md)",
		ErrPeerUnauthenticated, id, n.group, at, key, peerKey(n.group, id))
}

// verifyServer is a client's check of the node it dialled at addr: its
// key must be listed for that address in a peer record this host read (of
// one of its groups).
func (h *Host) verifyServer(addr string, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the node at %s presented no certificate", ErrPeerUnauthenticated, addr)
	}
	cert := cs.PeerCertificates[0]
	id, key := cert.Subject.CommonName, peerkey.Of(cert)
	// A group this host has left still tells its followers so (Leave).
	if h.trust.hasAny(id, key, addr) {
		return nil
	}
	h.mu.Lock()
	nodes := make([]*Node, 0, len(h.groups))
	for _, n := range h.groups {
		nodes = append(nodes, n)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.HandshakeTimeout)
	defer cancel()
	var last error
	for _, n := range nodes {
		if last = h.member(ctx, n, id, key, addr); last == nil {
			return nil
		}
	}
	if last == nil {
		last = fmt.Errorf("%w: the node at %s (%q) proves key %s, and this host is in no group", ErrPeerUnauthenticated, addr, id, key)
	}
	return last
}

// serverCreds is the server side of the peer transport.
func (h *Host) serverCreds() credentials.TransportCredentials {
	switch h.mode {
	case peerCA:
		return credentials.NewTLS(h.cfg.ServerTLS)
	case peerKeys:
		return credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{h.ident},
			// Any certificate: the key it proves is checked per group
			// and RPC (authorize); the handshake proves possession.
			ClientAuth: tls.RequireAnyClientCert,
		})
	}
	return nil
}

// clientCreds is the client side of the peer transport to addr.
func (h *Host) clientCreds(addr string) credentials.TransportCredentials {
	switch h.mode {
	case peerCA:
		return credentials.NewTLS(h.cfg.ClientTLS)
	case peerKeys:
		return credentials.NewTLS(&tls.Config{
			MinVersion:         tls.VersionTLS13,
			Certificates:       []tls.Certificate{h.ident},
			InsecureSkipVerify: true, // replaced by verifyServer: no CA, a published key
			VerifyConnection:   func(cs tls.ConnectionState) error { return h.verifyServer(addr, cs) },
		})
	}
	return nil
}

// isLoopback reports whether addr (host:port) is on the loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validID is HostConfig.Validate's rule for node IDs.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || len(id) > 200 {
		return fmt.Errorf("ID %q must be 1 to 200 bytes without '/' or NUL", id)
	}
	return nil
}

// authorizeAs is authorize for an RPC whose request names its sender as
// node id: with peer keys, the key must be that node's.
func (h *Host) authorizeAs(ctx context.Context, n *Node, id string) (caller, error) {
	c, err := h.authorize(ctx, n)
	if err != nil {
		return caller{}, err
	}
	if h.mode == peerKeys && c.id != id {
		h.m.badHandshakes.Inc()
		return caller{}, status.Errorf(codes.PermissionDenied, "%v: the request names node %q, the caller's key is node %q's", ErrPeerUnauthenticated, id, c.id)
	}
	return c, nil
}

// checkServer checks, after a handshake for group, that the node at addr
// is a member of that group (the TLS handshake checked that it is a
// member of one of this host's groups).
func (h *Host) checkServer(ctx context.Context, group, addr string, p *peer.Peer) error {
	if h.mode != peerKeys {
		return nil
	}
	n := h.node(group)
	if n == nil {
		return nil // a node probing for its own group's peers has left it
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the node at %s presented no certificate", ErrPeerUnauthenticated, addr)
	}
	cert := info.State.PeerCertificates[0]
	return h.member(ctx, n, cert.Subject.CommonName, peerkey.Of(cert), addr)
}

// namedLeader is the leader of the highest term seen in leader_state.json.
type namedLeader struct {
	mu     sync.Mutex
	ls     leaderState // Term, LeaderID and LeaderKey only
	reread time.Time   // the last read made for a Synchronize
}

func (m *namedLeader) note(ls leaderState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ls.Term > m.ls.Term {
		m.ls = leaderState{Term: ls.Term, LeaderID: ls.LeaderID, LeaderKey: ls.LeaderKey}
	}
}

func (m *namedLeader) get() leaderState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ls
}

// reserveReread reserves a read of leader_state.json for a Synchronize
// and returns how long to wait first: at most one per syncReread.
func (m *namedLeader) reserveReread(now time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := now
	if next := m.reread.Add(syncReread); !m.reread.IsZero() && next.After(now) {
		at = next
	}
	m.reread = at
	return at.Sub(now)
}

// syncReread is the least time between two reads of leader_state.json
// made because a Synchronize named a leader the node had not seen there.
const syncReread = 50 * time.Millisecond

// sentByLeader reports whether a Synchronize req from c comes from the
// leader ls names for its term: the same term and leader, proving the key
// ls names. In mutual TLS a record without a key (the leader's client
// certificate is chosen per connection) is taken on the CA's word; in
// plaintext nothing is proven.
func sentByLeader(mode peerMode, ls leaderState, req leaderState, c caller) bool {
	if ls.Term != req.Term || ls.LeaderID != req.LeaderID {
		return false
	}
	switch mode {
	case peerKeys:
		return ls.LeaderKey != "" && ls.LeaderKey == c.key && c.id == req.LeaderID
	case peerCA:
		return ls.LeaderKey == "" || ls.LeaderKey == c.key
	}
	return true
}

// fromLeader checks that req comes from the leader leader_state.json
// names for req's term, reading it again when the node has not seen that
// leader there: an RPC's word alone never makes a leader.
func (n *Node) fromLeader(ctx context.Context, req *rsmpb.SynchronizeRequest, c caller) error {
	want := leaderState{Term: req.Term, LeaderID: req.LeaderId}
	mode := n.host.mode
	if sentByLeader(mode, n.gs.named.get(), want, c) {
		return nil
	}
	if err := sleepCtx(ctx, n.gs.named.reserveReread(time.Now())); err != nil {
		return err
	}
	if _, _, err := n.gs.readLeaderState(ctx); err != nil {
		return fmt.Errorf("%w: reading leader_state.json to check a Synchronize from %q of term %d: %w", ErrPeerUnauthenticated, req.LeaderId, req.Term, err)
	}
	got := n.gs.named.get()
	if sentByLeader(mode, got, want, c) {
		return nil
	}
	return fmt.Errorf("%w: a Synchronize from %q (key %s) for term %d, but leader_state.json names %q (key %s) leader of term %d",
		ErrPeerUnauthenticated, req.LeaderId, c.key, req.Term, got.LeaderID, got.LeaderKey, got.Term)
}
