package rsm_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-io/tenure/internal/peerkey"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// peerPair starts a leader a and a follower b of group g with a few
// commands applied on both, at the defaults' peer authentication.
func peerPair(t *testing.T) (st *store.Store, ha, hb *rsm.Host, a, b *rsm.Node, cb *counter) {
	t.Helper()
	st = store.New(memstore.New())
	opts := peerOptions()
	ha, hb = startHost(t, st, "a"), startHost(t, st, "b")
	var err error
	if a, err = ha.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, opts); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, a)
	cb = &counter{}
	if b, err = hb.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": cb}, opts); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
			t.Fatal(err)
		}
	}
	waitApplied(t, b, a.Status().ApplyIndex)
	return st, ha, hb, a, b, cb
}

// peerOptions are fastOptions with a follower slow to give up on its
// leader: the tests check that the leader keeps its term.
func peerOptions() rsm.Options {
	o := fastOptions()
	o.MaxMissedHeartbeats = 60
	return o
}

func waitApplied(t *testing.T, n *rsm.Node, index uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Status().ApplyIndex < index || n.Status().Role != "FOLLOWER" {
		if time.Now().After(deadline) {
			t.Fatalf("node %s: status %+v, want a follower at index %d", n.Status().ID, n.Status(), index)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func localCount(t *testing.T, c *counter) uint64 {
	t.Helper()
	b, err := c.Query(nil)
	if err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint64(b)
}

// forgedSync is a Synchronize that would make a follower apply a made-up
// command of +1000 as committed.
func forgedSync(term, index uint64, leader string) *rsmpb.SynchronizeRequest {
	return &rsmpb.SynchronizeRequest{Group: "g", Term: term, LeaderId: leader, CommitIndex: index,
		Entries: []*rsmpb.Entry{{Index: index, Term: term, Writer: leader, Nonce: []byte("forged-nonce"),
			Commands: []*rsmpb.Command{{Client: "intruder", Seq: 1, Machine: "counter", Data: binary.BigEndian.AppendUint64(nil, 1000)}}}}}
}

// callAll makes every peer RPC over conn and returns the calls that were
// not refused.
func callAll(t *testing.T, conn *grpc.ClientConn, term, index uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c := rsmpb.NewReplicaClient(conn)
	var got []string
	if resp, err := c.Handshake(ctx, &rsmpb.HandshakeRequest{Group: "g", NodeId: "b", Addr: "127.0.0.1:1", Protocol: 2}); err == nil {
		got = append(got, "Handshake: "+resp.Status.String())
	}
	if resp, err := c.Follow(ctx, &rsmpb.FollowRequest{Group: "g", NodeId: "b", Addr: "127.0.0.1:1", Term: term}); err == nil {
		got = append(got, "Follow: "+resp.Status.String())
	}
	if resp, err := c.Synchronize(ctx, forgedSync(term+1, index, "a")); err == nil {
		got = append(got, "Synchronize: "+resp.Status.String())
	}
	if resp, err := c.Call(ctx, &rsmpb.CallRequest{Group: "g", NodeId: "b", Name: "echo", Data: []byte("forged")}); err == nil {
		got = append(got, "Call: "+resp.Status.String())
	}
	for _, typ := range []rsmpb.RequestType{rsmpb.RequestType_COMMAND, rsmpb.RequestType_READ} {
		s, err := c.Submit(ctx)
		if err != nil {
			continue
		}
		req := &rsmpb.StateRequest{Group: "g", Id: 1, Type: typ, Machine: "counter", Register: typ == rsmpb.RequestType_COMMAND, Client: "intruder#1"}
		if err := s.Send(req); err != nil {
			continue
		}
		if resp, err := s.Recv(); err == nil {
			got = append(got, "Submit "+typ.String()+": "+resp.Status.String())
		}
	}
	return got
}

// A client that reaches the peer port without a key the group's records
// list can neither change nor read state: in clear, or over TLS with a
// key of its own (even naming a member), every RPC is refused, the
// follower applies nothing and the leader keeps its term.
func TestPeerPortRefusesStrangers(t *testing.T) {
	_, _, hb, a, b, cb := peerPair(t)
	ran := make(chan []byte, 10)
	a.HandleCall("echo", func(_ context.Context, req []byte) ([]byte, error) {
		ran <- req
		return req, nil
	})
	before, count, term := b.Status().ApplyIndex, localCount(t, cb), a.Status().Term

	self, _, err := peerkey.New("b") // names a member, proves another key
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":             insecure.NewCredentials(),
		"self-signed":           credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{self}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}),
		"no client certificate": credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}),
	} {
		for _, target := range []*rsm.Node{a, b} {
			addr := target.Status().LeaderAddr
			if target == b {
				addr = hb.Addr().String()
			}
			conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			if got := callAll(t, conn, term, before+1); len(got) > 0 {
				t.Errorf("%s client to %s: answered %v, want every call refused", name, target.Status().ID, got)
			}
			_ = conn.Close()
		}
	}
	if len(ran) > 0 {
		t.Errorf("the leader's call handler ran %d times for strangers", len(ran))
	}
	if got := b.Status().ApplyIndex; got != before {
		t.Errorf("follower's apply index %d after the forged calls, was %d", got, before)
	}
	if got := localCount(t, cb); got != count {
		t.Errorf("follower's counter %d after the forged calls, was %d", got, count)
	}
	if s := a.Status(); s.Role != "LEADER" || s.Term != term {
		t.Errorf("leader after the forged calls: %+v, want still leader of term %d", s, term)
	}
	if _, err := a.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, before+1)
}

// A member of the group that is not the leader leader_state.json names
// cannot synchronize a follower (its made-up entries are not applied) nor
// depose the leader by claiming a higher term.
func TestSynchronizeOnlyFromNamedLeader(t *testing.T) {
	st, _, hb, a, b, cb := peerPair(t)
	hc := startHost(t, st, "c")
	c, err := hc.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, peerOptions())
	if err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c, a.Status().ApplyIndex)
	before, count, term := b.Status().ApplyIndex, localCount(t, cb), a.Status().Term

	for _, tc := range []struct {
		name   string
		target string
		req    *rsmpb.SynchronizeRequest
	}{
		{"same term as c", hb.Addr().String(), forgedSync(term, before+1, "c")},
		{"higher term as c", hb.Addr().String(), forgedSync(term+5, before+1, "c")},
		{"higher term to the leader", a.Status().LeaderAddr, forgedSync(term+5, before+1, "c")},
	} {
		conn, err := rsm.DialAsPeer(hc, tc.target)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rsmpb.NewReplicaClient(conn).Synchronize(ctxT(t, 5*time.Second), tc.req)
		_ = conn.Close()
		if err == nil && resp.Status == rsmpb.Status_OK {
			t.Errorf("%s: the Synchronize was taken", tc.name)
		}
	}
	// A member that names another node is refused too.
	conn, err := rsm.DialAsPeer(hc, hb.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := rsmpb.NewReplicaClient(conn).Synchronize(ctxT(t, 5*time.Second), forgedSync(term, before+1, "a")); err == nil {
		t.Errorf("c naming the leader a: answered %s, want refused", resp.Status)
	}
	if got := b.Status().ApplyIndex; got != before {
		t.Errorf("follower's apply index %d after the forged calls, was %d", got, before)
	}
	if got := localCount(t, cb); got != count {
		t.Errorf("follower's counter %d after the forged calls, was %d", got, count)
	}
	if s := a.Status(); s.Role != "LEADER" || s.Term != term {
		t.Errorf("leader after the forged calls: %+v, want still leader of term %d", s, term)
	}
	if _, err := a.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, before+1)
}

// A node restarted with a new key (and a new address) is followed again:
// the leader and the follower read its record again when its key is not
// the one they know.
func TestPeerKeyRotatesOnRestart(t *testing.T) {
	st, _, hb, a, _, _ := peerPair(t)
	if err := hb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	hb2 := startHost(t, st, "b")
	b2, err := hb2.Join(t.Context(), "g", map[string]rsm.StateMachine{"counter": &counter{}}, peerOptions())
	if err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b2, a.Status().ApplyIndex)
	if _, err := b2.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatalf("a command through the restarted follower: %v", err)
	}
}

func TestHostConfigPeerRules(t *testing.T) {
	st := store.New(memstore.New())
	for _, tc := range []struct {
		name string
		cfg  rsm.HostConfig
		want string
	}{
		{"plaintext off loopback", rsm.HostConfig{ID: "a", Addr: "10.1.2.3:7000", PlaintextLoopback: true}, "PlaintextLoopback needs a loopback Addr"},
		{"plaintext with TLS", rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7000", PlaintextLoopback: true, ServerTLS: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}, ClientTLS: &tls.Config{Certificates: []tls.Certificate{{}}}}, "PlaintextLoopback excludes"},
		{"server TLS without client certificates", rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7000", ServerTLS: &tls.Config{}, ClientTLS: &tls.Config{Certificates: []tls.Certificate{{}}}}, "ServerTLS.ClientAuth"},
		{"client TLS without a certificate", rsm.HostConfig{ID: "a", Addr: "127.0.0.1:7000", ServerTLS: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}, ClientTLS: &tls.Config{}}, "ClientTLS presents no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error with %q", err, tc.want)
			}
			if _, err := rsm.NewHost(t.Context(), st, tc.cfg); err == nil {
				t.Fatal("NewHost accepted it")
			}
		})
	}
}

// Authorisation is per group: a member of one group of a host is a
// stranger to the host's other groups.
func TestPeerAuthorisedPerGroup(t *testing.T) {
	st := store.New(memstore.New())
	opts := peerOptions()
	hx, hy := startHost(t, st, "x"), startHost(t, st, "y")
	join := func(h *rsm.Host, group string) *rsm.Node {
		n, err := h.Join(t.Context(), group, map[string]rsm.StateMachine{"counter": &counter{}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	y1 := join(hy, "g1")
	y2 := join(hy, "g2")
	waitLeader(t, y1)
	waitLeader(t, y2)
	x1 := join(hx, "g1")
	waitApplied(t, x1, 1)
	if _, err := y2.Command(ctxT(t, 5*time.Second), "counter", nil); err != nil {
		t.Fatal(err)
	}
	before, term := y2.Status().ApplyIndex, y2.Status().Term

	conn, err := rsm.DialAsPeer(hx, hy.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rsmpb.NewReplicaClient(conn)
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.Handshake(ctx, &rsmpb.HandshakeRequest{Group: "g1", NodeId: "x", Addr: hx.Addr().String(), Protocol: 2}); err != nil {
		t.Fatalf("x's handshake for its own group g1: %v", err)
	}
	if resp, err := c.Handshake(ctx, &rsmpb.HandshakeRequest{Group: "g2", NodeId: "x", Addr: hx.Addr().String(), Protocol: 2}); err == nil {
		t.Errorf("x's handshake for g2, of which it is no member: answered %s, want refused", resp.Status)
	}
	if resp, err := c.Follow(ctx, &rsmpb.FollowRequest{Group: "g2", NodeId: "x", Addr: hx.Addr().String(), Term: term}); err == nil {
		t.Errorf("x's Follow of g2: answered %s, want refused", resp.Status)
	}
	y2.HandleCall("echo", func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
	if resp, err := c.Call(ctx, &rsmpb.CallRequest{Group: "g2", NodeId: "x", Name: "echo"}); err == nil {
		t.Errorf("x's call to g2's leader: answered %s, want refused", resp.Status)
	}
	if resp, err := c.Call(ctx, &rsmpb.CallRequest{Group: "g1", NodeId: "y", Name: "echo"}); err == nil {
		t.Errorf("x's call naming itself y: answered %s, want refused", resp.Status)
	}
	s, err := c.Submit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&rsmpb.StateRequest{Group: "g2", Id: 1, Type: rsmpb.RequestType_READ, Machine: "counter"}); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.Recv(); err == nil {
		t.Errorf("x's read of g2: answered %s, want refused", resp.Status)
	}
	if got := y2.Status(); got.ApplyIndex != before || len(got.Followers) != 0 {
		t.Errorf("g2 after x's calls: %+v, want index %d and no followers", got, before)
	}
}
