package rsm

// Objects an operator deleted are refused, never absorbed: a node does not
// seal over a hole below what was committed, nor serve without the
// snapshot or leader_state.json the log depends on. It reports the object
// in Status, a metric and the error requests fail with at once.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// attempt makes n attempt leadership over the current leader_state.json in
// the background, as a node that missed its leader's heartbeats does.
func (n *testNode) attempt(t *testing.T) {
	t.Helper()
	ls, version, err := n.gs.readLeaderState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.lead(ls, version)
	}()
}

// waitProblem waits until n reports a problem and returns it.
func waitProblem(t *testing.T, n *testNode) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := n.Status()
		if s.Role == "LEADER" {
			t.Fatalf("%s leads: %+v", n.host.cfg.ID, s)
		}
		if s.Problem != "" {
			return s.Problem
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s reports no problem: %+v", n.host.cfg.ID, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// assertRefused checks that n names key in its status, its metric and
// the error a request fails with, and never leads.
func assertRefused(t *testing.T, n *testNode, key, kind string) {
	t.Helper()
	if p := waitProblem(t, n); !strings.Contains(p, key) {
		t.Fatalf("problem %q does not name %s", p, key)
	}
	if g := testutil.ToFloat64(n.m.refused.WithLabelValues(testGroup, kind)); g != 1 {
		t.Fatalf("refused{object=%q} = %v, want 1", kind, g)
	}
	_, err := n.command(ctxT(t, 30*time.Second))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("command on a refusing node: %v; want ErrCorrupt naming %s", err, key)
	}
	if s := n.Status(); s.Role == "LEADER" || s.State == "JOINED" {
		t.Fatalf("a refusing node serves: %+v", s)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func absent(t *testing.T, mem driver.Store, key string) bool {
	t.Helper()
	_, _, err := store.New(mem).Get(t.Context(), key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get %s: %v", key, err)
	}
	return err != nil
}

func deleteT(t *testing.T, mem driver.Store, key string) {
	t.Helper()
	if err := mem.Delete(t.Context(), key, driver.Cond{}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

func TestDeletedLogObjectIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		delete uint64
		commit uint64 // written into leader_state.json, as a membership change would
	}{
		{name: "a hole with later entries saying it was committed", delete: 5},
		{name: "the last entry, below leader_state's commit index", delete: 12, commit: 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memstore.New()
			a := newTestNode(t, mem, "a", testOptions())
			a.leadInBackground(t)
			for i := uint64(1); i <= 10; i++ {
				mustCommand(t, a, i) // seal 1, registration 2, commands 3..12
			}
			a.Node.cancel()
			a.wg.Wait()
			if tc.commit > 0 {
				ls, v, err := a.gs.readLeaderState(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				ls.CommitIndex = tc.commit
				if _, err := a.gs.writeLeaderState(t.Context(), ls, v); err != nil {
					t.Fatal(err)
				}
			}
			key := logKey(testGroup, tc.delete)
			deleteT(t, mem, key)

			b := newTestNode(t, mem, "b", testOptions())
			b.attempt(t)
			assertRefused(t, b, key, "log")
			if !absent(t, mem, key) {
				t.Fatalf("something was written at the hole %s", key)
			}
		})
	}
}

func TestMissingSnapshotIsRefused(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.SnapshotThreshold = 4
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	// Seal 1, registration 2, commands 3..7: one snapshot, at 4 (the next
	// is due at 8), so entries remain after it whatever the truncation
	// has deleted when the leader stops.
	for i := uint64(1); i <= 5; i++ {
		mustCommand(t, a, i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The log starts after 2 (its deletes run in parallel: 2 gone
		// does not mean 1 is).
		idx, err := a.gs.listLog(t.Context(), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) > 0 && idx[0] > 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no truncation")
		}
		time.Sleep(time.Millisecond)
	}
	a.Node.cancel()
	a.wg.Wait()
	snap := testGroup + "/" + snapshotKey
	deleteT(t, mem, snap)

	b := newTestNode(t, mem, "b", opts)
	b.attempt(t)
	assertRefused(t, b, snap, "snapshot")
}

func TestMissingLeaderStateIsRefused(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1)
	a.Node.cancel()
	a.wg.Wait()
	key := testGroup + "/" + leaderStateKey
	deleteT(t, mem, key)

	b := newTestNode(t, mem, "b", testOptions())
	b.start()
	assertRefused(t, b, key, "leader_state")
	if _, _, err := mem.Get(t.Context(), key); err == nil {
		t.Fatal("leader_state.json was created again over the group's log")
	}
}

// A node that restarted empty takes leadership: leader_state.json's commit
// index stays where the group had it.
func TestCommitIndexNeverDecreases(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	for i := uint64(1); i <= 5; i++ {
		mustCommand(t, a, i)
	}
	a.Node.cancel()
	a.wg.Wait()
	ls, v, err := a.gs.readLeaderState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ls.CommitIndex = 6
	if _, err := a.gs.writeLeaderState(t.Context(), ls, v); err != nil {
		t.Fatal(err)
	}
	b := newTestNode(t, mem, "b", testOptions())
	b.leadInBackground(t)
	got, _, err := b.gs.readLeaderState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.Term != 2 || got.CommitIndex < 6 {
		t.Fatalf("leader_state.json after b took over: term %d, commit index %d; want term 2, commit index at least 6", got.Term, got.CommitIndex)
	}
	mustCommand(t, b, 6)
}

// Objects copied from another group are refused, not applied.
func TestObjectOfAnotherGroupIsRefused(t *testing.T) {
	t.Run("log entry", func(t *testing.T) {
		mem := memstore.New()
		a := newTestNode(t, mem, "a", testOptions())
		a.leadInBackground(t)
		mustCommand(t, a, 1)
		mustCommand(t, a, 2) // seal 1, registration 2, commands 3, 4
		a.Node.cancel()
		a.wg.Wait()
		e := cmdEntry(5, 1, 1, 1, 1000)
		e.Group = "other"
		writeEntryT(t, mem, e)

		b := newTestNode(t, mem, "b", testOptions())
		b.attempt(t)
		key := logKey(testGroup, 5)
		assertRefused(t, b, key, "log")
		if got := b.count(t); got == 1002 {
			t.Fatal("the other group's entry was applied")
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		mem := memstore.New()
		a := newTestNode(t, mem, "a", testOptions())
		a.leadInBackground(t)
		mustCommand(t, a, 1)
		a.Node.cancel()
		a.wg.Wait()
		r, err := newReplica(map[string]StateMachine{"c": &protoCounter{}}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		r.apply(cmdEntry(1, 1, 1, 1, 1000))
		snap, err := r.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		snap.Nonce, snap.Group = record.NewNonce(), "other"
		data, err := record.EncodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		key := testGroup + "/" + snapshotKey
		if _, err := mem.Put(t.Context(), key, data, driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		b := newTestNode(t, mem, "b", testOptions())
		b.attempt(t)
		assertRefused(t, b, key, "snapshot")
	})
	t.Run("leader state", func(t *testing.T) {
		mem := memstore.New()
		a := newTestNode(t, mem, "a", testOptions())
		a.leadInBackground(t)
		mustCommand(t, a, 1)
		a.Node.cancel()
		a.wg.Wait()
		// The other group's record, with a term above ours: absorbing it
		// would lower no term, but the record is not this group's.
		key := testGroup + "/" + leaderStateKey
		_, v, err := a.gs.readLeaderState(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// It names b, the node started next: read as this group's, b would
		// take it for its own earlier record and lead over it.
		data := encodeLeaderState(leaderState{Term: 9, LeaderID: "b", LeaderAddr: "127.0.0.1:1", Group: "other"}, time.Now())
		if _, err := mem.Put(t.Context(), key, data, driver.Cond{Kind: driver.IfMatch, Version: v}); err != nil {
			t.Fatal(err)
		}
		b := newTestNode(t, mem, "b", testOptions())
		b.start()
		assertRefused(t, b, key, "leader_state")
		if got := getLS(t, mem); got.Group != "other" {
			t.Fatalf("leader_state.json was overwritten: %+v", got)
		}
	})
}

func getLS(t *testing.T, mem driver.Store) leaderState {
	t.Helper()
	b, _, err := mem.Get(t.Context(), testGroup+"/"+leaderStateKey)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := decodeLeaderState(b)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// A leader_state.json of the previous version carries no group name: it
// is accepted, and the next write adds the name.
func TestLeaderStateWithoutGroupIsAccepted(t *testing.T) {
	const previous = `{
  "term": 7,
  "leaderID": "a",
  "leaderAddr": "127.0.0.1:7000",
  "followers": [
    {
      "id": "b",
      "addr": "127.0.0.1:7001",
      "applyIndex": 11
    }
  ],
  "commitIndex": 12,
  "lastUpdated": "2025-01-02T03:04:05Z",
  "nonce": "1de178f9f83d95026a55af16",
  "counter": 4,
  "checksum": "3742c160"
}`
	mem := memstore.New()
	v, err := mem.Put(t.Context(), testGroup+"/"+leaderStateKey, []byte(previous), driver.Cond{Kind: driver.IfAbsent})
	if err != nil {
		t.Fatal(err)
	}
	gs := newGroupStore(store.New(mem), testGroup, testOptions().withDefaults().Retry, 0, snapshot.Options{})
	ls, _, err := gs.readLeaderState(t.Context())
	if err != nil {
		t.Fatalf("the previous version's leader_state.json: %v", err)
	}
	if ls.Term != 7 || ls.LeaderID != "a" || ls.Group != "" {
		t.Fatalf("read %+v", ls)
	}
	ls.Term++
	if _, err := gs.writeLeaderState(t.Context(), ls, v); err != nil {
		t.Fatal(err)
	}
	if got := getLS(t, mem); got.Group != testGroup || got.Term != 8 {
		t.Fatalf("after a write: %+v, want group %q, term 8", got, testGroup)
	}
}

// Which records name another process using this node's ID: only one
// written, under its ID and with another incarnation, at a term above
// the first record the node read (a restart reads its predecessor's
// record first).
func TestDuplicateSeenOnlyAfterStart(t *testing.T) {
	n := newTestNode(t, memstore.New(), "a", testOptions())
	n.fc.noteFirst(5)
	n.fc.noteFirst(9) // only the first read counts
	other := "0123456789abcdef"
	for _, tc := range []struct {
		name string
		ls   leaderState
		dup  bool
	}{
		{"the record found at start (a restart)", leaderState{Term: 5, LeaderID: "a", Incarnation: other}, false},
		{"written since, by another process as a", leaderState{Term: 6, LeaderID: "a", Incarnation: other}, true},
		{"written since, by this process", leaderState{Term: 6, LeaderID: "a", Incarnation: n.incarnation}, false},
		{"written since, by the previous version (no incarnation)", leaderState{Term: 6, LeaderID: "a"}, false},
		{"written since, by another node", leaderState{Term: 6, LeaderID: "b", Incarnation: other}, false},
	} {
		d := n.fc.duplicate(tc.ls)
		if (d != nil) != tc.dup {
			t.Errorf("%s: duplicate %v, want %v", tc.name, d, tc.dup)
		}
		if d != nil && (d.Incarnation != other || d.Term != 6 || !errors.Is(d, ErrDuplicateID)) {
			t.Errorf("%s: %+v does not name the other process", tc.name, d)
		}
	}
	if m := newTestNode(t, memstore.New(), "a", testOptions()); m.incarnation == n.incarnation || m.incarnation == "" {
		t.Fatalf("two nodes share incarnation %q", m.incarnation)
	}
}

// damagedStore is a store's report of its own damaged data, as file://
// gives for a pack missing a segment between others.
type damagedStore string

func (e damagedStore) Error() string        { return string(e) }
func (e damagedStore) Is(target error) bool { return target == store.ErrCorrupt }

// TestStoreCorruptIsRefused: a store error that reports the store's own
// data damaged becomes a *CorruptError naming the key, which the node
// refuses as a corrupt object; other store errors, and a *CorruptError
// already, stay as they are.
func TestStoreCorruptIsRefused(t *testing.T) {
	damaged := &store.Error{Op: "get", Key: "g/log/00000000000000000007", Kind: driver.Permanent, Err: damagedStore("pack segment 2 is missing")}
	var c *CorruptError
	if err := storeCorrupt(damaged); !errors.As(err, &c) || c.Key != damaged.Key || !errors.Is(err, ErrCorrupt) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("storeCorrupt(a damaged store's error) = %v; want a *CorruptError naming %s", err, damaged.Key)
	}
	if kind, p := problemOf("g", storeCorrupt(damaged)); kind != "log" || p == nil {
		t.Fatalf("problemOf a damaged log: %q, %v; want the log refused", kind, p)
	}
	other := &store.Error{Op: "get", Key: "g/log/00000000000000000007", Kind: driver.Permanent, Err: errors.New("access denied")}
	if err := storeCorrupt(other); err != error(other) {
		t.Fatalf("storeCorrupt(a permanent error) = %v; want it unchanged", err)
	}
	already := &CorruptError{Key: "g/leader_state.json", Err: damaged}
	if err := storeCorrupt(already); err != error(already) {
		t.Fatalf("storeCorrupt(a *CorruptError) = %v; want it unchanged", err)
	}
}
