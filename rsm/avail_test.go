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
