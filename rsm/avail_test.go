package rsm

import (
	"testing"
	"time"
)

// TestWindowUnreachable: a follower is dropped only while another is
// reached; a leader that reaches none drops none (it may be the one cut
// off).
func TestWindowUnreachable(t *testing.T) {
	w := newWindow(1, Options{}.withDefaults())
	t0 := time.Unix(1000, 0)
	for _, id := range []string{"a", "b", "c"} {
		w.register(followerInfo{ID: id})
		w.heard(id, t0)
	}
	bound := time.Second
	if got := w.unreachable(t0.Add(bound/2), bound); got != "" {
		t.Fatalf("every follower heard within the bound: dropped %q", got)
	}
	w.heard("a", t0.Add(bound))
	if got := w.unreachable(t0.Add(bound+bound/2), bound); got != "b" {
		t.Fatalf("b and c silent, a heard: dropped %q, want b (the lowest ID first)", got)
	}
	if !w.unregister("b") || w.unregister("b") {
		t.Fatal("unregister must report b registered once")
	}
	if got := w.unreachable(t0.Add(bound+bound/2), bound); got != "c" {
		t.Fatalf("c silent, a heard: dropped %q, want c", got)
	}
	if got := w.unreachable(t0.Add(5*bound), bound); got != "" {
		t.Fatalf("no follower heard: the leader may be the one cut off, yet it dropped %q", got)
	}
}

// TestCutOffSign: when leader_state.json shows a node that cannot reach
// its leader that it is the one cut off (docs/rsm.md, "Availability").
func TestCutOffSign(t *testing.T) {
	ls := func(term uint64, leader string, followers ...string) leaderState {
		s := leaderState{Term: term, LeaderID: leader}
		for _, f := range followers {
			s.Followers = append(s.Followers, followerInfo{ID: f})
		}
		return s
	}
	for _, c := range []struct {
		name            string
		ls              leaderState
		listed, reached uint64
		want            int
	}{
		{"listed by the leader it lost", ls(5, "l", "me", "b"), 5, 5, signNone},
		{"dropped by the leader of a term that listed it", ls(5, "l", "b"), 5, 5, signDropped},
		{"a term that never listed it, which it heard", ls(5, "l", "b"), 4, 5, signNone},
		{"a newer leader reached by others", ls(6, "a", "b"), 4, 5, signNewer},
		{"a newer leader reached by none yet", ls(6, "a"), 4, 5, signNone},
		{"a newer leader listing it", ls(6, "a", "b", "me"), 4, 5, signNone},
		{"just started: may be the last alive", ls(6, "a", "b"), 0, 0, signNone},
		{"the record names it", ls(6, "me", "b"), 0, 5, signNone},
	} {
		if got := cutOffSign(c.ls, "me", c.listed, c.reached); got != c.want {
			t.Errorf("%s: sign %d, want %d", c.name, got, c.want)
		}
	}
}
