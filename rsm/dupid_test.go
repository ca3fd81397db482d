package rsm_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
)

// Two processes started with one node ID would take leadership from each
// other without end (each reads leader_state.json naming its ID and takes
// a new term over it). The one that sees the record change under its ID
// with another incarnation reports it and stops competing while the other
// lives; a restart (the old incarnation is gone) is not reported.

const dupMessage = "another process uses this node's ID"

type lsRecord struct {
	Term        uint64 `json:"term"`
	LeaderID    string `json:"leaderID"`
	Incarnation string `json:"incarnation"`
}

func readRecord(t *testing.T, st *store.Store) lsRecord {
	t.Helper()
	var r lsRecord
	if err := json.Unmarshal(getRaw(t, st, leaderStateKeyOf), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *logRecorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Count(r.b.String(), s)
}

func TestDuplicateNodeID(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	first := startCorruptHost(t, mem, "a")
	n1 := first.join(t, opts)
	waitLeader(t, n1)
	command(t, n1, 1)
	before := readRecord(t, st)
	if before.Incarnation == "" || before.LeaderID != "a" {
		t.Fatalf("leader_state.json %+v: want leader a with its incarnation", before)
	}

	// A second process with the same ID: it takes over (it cannot tell
	// the record from its own previous process's), and the first, deposed,
	// sees its ID written by another incarnation.
	second := startCorruptHost(t, mem, "a")
	n2 := second.join(t, opts)
	var p string
	poll(t, "the first process reports the duplicate", func() bool {
		p = n1.Status().Problem
		return p != ""
	})
	if !strings.Contains(p, "another process uses node ID") {
		t.Fatalf("problem %q does not name the duplicate ID", p)
	}
	if g := first.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 1 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v, want 1", g)
	}
	_, err := n1.Command(ctxT(t, 60*time.Second), "counter", nil)
	var dup *rsm.DuplicateIDError
	if !errors.Is(err, rsm.ErrDuplicateID) || !errors.As(err, &dup) || dup.ID != "a" {
		t.Fatalf("command on the refusing process: %v; want a *DuplicateIDError", err)
	}
	waitLeader(t, n2)
	command(t, n2, 2)
	settled := readRecord(t, st)

	// The first keeps checking and keeps refusing: the terms stop
	// climbing and the report is logged once.
	refusals := first.log.count("join attempt failed")
	poll(t, "five more refusals", func() bool { return first.log.count("join attempt failed") >= refusals+5 })
	command(t, n2, 3)
	if got := readRecord(t, st); got != settled {
		t.Fatalf("leader_state.json went from %+v to %+v while the duplicate was refused: the two still compete", settled, got)
	}
	if s := n1.Status(); s.Role == "LEADER" || s.State == "JOINED" {
		t.Fatalf("the refusing process serves: %+v", s)
	}
	if got := first.log.count(dupMessage); got != 1 {
		t.Fatalf("the duplicate was logged %d times, want once", got)
	}
	if !first.log.contains("level=ERROR") {
		t.Fatal("the duplicate was not logged at ERROR")
	}
	if second.log.contains(dupMessage) {
		t.Fatal("the process holding the record reported a duplicate")
	}

	// The second process stops: the first is no longer refused, takes
	// over and serves, with every command committed so far.
	if err := second.h.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, "the first process leads again", func() bool {
		s := n1.Status()
		return s.Role == "LEADER" && s.State == "JOINED" && s.Problem == ""
	})
	if g := first.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 0 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v after the other stopped, want 0", g)
	}
	command(t, n1, 4)
}

// A restart takes over the record its previous process wrote, with a new
// incarnation, and reports nothing.
func TestRestartIsNotADuplicate(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	old := startCorruptHost(t, mem, "a")
	n := old.join(t, opts)
	waitLeader(t, n)
	command(t, n, 1)
	before := readRecord(t, st)
	if err := old.h.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // twice: a restart of a restart
		h := startCorruptHost(t, mem, "a")
		n = h.join(t, opts)
		poll(t, "the restarted process leads", func() bool {
			s := n.Status()
			if s.Problem != "" {
				t.Fatalf("restart %d reports %q", i, s.Problem)
			}
			return s.Role == "LEADER" && s.State == "JOINED"
		})
		command(t, n, uint64(i+2))
		after := readRecord(t, st)
		if after.Incarnation == before.Incarnation || after.Term <= before.Term {
			t.Fatalf("leader_state.json %+v after the restart, %+v before: want a new term and incarnation", after, before)
		}
		if h.log.contains(dupMessage) || n.Status().Problem != "" {
			t.Fatalf("restart %d reported as a duplicate", i)
		}
		before = after
		if err := h.h.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
