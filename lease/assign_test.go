package lease_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenure-io/tenure/lease"
)

func shardIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%03d", i)
	}
	return out
}

func counts(a lease.Assignment) map[string]int {
	c := map[string]int{}
	for _, e := range a.Shards {
		c[e.Owner]++
	}
	return c
}

func TestBalanceFairShareAndSticky(t *testing.T) {
	shards := shardIDs(10)
	live := map[string]string{"a": "sa"}
	a, changed := lease.Balance(lease.Assignment{}, live, shards)
	if !changed || a.Epoch != 1 || counts(a)["a"] != 10 {
		t.Fatalf("one member: %+v", counts(a))
	}
	for _, e := range a.Shards {
		if e.Term != 1 || e.Session != "sa" || len(e.Waits) != 0 {
			t.Fatalf("entry %+v", e)
		}
	}
	// A second and third member join: a gives up its excess, and the moved
	// shards wait for a's release.
	live = map[string]string{"a": "sa", "b": "sb", "c": "sc"}
	b, changed := lease.Balance(a, live, shards)
	if !changed || b.Epoch != 2 {
		t.Fatal("no change after two members joined")
	}
	c := counts(b)
	if c["a"] > 4 || c["b"] > 4 || c["c"] > 4 || c["a"]+c["b"]+c["c"] != 10 {
		t.Fatalf("shares %v; want none above ceil(10/3)=4", c)
	}
	moved := 0
	for id, e := range b.Shards {
		if e.Owner == "a" {
			if e.Term != 1 || len(e.Waits) != 0 {
				t.Fatalf("a kept %s but it changed: %+v", id, e)
			}
			continue
		}
		moved++
		if e.Term != 2 || len(e.Waits) != 1 || e.Waits[0] != (lease.Holder{Owner: "a", Session: "sa", Term: 1}) {
			t.Fatalf("moved shard %s: %+v; want term 2 waiting for a", id, e)
		}
	}
	if moved != 10-c["a"] {
		t.Fatalf("%d moved", moved)
	}
	// Recomputing gives the same: nothing to write.
	if again, changed := lease.Balance(b, live, shards); changed || again.Epoch != b.Epoch {
		t.Fatal("balance is not stable")
	}
	// b dies: its shards go to the others at once (no wait), a's releases
	// are no longer needed for shards that stay.
	live = map[string]string{"a": "sa", "c": "sc"}
	d, _ := lease.Balance(b, live, shards)
	c = counts(d)
	if c["a"] != 5 || c["c"] != 5 {
		t.Fatalf("after b died: %v", c)
	}
	for id, e := range d.Shards {
		if b.Shards[id].Owner == "b" {
			for _, h := range e.Waits {
				if h.Owner == "b" {
					t.Fatalf("shard %s waits for dead b: %+v", id, e)
				}
			}
			if e.Term != b.Shards[id].Term+1 {
				t.Fatalf("shard %s term %d after %d", id, e.Term, b.Shards[id].Term)
			}
		}
	}
	// a restarts (new session): same owner, new term, no wait on itself.
	live = map[string]string{"a": "sa2", "c": "sc"}
	r, _ := lease.Balance(d, live, shards)
	for id, e := range r.Shards {
		if d.Shards[id].Owner == "a" && (e.Owner != "a" || e.Session != "sa2" || e.Term != d.Shards[id].Term+1) {
			t.Fatalf("after a restarted, shard %s: %+v (was %+v)", id, e, d.Shards[id])
		}
	}
}

func TestBalanceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cur := lease.Assignment{}
	shards := shardIDs(37)
	for round := 0; round < 500; round++ {
		live := map[string]string{}
		for i := 0; i < 6; i++ {
			if rng.IntN(3) > 0 {
				live[fmt.Sprintf("m%d", i)] = fmt.Sprintf("s%d-%d", i, rng.IntN(2))
			}
		}
		if rng.IntN(10) == 0 {
			shards = append(shards, fmt.Sprintf("x%d", round))
		}
		next, changed := lease.Balance(cur, live, shards)
		// The shortcut for an assignment that needs no change agrees
		// with computing it.
		if full, fullChanged := lease.BalanceFull(cur, live, shards); fullChanged != changed || string(full.Encode()) != string(next.Encode()) {
			t.Fatalf("round %d: balance says changed=%v; computed in full, changed=%v", round, changed, fullChanged)
		}
		// A member keeps the assignment in a compact form: it holds the
		// same record, and its shortcut agrees.
		if string(lease.ThroughTable(next).Encode()) != string(next.Encode()) || string(lease.TableEncode(next)) != string(next.Encode()) {
			t.Fatalf("round %d: the compact form changes the assignment", round)
		}
		if _, again := lease.Balance(cur, live, shards); lease.TableBalanced(cur, live, shards) == again {
			t.Fatalf("round %d: the compact form's shortcut says balanced=%v, balance changed=%v", round, !again, again)
		}
		if len(live) > 0 {
			share := (len(shards) + len(live) - 1) / len(live)
			for o, n := range counts(next) {
				if o == "" {
					t.Fatalf("round %d: %d shards unassigned with %d members", round, n, len(live))
				}
				if n > share {
					t.Fatalf("round %d: %s holds %d > share %d", round, o, n, share)
				}
			}
		}
		for id, e := range next.Shards {
			old, ok := cur.Shards[id]
			if ok && e.Term < old.Term {
				t.Fatalf("round %d: shard %s term went down", round, id)
			}
			if ok && (e.Owner != old.Owner || e.Session != old.Session) && e.Owner != "" && e.Term <= old.Term {
				t.Fatalf("round %d: shard %s changed hands without a new term", round, id)
			}
			for _, h := range e.Waits {
				if live[h.Owner] != h.Session {
					t.Fatalf("round %d: shard %s waits for a member that is not live", round, id)
				}
			}
			if ok && old.Owner != "" && live[old.Owner] == old.Session && e.Owner != old.Owner {
				if !slices.Contains(e.Waits, lease.Holder{Owner: old.Owner, Session: old.Session, Term: old.Term}) {
					t.Fatalf("round %d: shard %s moved from live %s without waiting for it", round, id, old.Owner)
				}
			}
		}
		// Deterministic.
		again, _ := lease.Balance(cur, live, shards)
		if string(again.Encode()) != string(next.Encode()) {
			t.Fatalf("round %d: balance is not deterministic", round)
		}
		cur = next
	}
}

// TestBalanceShortcut: the check that an assignment needs no change agrees
// with computing the change, case by case.
func TestBalanceShortcut(t *testing.T) {
	live := map[string]string{"a": "sa", "b": "sb"}
	fair := lease.Assignment{Epoch: 1, Shards: map[string]lease.Entry{
		"s1": {Owner: "a", Session: "sa", Term: 1}, "s2": {Owner: "a", Session: "sa", Term: 1},
		"s3": {Owner: "b", Session: "sb", Term: 1, Waits: []lease.Holder{{Owner: "a", Session: "sa", Term: 0}}},
	}}
	ids := []string{"s1", "s2", "s3"}
	with := func(id string, e lease.Entry) lease.Assignment {
		a := lease.Assignment{Epoch: 1, Shards: maps.Clone(fair.Shards)}
		a.Shards[id] = e
		return a
	}
	for _, tc := range []struct {
		name    string
		cur     lease.Assignment
		live    map[string]string
		ids     []string
		changed bool
	}{
		{"fair", fair, live, ids, false},
		{"over its share", with("s3", lease.Entry{Owner: "a", Session: "sa", Term: 1}), live, ids, true},
		{"owner gone", fair, map[string]string{"a": "sa", "c": "sc"}, ids, true},
		{"owner restarted", fair, map[string]string{"a": "sa", "b": "sb2"}, ids, true},
		{"waits for a dead session", fair, map[string]string{"a": "sa2", "b": "sb"}, ids, true},
		{"unassigned", with("s2", lease.Entry{Term: 3}), live, ids, true},
		{"a shard added", fair, live, []string{"s1", "s2", "s3", "s4"}, true},
		{"a shard removed", fair, live, []string{"s1", "s2"}, true},
		{"nobody live", fair, map[string]string{}, ids, true},
	} {
		_, changed := lease.Balance(tc.cur, tc.live, tc.ids)
		_, full := lease.BalanceFull(tc.cur, tc.live, tc.ids)
		table := !lease.TableBalanced(tc.cur, tc.live, tc.ids)
		if changed != tc.changed || full != tc.changed || table != tc.changed {
			t.Errorf("%s: balance changed=%v, in full %v, over the compact form %v; want %v", tc.name, changed, full, table, tc.changed)
		}
	}
}
