package rsm

// Tests of the leader's event loop against a store: every request gets an
// answer however leadership ends, tokens and gauges come back, and rule 8
// holds for follower synchronization and takeover.

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// detachedPuts completes every Put even if its caller's ctx ends: a request
// already on its way to the store lands whatever the sender does next.
type detachedPuts struct{ driver.Store }

func (d detachedPuts) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	return d.Store.Put(context.WithoutCancel(ctx), key, data, cond)
}

func leaderOf(t *testing.T, n *testNode) *leaderRun {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leader == nil {
		t.Fatal("no leader run")
	}
	return n.leader
}

// waitLeaderGone waits until n's leadership has ended and its run is
// cleaned up: the goroutine leadInBackground started has returned.
func waitLeaderGone(t *testing.T, n *testNode) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader run did not end")
	}
}

// answersBeforeRelease collects the answers to ps, which the deposed
// leader's loop gives at once, while the write it blocked is still in
// flight; then it lets the write land.
func answersBeforeRelease(t *testing.T, ps []*pending, release chan struct{}) []*rsmpb.StateResponse {
	t.Helper()
	defer close(release)
	var rs []*rsmpb.StateResponse
	for i, p := range ps {
		select {
		case r := <-p.done:
			rs = append(rs, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d got no answer while the write was in flight: the deposed leader did not answer it at once", i)
		}
	}
	return rs
}

func newCommand(client string, seq uint64) *pending {
	return &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Machine: "c", Client: client, Seq: seq},
		start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
}

// A leader deposed while a batch's log write is in flight, the write
// landing afterwards: the request is answered at once as of unknown
// outcome (it may be committed), and the leader's count tokens and
// concurrency gauge all come back.
func TestDeposedWithWriteInFlightAnswers(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, detachedPuts{mem}, "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1) // seal 1, registration 2, command 3
	l := leaderOf(t, a)
	reached, release := blockPut(a, logKey(testGroup, 4))
	p := newCommand("t#1", 1)
	l.enqueue(p)
	<-reached
	l.depose(errors.New("deposed by the test"))
	// The write lands only after the deposed leader answered.
	r := answersBeforeRelease(t, []*pending{p}, release)[0]
	if r.Status != rsmpb.Status_UNKNOWN_OUTCOME {
		t.Fatalf("answer %v %q, want UNKNOWN_OUTCOME (the write may land)", r.Status, r.Message)
	}
	waitLeaderGone(t, a)
	if g := testutil.ToFloat64(a.m.concurrent.WithLabelValues(testGroup)); g != 0 {
		t.Fatalf("concurrent_requests gauge %v after the leader ended, want 0", g)
	}
	if n := len(l.count); n != 0 {
		t.Fatalf("%d count tokens still held after the leader ended", n)
	}
}

// Requests queued or batched when leadership ends are all answered, none
// of them as committed, and every token comes back.
func TestDeposedAnswersEveryRequest(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.BatchMinCount, opts.FlushInterval, opts.PipelineDepth = 4, time.Second, 2
	a := newTestNode(t, detachedPuts{mem}, "a", opts)
	a.leadInBackground(t)
	l := leaderOf(t, a)
	// The log write of index 2 and every read of leader_state.json (a
	// read batch's confirmation round) are held in the store until the
	// answers are in: the read is cut into a round as soon as one can be
	// issued, so without holding its round it could be confirmed, and
	// rightly answered, before leadership ends.
	reached, release := make(chan struct{}), make(chan struct{})
	roundHeld := make(chan struct{})
	var reachedOnce, roundOnce sync.Once
	a.hooks.set(func(_ context.Context, k string) {
		if k == logKey(testGroup, 2) {
			reachedOnce.Do(func() { close(reached) })
			<-release
		}
	}, func(k string) {
		if k == testGroup+"/"+leaderStateKey {
			roundOnce.Do(func() { close(roundHeld) })
			<-release
		}
	})
	var ps []*pending
	for i := uint64(1); i <= 10; i++ { // a batch in flight, one queued, two commands batching
		p := newCommand("t#1", i)
		ps = append(ps, p)
		l.enqueue(p)
	}
	read := &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_READ, Machine: "c"}, start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
	l.enqueue(read)
	ps = append(ps, read)
	<-reached
	<-roundHeld
	l.depose(errors.New("deposed by the test"))
	for i, r := range answersBeforeRelease(t, ps, release) {
		if r.Status == rsmpb.Status_OK {
			t.Fatalf("request %d answered OK by a deposed leader", i)
		}
	}
	waitLeaderGone(t, a)
	if g := testutil.ToFloat64(a.m.concurrent.WithLabelValues(testGroup)); g != 0 {
		t.Fatalf("concurrent_requests gauge %v, want 0", g)
	}
	if n := len(l.count); n != 0 {
		t.Fatalf("%d count tokens still held", n)
	}
}

// Rule 8 in follower synchronization: a snapshot written by another writer
// (a deposed leader finishing its snapshot) covers indexes the leader's
// cache no longer holds, they are truncated, and a stale writer re-creates
// one. The leader must never send the re-created entry; the follower is
// told to catch up from the snapshot instead.
func TestSyncNeverSendsARecreatedSlot(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.LogCacheSize = 2
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	for i := uint64(1); i <= 5; i++ {
		mustCommand(t, a, i) // seal 1, registration 2, commands 3..7
	}
	// A snapshot at 7 that the leader did not write, the log up to it
	// deleted, and a stale writer's late create at 4.
	r, err := newReplica(map[string]StateMachine{"c": &protoCounter{}}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 7; i++ {
		r.apply(readEntryT(t, mem, i))
	}
	snap, err := r.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Nonce = record.NewNonce()
	b, err := record.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Put(t.Context(), testGroup+"/"+snapshotKey, b, driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 7; i++ {
		if err := mem.Delete(t.Context(), logKey(testGroup, i), driver.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	session, seq := a.sessionOf()
	stale := cmdEntry(4, 1, session, seq+1, 1000)
	writeEntryT(t, mem, stale)

	// The leader's cache holds 6 and 7 only, and its own record of the
	// snapshot (none) is stale: what it sends from 4 on is read from the
	// store.
	l := leaderOf(t, a)
	entries, tooFar, err := l.fetch(4, l.confirmed.Load(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Index == 4 && string(e.Nonce) == string(stale.Nonce) {
			t.Fatal("the leader would send a follower the stale writer's re-created entry at 4")
		}
	}
	if !tooFar {
		t.Fatalf("the follower should be told to catch up from the snapshot; got %d entries", len(entries))
	}
}

// A takeover retried after a snapshot moved to exactly the seal's index
// starts from that snapshot, not from what the failed attempt applied.
func TestTakeoverRetryResetsTheReplica(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1)
	mustCommand(t, a, 2) // seal 1, registration 2, commands 3, 4
	a.Node.cancel()
	a.wg.Wait()

	// The state a deposed leader snapshotted at 5: its +1000 at 5.
	r, err := newReplica(map[string]StateMachine{"c": &protoCounter{}}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 4; i++ {
		r.apply(readEntryT(t, mem, i))
	}
	session, seq := a.sessionOf()
	r.apply(cmdEntry(5, 1, session, seq+1, 1000))
	snap, err := r.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Nonce = record.NewNonce()

	b := newTestNode(t, mem, "b", testOptions())
	done := false
	b.hooks.set(func(ctx context.Context, k string) {
		if k != logKey(testGroup, 5) || done {
			return
		}
		done = true
		// Just before b's seal at 5: the snapshot lands at 5 and the log
		// up to it is deleted, so the seal lands on an empty slot.
		data, err := record.EncodeSnapshot(snap)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := mem.Put(ctx, testGroup+"/"+snapshotKey, data, driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Error(err)
		}
		for i := uint64(1); i <= 4; i++ {
			if err := mem.Delete(ctx, logKey(testGroup, i), driver.Cond{}); err != nil {
				t.Error(err)
			}
		}
	}, nil)
	b.leadInBackground(t)
	if got := b.count(t); got != 1002 {
		t.Fatalf("the new leader counts %d, want 1002 (the snapshot's state)", got)
	}
	res, err := b.command(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint64(res); got != 1003 {
		t.Fatalf("command after takeover: %d, want 1003", got)
	}
	if got, _ := fresh(t, mem); got != 1003 {
		t.Fatalf("a fresh replica counts %d, want 1003", got)
	}
}

// A snapshot another writer stored, ending past the leader's, is taken as
// the snapshot to beat: the leader does not try to write over it on every
// round.
func TestNewerSnapshotIsNotWrittenOverAgain(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.SnapshotThreshold = 4
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	r, err := newReplica(map[string]StateMachine{"c": &protoCounter{}}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := r.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.EndIndex, snap.Nonce = 1000, record.NewNonce()
	data, err := record.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	key := testGroup + "/" + snapshotKey
	if _, err := mem.Put(t.Context(), key, data, driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	a.hooks.set(func(_ context.Context, k string) {
		if k == key {
			attempts.Add(1)
		}
	}, nil)
	for i := uint64(1); i <= 12; i++ {
		mustCommand(t, a, i)
	}
	if n := attempts.Load(); n > 1 {
		t.Fatalf("%d writes of the snapshot tried over a newer one, want at most 1", n)
	}
}

// A Follow waiting on a membership write when leadership ends is answered
// at once, not at its deadline.
func TestFollowAnsweredWhenLeadershipEnds(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	l := leaderOf(t, a)
	reached, release := blockPut(a, testGroup+"/"+leaderStateKey)
	defer close(release)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := l.addFollower(ctx, followerInfo{ID: "f", Addr: "127.0.0.1:2"}, "", true)
		done <- err
	}()
	<-reached
	l.depose(errors.New("deposed by the test"))
	if err := <-done; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Follow during the end of leadership: %v, want the leadership's end", err)
	}
}
