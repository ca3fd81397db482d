package rsm

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// The follower core driven by a node in virtual time: when a follower that
// lost its leader looks at the store, what it reads there, and when it
// attempts. The store answers at once, so the times are the protocol's
// waits alone: MaxMissedHeartbeats heartbeats missed, half the heartbeat
// timeout watching the log, the rank's LeadershipDelay and its jitter.

const (
	vtHeartbeat = 100 * time.Millisecond
	vtMissed    = 4
	vtLimit     = vtMissed * vtHeartbeat // the heartbeat timeout
	vtDelay     = time.Second            // LeadershipDelay
)

// virtualFollower is node b over a counted store.
type virtualFollower struct {
	*testNode
	fs  *faultstore.Store
	mem *memstore.Store // beneath fs: writes of other nodes, not counted

	mu       sync.Mutex
	attempts []time.Time         // b's writes of leader_state.json
	atFirst  faultstore.Snapshot // the store's counts at the first
}

// newVirtualFollower makes node b over a store holding leader_state.json
// ls, as b found it when it joined.
func newVirtualFollower(t *testing.T, ls leaderState) *virtualFollower {
	t.Helper()
	opts := testOptions()
	opts.HeartbeatInterval, opts.MaxMissedHeartbeats, opts.LeadershipDelay = vtHeartbeat, vtMissed, vtDelay
	mem := memstore.New()
	fs := faultstore.New(mem)
	b := &virtualFollower{testNode: newTestNode(t, fs, "b", opts), fs: fs, mem: mem}
	if _, err := b.gs.writeLeaderState(t.Context(), ls, ""); err != nil {
		t.Fatal(err)
	}
	key := b.gs.key(leaderStateKey)
	b.hooks.set(func(_ context.Context, k string) {
		if k == key {
			b.mu.Lock()
			if len(b.attempts) == 0 {
				b.atFirst = fs.Counts()
			}
			b.attempts = append(b.attempts, time.Now())
			b.mu.Unlock()
		}
	}, nil)
	b.observeLeader(ls)
	return b
}

// attempted returns the times of b's writes of leader_state.json, and the
// store calls b made since before and up to the first.
func (b *virtualFollower) attempted(before faultstore.Snapshot) ([]time.Time, faultstore.Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.attempts) == 0 {
		return nil, nil
	}
	return slices.Clone(b.attempts), b.atFirst.Sub(before)
}

// follows makes b a follower of ls's leader, as joinOnce does once the
// leader took its Follow.
func (b *virtualFollower) follows(ls leaderState) {
	b.Node.mu.Lock()
	defer b.Node.mu.Unlock()
	b.fc.followed(ls, nil)
	b.setStateLocked(Joined, Follower)
}

// heartbeat is what handleSynchronize does with a heartbeat of the leader
// of term, which the store names.
func (b *virtualFollower) heartbeat(req *rsmpb.SynchronizeRequest) {
	b.Node.mu.Lock()
	b.fc.heard(req)
	b.Node.mu.Unlock()
	select {
	case b.Node.heard <- struct{}{}:
	default:
	}
}

// run runs f as one of b's goroutines and returns when it is done.
func (b *virtualFollower) run(f func() error) chan error {
	done := make(chan error, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		done <- f()
	}()
	return done
}

// TestFollowerGivesUpInVirtualTime: a follower whose leader's heartbeats
// stop writes leader_state.json (its attempt) one heartbeat timeout after
// the last heartbeat, half a timeout more of watching the log, and its
// rank's LeadershipDelay (plus at most half of one of jitter), after two
// listings of the log and two reads of leader_state.json. A leader that
// says it leaves is attempted over at once: no wait for missed heartbeats,
// no watch of the log.
func TestFollowerGivesUpInVirtualTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaving bool
		ahead   uint64 // c's apply index; b's is 0
		wait    time.Duration
		lists   int64 // of the log
		gets    int64 // of leader_state.json
	}{
		{name: "missed heartbeats, first in rank", ahead: 0, wait: vtLimit + vtLimit/2, lists: 2, gets: 2},
		{name: "missed heartbeats, second in rank", ahead: 7, wait: vtLimit + vtLimit/2 + vtDelay, lists: 2, gets: 2},
		{name: "the leader leaves, first in rank", leaving: true, ahead: 0, wait: 0, lists: 0, gets: 1},
		{name: "the leader leaves, second in rank", leaving: true, ahead: 7, wait: vtDelay, lists: 0, gets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ls := leaderState{Term: 1, LeaderID: "l", LeaderAddr: "l:1", Followers: []followerInfo{{ID: "b"}, {ID: "c"}}}
				b := newVirtualFollower(t, ls)
				b.follows(ls)
				done := b.run(b.watchLeader)
				beat := func(leaving bool) {
					req := heartbeatOf(1, "l", 0, followerInfo{ID: "b"}, followerInfo{ID: "c", ApplyIndex: tc.ahead})
					req.Leaving = leaving
					b.heartbeat(req)
				}
				var last time.Time
				for range 10 {
					beat(false)
					last = time.Now()
					time.Sleep(vtHeartbeat)
					synctest.Wait()
				}
				if b.Status().State != Joined.String() {
					t.Fatalf("a follower hearing its leader is %s", b.Status().State)
				}
				before := b.fs.Counts()
				if tc.leaving {
					beat(true)
					last = time.Now()
				}
				time.Sleep(tc.wait + vtDelay)
				synctest.Wait()
				got, ops := b.attempted(before)
				if len(got) != 1 {
					t.Fatalf("%d attempts", len(got))
				}
				if d := got[0].Sub(last); d < tc.wait || d > tc.wait+vtDelay/2 {
					t.Fatalf("attempted %v after the last heartbeat, want %v to %v", d, tc.wait, tc.wait+vtDelay/2)
				}
				// Up to the attempt: the listings of the log and the
				// reads of leader_state.json, nothing else.
				if lists, gets := ops.OpTotal(faultstore.OpList), ops.OpTotal(faultstore.OpGet); lists != tc.lists || gets != tc.gets || ops.Total() != lists+gets {
					t.Fatalf("store calls before the attempt:\n%v\nwant %d listings and %d reads", ops, tc.lists, tc.gets)
				}
				b.cancel()
				<-done
			})
		})
	}
}

// TestFollowerSignsInVirtualTime: a follower that gave up on the leader of
// term 1 (checkAndAttempt) watches the log for half the heartbeat timeout
// and reads leader_state.json; it attempts only without a sign that the
// leader lives (docs/rsm.md, "Availability"), and each sign costs the
// calls it names and no more.
func TestFollowerSignsInVirtualTime(t *testing.T) {
	listing := func(term uint64, leader string, ids ...string) leaderState {
		ls := leaderState{Term: term, LeaderID: leader, LeaderAddr: leader + ":1"}
		for _, id := range ids {
			ls.Followers = append(ls.Followers, followerInfo{ID: id})
		}
		return ls
	}
	for _, tc := range []struct {
		name    string
		term    uint64 // the term given up on; 1 if 0
		ls      leaderState
		heard   *rsmpb.SynchronizeRequest // the last heartbeat b heard
		led     uint64                    // a term b led
		grows   bool                      // the leader writes while b watches
		attempt bool
		lists   int64
		gets    int64
	}{
		{name: "no sign: attempt", ls: listing(1, "l", "b", "c"), heard: heartbeatOf(1, "l", 0, followerInfo{ID: "b"}),
			attempt: true, lists: 2, gets: 2},
		{name: "dropped by the leader that listed it", ls: listing(1, "l", "c"), heard: heartbeatOf(1, "l", 0, followerInfo{ID: "b"}),
			lists: 1, gets: 1},
		{name: "never listed, the leader lists others", ls: listing(1, "l", "c"), heard: heartbeatOf(1, "l", 0),
			attempt: true, lists: 2, gets: 2},
		{name: "a newer leader that others reached", term: 2, ls: listing(2, "c", "a"), led: 1,
			lists: 1, gets: 1},
		{name: "a newer leader that others reached, just started", term: 2, ls: listing(2, "c", "a"),
			attempt: true, lists: 2, gets: 2}, // b reached no term: it may be the last one alive
		{name: "a newer leader reached by none yet", term: 2, ls: listing(2, "c"), led: 1,
			attempt: true, lists: 2, gets: 2},
		{name: "the log grew: the leader still commits", ls: listing(1, "l", "b", "c"), heard: heartbeatOf(1, "l", 0, followerInfo{ID: "b"}),
			grows: true, lists: 2, gets: 1},
		{name: "the record moved on", ls: listing(2, "c", "b"), heard: heartbeatOf(1, "l", 0, followerInfo{ID: "b"}),
			lists: 1, gets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newVirtualFollower(t, tc.ls)
				if tc.heard != nil {
					b.heartbeat(tc.heard)
					<-b.Node.heard
				}
				b.Node.mu.Lock()
				b.fc.led(tc.led)
				b.Node.mu.Unlock()
				before := b.fs.Counts()
				start := time.Now()
				term := max(tc.term, 1)
				done := b.run(func() error { return b.checkAndAttempt(term) })
				if tc.grows {
					time.Sleep(vtLimit / 4)
					writeEntryT(t, b.mem, cmdEntry(1, 1, 1, 1, 1))
				}
				time.Sleep(vtLimit/2 + vtDelay)
				synctest.Wait()
				got, ops := b.attempted(before)
				if (len(got) > 0) != tc.attempt {
					t.Fatalf("attempts %v, want an attempt: %v", got, tc.attempt)
				}
				if !tc.attempt {
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
						done <- nil
					default:
						t.Fatal("checkAndAttempt has not returned")
					}
					ops = b.fs.Counts().Sub(before)
				} else if d := got[0].Sub(start); d < vtLimit/2 || d > vtLimit/2+vtDelay/2 {
					t.Fatalf("attempted after %v, want %v to %v", d, vtLimit/2, vtLimit/2+vtDelay/2)
				}
				lists, gets := ops.OpTotal(faultstore.OpList), ops.OpTotal(faultstore.OpGet)
				if lists != tc.lists || gets != tc.gets || ops.Total() != lists+gets {
					t.Fatalf("store calls:\n%v\nwant %d listings and %d reads", ops, tc.lists, tc.gets)
				}
				if b.Status().Term < tc.ls.Term {
					t.Fatalf("term %d after reading a record of %d", b.Status().Term, tc.ls.Term)
				}
				b.cancel()
				<-done
			})
		})
	}
}

// TestHeartbeatAnsweredWhileJoining: the replica is not the join loop's, so
// a heartbeat is applied and answered at once, in virtual time, while the
// run goroutine waits out an attempt's rank delay and while its read of
// leader_state.json is held in the store.
func TestHeartbeatAnsweredWhileJoining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := leaderState{Term: 1, LeaderID: "l", LeaderAddr: "l:1", LeaderKey: "key-of-l", Followers: []followerInfo{{ID: "b"}, {ID: "c"}}}
		b := newVirtualFollower(t, ls)
		var index uint64
		beat := func(what string) {
			t.Helper()
			req := heartbeatOf(1, "l", index, followerInfo{ID: "b"}, followerInfo{ID: "c", ApplyIndex: 9})
			for range 2 {
				index++
				req.Entries = append(req.Entries, &rsmpb.Entry{Index: index, Term: 1, Noop: true, Group: testGroup})
			}
			start := time.Now()
			resp := b.handleSynchronize(t.Context(), req, caller{id: "l", key: "key-of-l"})
			if resp.Status != rsmpb.Status_OK || resp.ApplyIndex != index {
				t.Fatalf("a heartbeat %s: %v, want OK at %d", what, resp, index)
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("a heartbeat %s was answered after %v", what, d)
			}
		}
		// c is ahead, as the first heartbeat says: b attempts after its
		// rank's LeadershipDelay.
		beat("while following")
		held := make(chan struct{})
		reading := make(chan struct{}, 1)
		key := b.gs.key(leaderStateKey)
		done := b.run(func() error { return b.Node.attempt(1) })
		time.Sleep(vtDelay / 2)
		synctest.Wait()
		beat("during the rank delay")
		b.hooks.set(nil, func(k string) {
			if k == key {
				reading <- struct{}{}
				<-held
			}
		})
		time.Sleep(vtDelay)
		<-reading
		synctest.Wait()
		beat("during a read of leader_state.json")
		b.hooks.set(nil, nil)
		close(held)
		b.cancel()
		<-done
	})
}
