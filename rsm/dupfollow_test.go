package rsm_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
)

// Two followers started with one node ID would replace each other in the
// leader's membership on every Follow. The leader refuses the second while
// the first answers; the refused one reports it and joins once the first
// stops. A restarted follower (its old process gone) is not refused.

const dupFollowMessage = "two processes follow under one node ID"

type membersRecord struct {
	Followers []struct {
		ID   string `json:"id"`
		Addr string `json:"addr"`
	} `json:"followers"`
}

// memberAddr is the address leader_state.json lists for follower id.
func memberAddr(t *testing.T, st *store.Store, id string) string {
	t.Helper()
	var r membersRecord
	if err := json.Unmarshal(getRaw(t, st, leaderStateKeyOf), &r); err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Followers {
		if f.ID == id {
			return f.Addr
		}
	}
	return ""
}

func joinedFollower(n *rsm.Node) bool {
	s := n.Status()
	return s.Role == "FOLLOWER" && s.State == "JOINED" && s.Problem == ""
}

func TestDuplicateFollowerID(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	lead := startCorruptHost(t, mem, "a")
	nl := lead.join(t, opts)
	waitLeader(t, nl)
	command(t, nl, 1)
	first := startCorruptHost(t, mem, "f")
	n1 := first.join(t, opts)
	poll(t, "the first process follows", func() bool { return joinedFollower(n1) })
	firstAddr := memberAddr(t, st, "f")
	if firstAddr == "" {
		t.Fatal("leader_state.json does not list the first follower")
	}

	// A second process with the same ID: the leader refuses it while the
	// first answers, and it reports the duplicate.
	second := startCorruptHost(t, mem, "f")
	n2 := second.join(t, opts)
	var p string
	poll(t, "the second process reports the duplicate", func() bool {
		p = n2.Status().Problem
		return p != ""
	})
	var dup *rsm.DuplicateIDError
	_, err := n2.Command(ctxT(t, 60*time.Second), "counter", nil)
	if !errors.Is(err, rsm.ErrDuplicateID) || !errors.As(err, &dup) || dup.ID != "f" || !dup.Follower || dup.Addr != firstAddr {
		t.Fatalf("command on the refused process: %v; want a *DuplicateIDError naming the first at %s", err, firstAddr)
	}
	if g := second.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 1 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v, want 1", g)
	}

	// It keeps asking and keeps being refused: the membership does not
	// flip (no leader_state.json write), the first keeps following, and
	// each side logs the duplicate once, at ERROR.
	writes := lead.calls.putCount(leaderStateKeyOf)
	refusals := second.log.count("join attempt failed")
	poll(t, "three more refusals", func() bool { return second.log.count("join attempt failed") >= refusals+3 })
	if got := lead.calls.putCount(leaderStateKeyOf); got != writes {
		t.Fatalf("leader_state.json written %d times while the duplicate was refused: the membership flips", got-writes)
	}
	if got := memberAddr(t, st, "f"); got != firstAddr {
		t.Fatalf("leader_state.json lists f at %s, want the first process's %s", got, firstAddr)
	}
	if !joinedFollower(n1) {
		t.Fatalf("the first process stopped following: %+v", n1.Status())
	}
	command(t, n1, 2)
	if s := n2.Status(); s.State == "JOINED" {
		t.Fatalf("the refused process serves: %+v", s)
	}
	if got := second.log.count(dupMessage); got != 1 {
		t.Fatalf("the refused process logged the duplicate %d times, want once", got)
	}
	if got := lead.log.count(dupFollowMessage); got != 1 {
		t.Fatalf("the leader logged the refusal %d times, want once", got)
	}
	if !second.log.contains("level=ERROR") || !lead.log.contains("level=ERROR") {
		t.Fatal("the duplicate was not logged at ERROR")
	}
	if first.log.contains(dupMessage) || n1.Status().Problem != "" {
		t.Fatal("the registered process reported a duplicate")
	}

	// The first stops: the second joins and serves.
	if err := first.h.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, "the second process follows", func() bool { return joinedFollower(n2) })
	if g := second.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 0 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v after the first stopped, want 0", g)
	}
	poll(t, "leader_state.json lists the second process", func() bool { return memberAddr(t, st, "f") != firstAddr })
	command(t, n2, 3)
}

// A follower restarted on a new address, its old process gone, replaces
// its registration at once and reports nothing.
func TestRestartedFollowerIsNotADuplicate(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	lead := startCorruptHost(t, mem, "a")
	nl := lead.join(t, opts)
	waitLeader(t, nl)
	command(t, nl, 1)
	old := startCorruptHost(t, mem, "f")
	n := old.join(t, opts)
	poll(t, "the follower joins", func() bool { return joinedFollower(n) })
	for i := range 2 { // twice: a restart of a restart
		was := memberAddr(t, st, "f")
		if err := old.h.Close(); err != nil {
			t.Fatal(err)
		}
		old = startCorruptHost(t, mem, "f")
		n = old.join(t, opts)
		poll(t, "the restarted follower joins", func() bool {
			if p := n.Status().Problem; p != "" {
				t.Fatalf("restart %d reports %q", i, p)
			}
			return joinedFollower(n)
		})
		if got := memberAddr(t, st, "f"); got == was || got == "" {
			t.Fatalf("leader_state.json lists f at %q after restart %d, %q before: want the new address", got, i, was)
		}
		command(t, n, uint64(i+2))
		if old.log.contains(dupMessage) || lead.log.contains(dupFollowMessage) {
			t.Fatalf("restart %d reported as a duplicate", i)
		}
	}
}
