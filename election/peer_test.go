package election_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/tlsutil"
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

func peerCluster(t *testing.T, clientCert bool) *cluster {
	ca, err := tlsutil.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, peerConfig(t, ca, clientCert))
	t.Cleanup(c.stopAll)
	return c
}

func addPeer(c *cluster, id string) *member {
	return c.add(id, func(cfg *election.Config) { cfg.ServerAddr = "127.0.0.1:0" })
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
	c := peerCluster(t, false)
	a := addPeer(c, "a")
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	b, d := addPeer(c, "b"), addPeer(c, "d")
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
	// The followers' view follows every renewal through the peer answers.
	if st, rec := b.e.Status(), mustRecord(t, c); st.RecordVersion == "" || st.LeaderTerm != rec.Term {
		t.Fatalf("follower view %+v, store record %+v", st, rec)
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
	// Followers would not read the store for a minute (InfrequentInterval)
	// and would wait 6 s of an unchanged version: a takeover right after
	// the release can only come from the long-poll delivering it.
	c := peerCluster(t, false)
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
}

func TestPeerModeLeaderCrashFallsBackToStore(t *testing.T) {
	c := peerCluster(t, false)
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
}

func TestPeerEndpoint(t *testing.T) {
	c := peerCluster(t, false)
	a := addPeer(c, "a")
	waitFor(t, "a leads", 10*time.Second, a.e.IsLeader)
	b := addPeer(c, "b")
	waitFor(t, "b follows", 10*time.Second, func() bool { _, _, ok := b.e.Leader(); return ok })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.base.PeerClientTLS}}
	defer client.CloseIdleConnections()
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
