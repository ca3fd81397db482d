package election_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
)

// Peer mode runs over real HTTPS on loopback, so these tests use real time
// with short timings. Their assertions are about what happened (who led,
// which store calls were made), never about how fast.

func peerConfig(t *testing.T, ca *tlsutil.CA, clientCert bool) election.Config {
	t.Helper()
	srv, err := ca.ServerConfig(clientCert, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.ClientConfig(clientCert)
	if err != nil {
		t.Fatal(err)
	}
	return election.Config{
		FrequentInterval:   500 * time.Millisecond,
		InfrequentInterval: time.Minute, // only peer answers can keep followers current
		LeaderTimeout:      6 * time.Second,
		RenewDeadline:      4 * time.Second,
		RetrySchedule:      []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond},
		PeerTimeout:        500 * time.Millisecond,
		PeerMode:           true,
		PeerServerTLS:      srv,
		PeerClientTLS:      cli,
	}
}

// zeroConfig is peer mode as users get it: an address and nothing else.
func zeroConfig() election.Config {
	return election.Config{
		FrequentInterval:   500 * time.Millisecond,
		InfrequentInterval: time.Minute,
		LeaderTimeout:      6 * time.Second,
		RenewDeadline:      4 * time.Second,
		RetrySchedule:      []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond},
		PeerTimeout:        500 * time.Millisecond,
	}
}

func peerCluster(t *testing.T, clientCert bool) *cluster {
	ca, err := tlsutil.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, peerConfig(t, ca, clientCert))
	t.Cleanup(c.stopAll)
	return c
}

// peerSetups are the ways to run peer mode: certificates from a CA, and
// an address alone (ephemeral keys, pinned through the lock record).
var peerSetups = []struct {
	name  string
	start func(t *testing.T) *cluster
}{
	{"configured TLS", func(t *testing.T) *cluster { return peerCluster(t, false) }},
	{"address only", func(t *testing.T) *cluster {
		c := newCluster(t, zeroConfig())
		t.Cleanup(c.stopAll)
		return c
	}},
}

func addPeer(c *cluster, id string) *member {
	return c.add(id, func(cfg *election.Config) { cfg.ServerAddr, cfg.PeerDisabled = "127.0.0.1:0", false })
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", limit, what)
}

func TestPeerModeStableFollowersDoNotReadTheStore(t *testing.T) {
	// A follower reads the store when a peer request fails, as it must;
	// here every peer answers, so the bound on a request is set well
	// above what a loaded test machine takes for a TLS handshake or an
	// answer (a 500 ms bound was passed once under -race on two cores).
	patient := func(c *cluster, id string) *member {
		return c.add(id, func(cfg *election.Config) {
			cfg.ServerAddr, cfg.PeerDisabled = "127.0.0.1:0", false
			cfg.PeerTimeout = 2 * time.Second
		})
	}
	for _, setup := range peerSetups {
		t.Run(setup.name, func(t *testing.T) {
			c := setup.start(t)
			a := patient(c, "a")
			waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
			b, d := patient(c, "b"), patient(c, "d")
			waitFor(t, "followers in peer mode", 10*time.Second, func() bool {
				return b.e.Status().Mode == "peer" && d.e.Status().Mode == "peer"
			})
			b.fs.Reset()
			d.fs.Reset()
			a.fs.Reset()
			time.Sleep(3 * time.Second)
			if n := b.fs.Counts().Total() + d.fs.Counts().Total(); n != 0 {
				t.Fatalf("stable followers in peer mode made %d store requests: %v %v", n, b.fs.Counts(), d.fs.Counts())
			}
			if n := a.fs.Counts().Get(faultstore.OpPutCAS, faultstore.OK); n < 3 {
				t.Fatalf("the leader renewed only %d times in 3 s at a 500 ms interval", n)
			}
			// The record names the key the leader's server presents.
			if rec := mustRecord(t, c); rec.PeerKey == "" || rec.PeerKey != servedKey(t, a) {
				t.Fatalf("record names peer key %q; the leader serves %q", rec.PeerKey, servedKey(t, a))
			}
			// The followers' view follows every renewal through the peer answers.
			if st, rec := b.e.Status(), mustRecord(t, c); st.RecordVersion == "" || st.LeaderTerm != rec.Term {
				t.Fatalf("follower view %+v, store record %+v", st, rec)
			}
		})
	}
}

func mustRecord(t *testing.T, c *cluster) election.Record {
	t.Helper()
	rec, ok := c.lockRecord()
	if !ok {
		t.Fatal("no lock record")
	}
	return rec
}

func TestPeerModeHandoverWithoutPolling(t *testing.T) {
	for _, setup := range peerSetups {
		t.Run(setup.name, func(t *testing.T) {
			// Followers would not read the store for a minute (InfrequentInterval)
			// and would wait 6 s of an unchanged version: a takeover right after
			// the release can only come from the long-poll delivering it.
			c := setup.start(t)
			a := addPeer(c, "a")
			waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
			b := addPeer(c, "b")
			waitFor(t, "b in peer mode", 10*time.Second, func() bool { return b.e.Status().Mode == "peer" })
			b.fs.Reset()
			a.stop(t)
			waitFor(t, "b leads", 2*time.Second, b.e.IsLeader)
			cs := b.fs.Counts()
			if cs.OpTotal(faultstore.OpGet) != 0 || cs.Get(faultstore.OpPutCAS, faultstore.OK) < 1 {
				t.Fatalf("b took over with store calls %v; want a swap straight from the peer's release", cs)
			}
			if b.e.Term() != 2 {
				t.Fatalf("term %d", b.e.Term())
			}
			c.checkOverlap()
		})
	}
}

func TestPeerModeLeaderCrashFallsBackToStore(t *testing.T) {
	for _, setup := range peerSetups {
		t.Run(setup.name, func(t *testing.T) {
			c := setup.start(t)
			a := addPeer(c, "a")
			waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
			b := addPeer(c, "b")
			waitFor(t, "b in peer mode", 10*time.Second, func() bool { return b.e.Status().Mode == "peer" })
			a.crash(t) // cannot release; its peer server goes away
			waitFor(t, "b leads", 20*time.Second, b.e.IsLeader)
			if b.fs.Counts().OpTotal(faultstore.OpGet) == 0 {
				t.Fatal("b took over without reading the store")
			}
			c.checkOverlap()
		})
	}
}

func TestPeerEndpoint(t *testing.T) {
	c := peerCluster(t, false)
	a := addPeer(c, "a")
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	b := addPeer(c, "b")
	waitFor(t, "b follows", 10*time.Second, func() bool { _, _, ok := b.e.Leader(); return ok })
	// A connection per request: the server may close an idle one just as
	// the next request is written on it (a reset, not the endpoint's answer).
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.base.PeerClientTLS, DisableKeepAlives: true}}
	get := func(m *member, query string) (int, http.Header, string) {
		t.Helper()
		addr := m.e.Status().ServerAddr
		resp, err := client.Get("https://" + addr + election.DefaultPeerHealthPath + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}

	code, hdr, body := get(a, "")
	rec := mustRecord(t, c)
	var served election.Record
	if err := json.Unmarshal([]byte(body), &served); err != nil || code != 200 {
		t.Fatalf("leader answered %d %q", code, body)
	}
	if served.LeaderID != "a" || served.Term != rec.Term || hdr.Get(election.VersionHeader) == "" {
		t.Fatalf("served %+v (version %q); store has %+v", served, hdr.Get(election.VersionHeader), rec)
	}
	// A long-poll after the current version returns with the next renewal.
	v := hdr.Get(election.VersionHeader)
	code, hdr, _ = get(a, "?wait=5s&after="+v)
	if code != 200 || hdr.Get(election.VersionHeader) == v {
		t.Fatalf("long-poll answered %d with version %q (asked after %q)", code, hdr.Get(election.VersionHeader), v)
	}
	if code, _, _ := get(a, "?wait=bogus"); code != http.StatusBadRequest {
		t.Fatalf("bad wait answered %d", code)
	}
	// A follower is not the leader.
	if code, _, _ := get(b, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("follower answered %d; want 503", code)
	}
	// Zombie: cut off from the store, the leader answers 503 once its
	// deadline has passed, though it has not learned of any successor.
	a.fs.SetPartition(faultstore.BlackHoled)
	waitFor(t, "a to fence itself", 10*time.Second, func() bool { return !a.e.IsLeader() })
	if code, _, body := get(a, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a leader past its deadline answered %d %s; want 503", code, body)
	}
}

func TestPeerClientCertificatesRequired(t *testing.T) {
	// The leader requires client certificates; a follower without one
	// cannot use the peer endpoint and falls back to reading the store.
	ca, err := tlsutil.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := peerConfig(t, ca, true)
	c := newCluster(t, cfg)
	t.Cleanup(c.stopAll)
	a := addPeer(c, "a")
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	noCert, _ := ca.ClientConfig(false)
	b := c.add("b", func(cfg *election.Config) {
		cfg.ServerAddr = "127.0.0.1:0"
		cfg.PeerClientTLS = noCert
	})
	time.Sleep(2 * time.Second)
	if b.e.Status().Mode == "peer" && b.fs.Counts().OpTotal(faultstore.OpGet) < 3 {
		t.Fatalf("a follower without a client certificate kept using the peer: %v", b.fs.Counts())
	}
	withCert := c.add("d", func(cfg *election.Config) { cfg.ServerAddr = "127.0.0.1:0" })
	waitFor(t, "d in peer mode", 10*time.Second, func() bool { return withCert.e.Status().Mode == "peer" })
	if !a.e.IsLeader() {
		t.Fatal("a lost the lead")
	}
}

func TestPeerHandlerOnOwnServer(t *testing.T) {
	// PeerHandler serves the endpoint on a server the application owns.
	c := newCluster(t, election.Config{})
	t.Cleanup(c.stopAll)
	a := c.add("a", nil)
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	srv := httptest.NewTLSServer(a.e.PeerHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	rec, err := election.DecodeRecord(body)
	if resp.StatusCode != 200 || err != nil || rec.LeaderID != "a" || resp.Header.Get(election.VersionHeader) == "" {
		t.Fatalf("answered %d %q (%v)", resp.StatusCode, body, err)
	}
	resp2, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %d", resp2.StatusCode)
	}
}

// servedKey is the fingerprint of the key m's peer server presents.
func servedKey(t *testing.T, m *member) string {
	t.Helper()
	conn, err := tls.Dial("tcp", m.e.Status().ServerAddr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("dialling %s's peer server: %v", m.id, err)
	}
	defer conn.Close()
	return election.PeerKeyOf(conn.ConnectionState().PeerCertificates[0])
}

func TestPeerKeyIsNewForEachLeadership(t *testing.T) {
	c := newCluster(t, zeroConfig())
	t.Cleanup(c.stopAll)
	seen := map[string]string{}
	lead := func(m *member) {
		t.Helper()
		waitFor(t, m.id+" leads", 20*time.Second, m.e.IsLeader)
		rec := mustRecord(t, c)
		if !strings.HasPrefix(rec.PeerKey, "sha256:") || rec.PeerKey != servedKey(t, m) {
			t.Fatalf("%s leads with peer key %q in the record; its server presents %q", m.id, rec.PeerKey, servedKey(t, m))
		}
		if prev, ok := seen[rec.PeerKey]; ok {
			t.Fatalf("%s (session %s) leads with the key of %s", m.id, rec.Session, prev)
		}
		seen[rec.PeerKey] = m.id + "/" + rec.Session
	}
	a := addPeer(c, "a")
	lead(a)
	b := addPeer(c, "b")
	waitFor(t, "b in peer mode", 10*time.Second, func() bool { return b.e.Status().Mode == "peer" })
	a.stop(t)
	lead(b)
	// The same member started again is a new process: a new key.
	a2 := addPeer(c, "a")
	waitFor(t, "a again in peer mode", 10*time.Second, func() bool { return a2.e.Status().Mode == "peer" })
	b.stop(t)
	lead(a2)
	c.checkOverlap()
}

// fakeLeader renews a lock record naming an address and a key, as a
// leader would, from outside any elector, and answers as its peer
// endpoint would.
type fakeLeader struct {
	mu      sync.Mutex
	rec     election.Record
	version string
	// notLeading makes it answer, long-polls in flight included, as a
	// leader past its deadline does: 503.
	notLeading atomic.Bool
}

func (f *fakeLeader) current() (election.Record, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec, f.version
}

func (f *fakeLeader) run(ctx context.Context, t *testing.T, c *cluster, rec election.Record) {
	for ctx.Err() == nil {
		rec.Counter++
		rec.Nonce = rand.Text()
		_, version := f.current()
		cond := store.IfAbsent()
		if version != "" {
			cond = store.IfMatch(version)
		}
		v, err := c.raw.Put(ctx, election.DefaultLockfilePath, rec.Encode(), cond)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("fake leader's renewal: %v", err)
			}
			return
		}
		f.mu.Lock()
		f.rec, f.version = rec, v
		f.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// ServeHTTP answers as a leader's peer endpoint does, long-poll included.
func (f *fakeLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	end := time.Now().Add(wait)
	for {
		if f.notLeading.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"not the leader"}` + "\n"))
			return
		}
		rec, version := f.current()
		if version != r.URL.Query().Get("after") || time.Now().After(end) || r.Context().Err() != nil {
			w.Header().Set(election.VersionHeader, version)
			_ = json.NewEncoder(w).Encode(rec)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPeerFollowerRefusesAServerWithAnotherKey(t *testing.T) {
	// A server listens at the address the record names and answers
	// exactly as the leader would. The follower may use it only if it
	// holds the key the record names.
	for _, tc := range []struct {
		name    string
		sameKey bool
	}{{"key of the record", true}, {"another key", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, zeroConfig())
			t.Cleanup(c.stopAll)
			fake := &fakeLeader{}
			var asked atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				fake.ServeHTTP(w, r)
			}))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
			srv.StartTLS()
			defer srv.Close()
			key := election.PeerKeyOf(srv.Certificate())
			if !tc.sameKey {
				key = "sha256:" + base64.RawURLEncoding.EncodeToString([]byte(rand.Text() + rand.Text())[:32])
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				fake.run(ctx, t, c, election.Record{LeaderID: "a", LeaderAddr: srv.Listener.Addr().String(), Term: 1,
					LeaseMillis: 6000, Session: "fake-a", PeerKey: key})
			}()
			defer func() { cancel(); <-done }()
			waitFor(t, "the fake leader's first write", 5*time.Second, func() bool { _, v := fake.current(); return v != "" })

			b := addPeer(c, "b")
			waitFor(t, "b follows a", 10*time.Second, func() bool { id, _, ok := b.e.Leader(); return ok && id == "a" })
			if tc.sameKey {
				waitFor(t, "b in peer mode", 10*time.Second, func() bool { return b.e.Status().Mode == "peer" })
				b.fs.Reset()
				time.Sleep(2 * time.Second)
				if n := b.fs.Counts().OpTotal(faultstore.OpGet); n != 0 || asked.Load() == 0 {
					t.Fatalf("b asked the leader %d times and read the store %d times; want only the leader", asked.Load(), n)
				}
				return
			}
			time.Sleep(3 * time.Second)
			if n := asked.Load(); n != 0 {
				t.Fatalf("b sent %d requests to a server whose key the record does not name", n)
			}
			// Refused at the handshake, b follows through the store.
			if n := b.fs.Counts().OpTotal(faultstore.OpGet); n < 3 {
				t.Fatalf("b read the store %d times in 3 s after refusing the peer", n)
			}
			if st := b.e.Status(); st.LeaderID != "a" || b.e.IsLeader() {
				t.Fatalf("b's view: %+v", st)
			}
		})
	}
}

func TestPeerFollowerDoesNotAskALeaderWithoutKey(t *testing.T) {
	// A leader whose address is only for display (or an older version)
	// writes no key: followers in peer mode follow it through the store,
	// without ever connecting to that address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			conn.Close()
		}
	}()
	c := newCluster(t, zeroConfig())
	t.Cleanup(c.stopAll)
	a := c.add("a", func(cfg *election.Config) { cfg.ServerAddr = ln.Addr().String() }) // display only
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	if rec := mustRecord(t, c); rec.PeerKey != "" || rec.LeaderAddr != ln.Addr().String() {
		t.Fatalf("record %+v", rec)
	}
	b := addPeer(c, "b")
	waitFor(t, "b follows at the infrequent interval", 10*time.Second, func() bool { return b.e.Status().Mode == "infrequent" })
	time.Sleep(2 * time.Second)
	if st := b.e.Status(); st.Mode != "infrequent" || dialled.Load() != 0 {
		t.Fatalf("b's mode %q; it connected %d times to the address of a leader that names no key", st.Mode, dialled.Load())
	}
}

func TestPeerServerThatCannotListen(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	// Peer mode by default: the member warns and runs store-only, and its
	// record names no key, so no follower asks whoever holds the port.
	c := newCluster(t, zeroConfig())
	t.Cleanup(c.stopAll)
	a := c.add("a", func(cfg *election.Config) { cfg.ServerAddr, cfg.PeerDisabled = addr, false })
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	if rec := mustRecord(t, c); rec.PeerKey != "" || rec.LeaderAddr != addr {
		t.Fatalf("record %+v", rec)
	}
	// PeerMode set: peer mode is required, and Run says why it cannot be.
	cfg := zeroConfig()
	cfg.Store, cfg.ServerID, cfg.ServerAddr, cfg.PeerMode = c.raw, "d", addr, true
	cfg.LockfilePath = "other.json"
	cfg.Logger = quietLogger(t)
	e, err := election.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var opErr *net.OpError
	if err := e.Run(t.Context()); !errors.As(err, &opErr) {
		t.Fatalf("Run with PeerMode on a taken port returned %v; want the listen error", err)
	}
}

func TestPeerFollowerWithoutClientTLSChecksAConfiguredLeaderByKey(t *testing.T) {
	// A leader with a configured certificate names its key in the record:
	// a follower with no CA of its own checks it by that key.
	c := peerCluster(t, false)
	a := addPeer(c, "a")
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	b := c.add("b", func(cfg *election.Config) {
		cfg.ServerAddr, cfg.PeerClientTLS, cfg.PeerServerTLS, cfg.PeerMode = "127.0.0.1:0", nil, nil, false
	})
	waitFor(t, "b in peer mode", 10*time.Second, func() bool { return b.e.Status().Mode == "peer" })
	if rec := mustRecord(t, c); rec.PeerKey != servedKey(t, a) {
		t.Fatalf("record names %q; a serves %q", rec.PeerKey, servedKey(t, a))
	}
}

func TestPeerKeyPinnedAfterALeaderWithoutKey(t *testing.T) {
	// A follower in PeerMode asks a leader whose record names no key (an
	// S3lect lockfile, an older version) through the system roots. The
	// next leadership names a key: the follower must check that leader
	// by it, and so long-poll it with no store reads, whatever the
	// earlier leader's record said.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int64
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			conn.Close()
		}
	}()
	defer func() { ln.Close(); <-acceptDone }()

	c := newCluster(t, zeroConfig())
	t.Cleanup(c.stopAll)
	ctx, cancel := context.WithCancel(t.Context())
	aDone := make(chan struct{})
	fakeA := &fakeLeader{}
	go func() {
		defer close(aDone)
		fakeA.run(ctx, t, c, election.Record{LeaderID: "a", LeaderAddr: ln.Addr().String(), Term: 1,
			LeaseMillis: 6000, Session: "fake-a"})
	}()
	stopA := sync.OnceFunc(func() { cancel(); <-aDone })
	defer stopA()
	waitFor(t, "a's first write", 5*time.Second, func() bool { _, v := fakeA.current(); return v != "" })

	b := c.add("b", func(cfg *election.Config) {
		cfg.ServerAddr, cfg.PeerDisabled, cfg.PeerMode = "127.0.0.1:0", false, true
	})
	waitFor(t, "b asks a, whose record names no key", 10*time.Second, func() bool { return dialled.Load() > 0 })
	if id, _, ok := b.e.Leader(); !ok || id != "a" {
		t.Fatalf("b follows %q (%v); want a", id, ok)
	}

	// d takes over from a with a record that names its server's key.
	stopA()
	var asked atomic.Int64
	fakeD := &fakeLeader{}
	fakeD.rec, fakeD.version = fakeA.current()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		fakeD.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on today's code
	srv.StartTLS()
	defer srv.Close()
	ctxD, cancelD := context.WithCancel(t.Context())
	dDone := make(chan struct{})
	go func() {
		defer close(dDone)
		fakeD.run(ctxD, t, c, election.Record{LeaderID: "d", LeaderAddr: srv.Listener.Addr().String(), Term: 2,
			LeaseMillis: 6000, Session: "fake-d", PeerKey: election.PeerKeyOf(srv.Certificate())})
	}()
	defer func() { cancelD(); <-dDone }()

	waitFor(t, "b follows d", 10*time.Second, func() bool { id, _, ok := b.e.Leader(); return ok && id == "d" })
	waitFor(t, "b asks d", 10*time.Second, func() bool { return asked.Load() > 0 })
	// Once b long-polls d, each of d's renewals reaches b over the
	// pinned key: five of them pass with no store read.
	b.fs.Reset()
	from := asked.Load()
	waitFor(t, "five more long-poll answers from d", 10*time.Second, func() bool { return asked.Load() >= from+5 })
	if n := b.fs.Counts().Total(); n != 0 {
		t.Fatalf("b made %d store requests while d was stable (%v); want none, only long-polls over d's key", n, b.fs.Counts())
	}
	if st := b.e.Status(); st.Mode != "peer" || st.LeaderID != "d" {
		t.Fatalf("b's view %+v; want d followed in peer mode", st)
	}
}

// A follower whose leader answers that it does not lead (it lost its
// lease, or stopped, and could not release) says so in its status until
// the record changes: no one leads meanwhile, whatever the record names.
func TestPeerLeaderNotLeadingInStatus(t *testing.T) {
	fakeZ := &fakeLeader{}
	srv := httptest.NewUnstartedServer(fakeZ)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	c := newCluster(t, zeroConfig())
	t.Cleanup(c.stopAll)
	ctx, cancel := context.WithCancel(t.Context())
	zDone := make(chan struct{})
	go func() {
		defer close(zDone)
		// A lease long enough that no one takes the lock over in the test.
		fakeZ.run(ctx, t, c, election.Record{LeaderID: "z", LeaderAddr: srv.Listener.Addr().String(), Term: 1,
			LeaseMillis: 600000, Session: "fake-z", PeerKey: election.PeerKeyOf(srv.Certificate())})
	}()
	stopZ := sync.OnceFunc(func() { cancel(); <-zDone })
	defer stopZ()
	waitFor(t, "z's first write", 5*time.Second, func() bool { _, v := fakeZ.current(); return v != "" })
	b := c.add("b", func(cfg *election.Config) {
		cfg.ServerAddr, cfg.PeerDisabled, cfg.PeerMode = "127.0.0.1:0", false, true
	})
	waitFor(t, "b long-polls z", 10*time.Second, func() bool { st := b.e.Status(); return st.Mode == "peer" && st.LeaderID == "z" })
	if b.e.Status().LeaderNotLeading {
		t.Fatal("b says z does not lead while z serves")
	}

	// z stops renewing and answers that it does not lead.
	stopZ()
	fakeZ.notLeading.Store(true)
	waitFor(t, "b hears z does not lead", 10*time.Second, func() bool { return b.e.Status().LeaderNotLeading })
	if st := b.e.Status(); st.LeaderID != "z" || st.Leader {
		t.Fatalf("b's view %+v; want the record's leader z, and b not leading", st)
	}

	// b goes on reading the store, to take the lock when the lease
	// lapses.
	b.fs.Reset()
	waitFor(t, "b reads the store again", 10*time.Second, func() bool { return b.fs.Counts().Total() > 0 })
}

// Only a member's own refusal says its holder does not lead: a 503 from
// something in front of it is a failure like any other.
func TestPeerNotLeadingOnlyFromAMember(t *testing.T) {
	_, err := election.DecodePeerResponse(http.StatusServiceUnavailable, "", []byte(`{"error":"not the leader"}`+"\n"))
	if !errors.Is(err, election.ErrPeerNotLeading) {
		t.Fatalf("a member's refusal: %v; want ErrPeerNotLeading", err)
	}
	_, err = election.DecodePeerResponse(http.StatusServiceUnavailable, "", []byte("<html>503 Service Unavailable</html>"))
	if err == nil || errors.Is(err, election.ErrPeerNotLeading) {
		t.Fatalf("a proxy's 503: %v; want a plain failure", err)
	}
}
