package rsm

// Unit tests of the leader's decisions (window): no store, no goroutine,
// no clock.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func testWindow(depth, minBatch int) *window {
	o := Options{PipelineDepth: depth, BatchMinCount: minBatch, LogCacheSize: 4, SnapshotThreshold: 10, MaxMessageSize: DefaultMaxMessageSize}
	w := newWindow(5, o)
	w.next, w.confirmed = 11, 10
	return w
}

func cmd(seq uint64) *pending {
	return &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Machine: "c", Client: "x", Seq: seq}}
}

func rd() *pending {
	return &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_READ, Machine: "c"}}
}

func TestWindowBatching(t *testing.T) {
	w := testWindow(2, 3)
	if read, started, full, _ := w.take(cmd(1), time.Time{}); read || !started || full {
		t.Fatalf("first command: read %v started %v full %v", read, started, full)
	}
	if _, started, full, _ := w.take(cmd(2), time.Time{}); started || full {
		t.Fatalf("second command: started %v full %v", started, full)
	}
	if read, started, _, _ := w.take(rd(), time.Time{}); !read || !started {
		t.Fatal("a read opens its own batch")
	}
	if _, _, full, _ := w.take(cmd(3), time.Time{}); !full {
		t.Fatal("the third command fills a batch of BatchMinCount 3")
	}
	w.cutCommands()
	w.cutCommands() // nothing more to cut
	if len(w.ready) != 1 || len(w.ready[0]) != 3 {
		t.Fatalf("ready batches %d, want one of 3", len(w.ready))
	}
	if b := w.cutReads(); len(b) != 1 {
		t.Fatalf("cut %d reads, want 1", len(b))
	}
}

// Writes take consecutive indexes, at most PipelineDepth in flight, and
// are settled strictly in index order whatever order results come in.
func TestWindowPipelineInOrder(t *testing.T) {
	w := testWindow(2, 1)
	for i := uint64(1); i <= 3; i++ {
		w.take(cmd(i), time.Time{})
		w.cutCommands()
	}
	a, b := w.nextWrite(), w.nextWrite()
	if a == nil || b == nil || a.entry.Index != 11 || b.entry.Index != 12 {
		t.Fatal("two writes at 11 and 12")
	}
	if a.entry.Term != 5 || len(a.entry.Commands) != 1 || a.entry.Commands[0].Seq != 1 {
		t.Fatalf("entry %+v", a.entry)
	}
	if w.nextWrite() != nil {
		t.Fatal("a third write with PipelineDepth 2")
	}
	w.wrote(12, nil, nil, 0)
	if w.settle() != nil {
		t.Fatal("12 settled before 11")
	}
	w.wrote(11, nil, nil, 0)
	if s := w.settle(); s != a {
		t.Fatal("11 settles first")
	}
	if s := w.settle(); s != b {
		t.Fatal("then 12")
	}
	if c := w.nextWrite(); c == nil || c.entry.Index != 13 {
		t.Fatal("room again: the third batch goes to 13")
	}
	w.wrote(99, nil, nil, 0) // unknown index: ignored
	w.wrote(1, nil, nil, 0)
}

func TestWindowWriteOutcome(t *testing.T) {
	w := testWindow(1, 1)
	e := func(term uint64) *rsmpb.Entry { return &rsmpb.Entry{Index: 11, Term: term} }
	for _, tc := range []struct {
		name string
		wr   write
		want writeOutcome
	}{
		{"landed", write{}, landed},
		{"lower term took the slot", write{found: e(4)}, skipped},
		{"same term took the slot", write{found: e(5)}, overtaken},
		{"higher term took the slot", write{found: e(6)}, overtaken},
		{"outcome unknown", write{err: errors.New("timeout")}, unsettled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.outcome(&tc.wr); got != tc.want {
				t.Fatalf("outcome %v, want %v", got, tc.want)
			}
		})
	}
}

// Rounds release their waiters in issue order; a failed round stops the
// release, and it and every later round stay to be failed.
// A read batch is cut as soon as a confirmation round can be issued for
// it, not at FlushInterval: a lone read waits for one store read. While
// PipelineDepth rounds are in flight, reads gather into one batch for the
// next round.
func TestWindowReadsIfRoom(t *testing.T) {
	w := testWindow(1, 100)
	if b := w.readsIfRoom(); b != nil {
		t.Fatal("cut a read batch with no reads")
	}
	w.take(rd(), time.Time{})
	b := w.readsIfRoom()
	if len(b) != 1 || len(w.reads) != 0 {
		t.Fatalf("a lone read with a free round: cut %d, left %d; want 1 cut at once", len(b), len(w.reads))
	}
	w.wait(waiter{batch: b, answers: []*rsmpb.StateResponse{{}}})
	r := w.startRound()
	if r == nil || len(r.ws) != 1 {
		t.Fatal("the read's round was not issued")
	}
	w.take(rd(), time.Time{})
	w.take(rd(), time.Time{})
	if b := w.readsIfRoom(); b != nil {
		t.Fatalf("cut %d reads while PipelineDepth 1 round is in flight", len(b))
	}
	w.roundDone(r.id, nil)
	if out, err := w.released(time.Time{}); err != nil || len(out) != 1 {
		t.Fatalf("released %d rounds (%v), want 1", len(out), err)
	}
	if b := w.readsIfRoom(); len(b) != 2 {
		t.Fatalf("after the round: cut %d reads, want the 2 that waited, in one batch", len(b))
	}
}

func TestWindowRounds(t *testing.T) {
	w := testWindow(2, 1)
	if w.startRound() != nil {
		t.Fatal("a round with nothing to confirm")
	}
	w.wait(waiter{entry: &rsmpb.Entry{Index: 11}})
	r1 := w.startRound()
	w.wait(waiter{entry: &rsmpb.Entry{Index: 12}})
	r2 := w.startRound()
	w.wait(waiter{batch: []*pending{rd()}, answers: []*rsmpb.StateResponse{{}}})
	if w.startRound() != nil {
		t.Fatal("a third round with PipelineDepth 2")
	}
	w.roundDone(r2.id, nil)
	if out, err := w.released(time.Time{}); len(out) != 0 || err != nil {
		t.Fatal("round 2 released before round 1")
	}
	w.roundDone(r1.id, nil)
	out, err := w.released(time.Time{})
	if err != nil || len(out) != 2 || out[0] != r1 || out[1] != r2 {
		t.Fatalf("released %d rounds (%v), want 1 then 2", len(out), err)
	}
	for _, r := range out {
		for _, wt := range r.ws {
			w.confirm(wt)
		}
	}
	if w.confirmed != 12 || w.cache[12] == nil {
		t.Fatalf("confirmed %d, want 12 and cached", w.confirmed)
	}
	r3 := w.startRound()
	w.wait(waiter{entry: &rsmpb.Entry{Index: 13}})
	r4 := w.startRound()
	w.roundDone(r4.id, nil)
	w.roundDone(r3.id, errDeposed)
	if out, err := w.released(time.Time{}); len(out) != 0 || !errors.Is(err, errDeposed) {
		t.Fatalf("a failed round: released %d, err %v", len(out), err)
	}
	if len(w.rounds) != 2 {
		t.Fatalf("%d rounds left to fail, want 2", len(w.rounds))
	}
}

// TestWindowShownWrite: a write the store shows before it is durable
// (window.visible) wants a round, and is confirmed only by a round issued
// after it was shown (rule 5(b)): it joins one still in flight, or is
// answered at once if one came back, never by a round issued before, and
// never ahead of a waiter registered before it.
func TestWindowShownWrite(t *testing.T) {
	landed := func(w *window, index uint64) *write {
		t.Helper()
		w.wrote(index, nil, nil, time.Millisecond)
		wr := w.settle()
		if wr == nil || wr.entry.Index != index || w.outcome(wr) != landed {
			t.Fatalf("write of %d did not settle as landed", index)
		}
		return wr
	}
	write := func(w *window) *write {
		t.Helper()
		w.take(cmd(w.next), time.Time{})
		w.cutCommands()
		wr := w.nextWrite()
		if wr == nil {
			t.Fatal("no room for a write")
		}
		return wr
	}

	t.Run("joins the round issued after it was shown, not the one before", func(t *testing.T) {
		w := testWindow(3, 1)
		wr := write(w)
		w.probe = true
		before := w.startRound()
		if w.startRound() != nil {
			t.Fatal("a round with nothing to confirm")
		}
		w.visible(wr.entry.Index)
		after := w.startRound()
		if after == nil {
			t.Fatal("a shown write got no round")
		}
		if _, now := w.waitLanded(landed(w, wr.entry.Index), nil, time.Time{}); now {
			t.Fatal("answered before any round issued after it was shown came back")
		}
		if len(before.ws) != 0 || len(after.ws) != 1 {
			t.Fatalf("waiters: %d in the round before it was shown, %d in the one after; want 0 and 1", len(before.ws), len(after.ws))
		}
		w.roundDone(before.id, nil)
		if out, _ := w.released(time.Time{}); len(out) != 1 || len(out[0].ws) != 0 {
			t.Fatal("the round issued before it was shown released it")
		}
		w.roundDone(after.id, nil)
		if out, _ := w.released(time.Time{}); len(out) != 1 || len(out[0].ws) != 1 {
			t.Fatal("the round issued after it was shown did not release it")
		}
	})

	t.Run("answered at once when that round came back", func(t *testing.T) {
		w := testWindow(1, 1)
		wr := write(w)
		w.visible(wr.entry.Index)
		r := w.startRound()
		w.roundDone(r.id, nil)
		if out, _ := w.released(time.Time{}); len(out) != 1 {
			t.Fatal("the round did not come back")
		}
		wt, now := w.waitLanded(landed(w, wr.entry.Index), nil, time.Time{})
		if !now || wt.entry != wr.entry || len(w.waiting) != 0 {
			t.Fatalf("answered at once %v (waiting %d); want at once", now, len(w.waiting))
		}
		if w.startRound() != nil {
			t.Fatal("a round wanted after the write was confirmed")
		}
	})

	t.Run("only a round issued after it was shown came back", func(t *testing.T) {
		w := testWindow(2, 1)
		w.probe = true
		r := w.startRound()
		wr := write(w)
		w.visible(wr.entry.Index)
		w.roundDone(r.id, nil)
		w.released(time.Time{})
		if _, now := w.waitLanded(landed(w, wr.entry.Index), nil, time.Time{}); now {
			t.Fatal("answered on a round issued before it was shown")
		}
		if len(w.waiting) != 1 {
			t.Fatalf("%d waiting for the next round, want 1", len(w.waiting))
		}
	})

	t.Run("after a waiter registered before it", func(t *testing.T) {
		w := testWindow(2, 1)
		wr := write(w)
		w.visible(wr.entry.Index)
		r := w.startRound()
		w.wait(waiter{batch: []*pending{rd()}, answers: []*rsmpb.StateResponse{{}}})
		if _, now := w.waitLanded(landed(w, wr.entry.Index), nil, time.Time{}); now || len(r.ws) != 0 || len(w.waiting) != 2 {
			t.Fatalf("at once %v, %d in the round, %d waiting; want it behind the read, in the next round", now, len(r.ws), len(w.waiting))
		}
	})

	t.Run("not shown: the next round", func(t *testing.T) {
		w := testWindow(2, 1)
		wr := write(w)
		w.probe = true
		r := w.startRound()
		if _, now := w.waitLanded(landed(w, wr.entry.Index), nil, time.Time{}); now || len(r.ws) != 0 || len(w.waiting) != 1 {
			t.Fatal("a write never shown joined a round issued before it landed")
		}
	})
}

func TestWindowIdleProbe(t *testing.T) {
	w := testWindow(1, 1)
	w.idleTick()
	r := w.startRound()
	if r == nil || len(r.ws) != 0 {
		t.Fatal("an idle leader checks its term with an empty round")
	}
	w.roundDone(r.id, nil)
	w.released(time.Time{})
	w.idleTick() // a round was issued since the last tick
	if w.startRound() != nil {
		t.Fatal("a probe although a round was issued in the period")
	}
}

func TestWindowSnapshotWaitsForConfirmation(t *testing.T) {
	w := testWindow(1, 1)
	w.snapEnd = 1
	if w.snapshotDue() {
		t.Fatal("due with 9 entries since the last snapshot, threshold 10")
	}
	w.confirmed = 11
	if !w.snapshotDue() {
		t.Fatal("not due with 10 entries since the last snapshot")
	}
	w.hold(&snapshot.Captured{Head: &rsmpb.Snapshot{EndIndex: 13}})
	if w.snapshotDue() {
		t.Fatal("due again while one is under way")
	}
	if j := w.snapshotToWrite(); j != nil {
		t.Fatal("a snapshot ending at 13 written with 11 confirmed")
	}
	w.confirmed = 13
	w.snapVersion = "v1"
	j := w.snapshotToWrite()
	if j == nil || j.Base == nil || j.PrevEnd != 1 || j.PrevVersion != "v1" {
		t.Fatalf("snapshot %+v", j)
	}
	w.snapshotWritten(13, "v2", snapshot.Stats{Base: 100, Segs: 0})
	w.snapshotWritten(12, "v0", snapshot.Stats{Base: 0, Segs: 0}) // never backwards
	if w.snapEnd != 13 || w.snapVersion != "v2" || w.snapBase != 100 {
		t.Fatalf("snapshot end %d version %q base %d", w.snapEnd, w.snapVersion, w.snapBase)
	}
}

// TestWindowSegmentPolicy: with a manifest stored, a due snapshot is a
// segment of exactly the confirmed entries after the stored end (never an
// unconfirmed one, rule 7), until the segments reach baseFactor times the
// base; then a base.
func TestWindowSegmentPolicy(t *testing.T) {
	w := testWindow(1, 1)
	w.snapEvery, w.cacheSize = 10, 100
	if !w.wantsBase() {
		t.Fatal("no manifest stored, yet a segment is wanted")
	}
	w.snapshotWritten(20, "v1", snapshot.Stats{Base: 1000, Segs: 0})
	for i := uint64(1); i <= 40; i++ {
		w.cacheEntry(&rsmpb.Entry{Index: i, Term: 1})
	}
	w.next, w.confirmed = 41, 33 // 34..40 written, not confirmed
	if !w.snapshotDue() || w.wantsBase() {
		t.Fatalf("due %v, base %v", w.snapshotDue(), w.wantsBase())
	}
	w.holdSegment()
	j := w.snapshotToWrite()
	// A multiple of the threshold, so that segments are alike.
	if j == nil || j.Base != nil || j.From != 21 || j.End != 30 || len(j.Entries) != 10 || j.Entries[9].Index != 30 {
		t.Fatalf("segment job %+v", j)
	}
	w.snapshotWritten(33, "v2", snapshot.Stats{Base: 1000, Segs: snapshot.BaseFactor*1000 - 1})
	if w.wantsBase() {
		t.Fatal("a base wanted below the factor")
	}
	w.snapshotWritten(34, "v3", snapshot.Stats{Base: 1000, Segs: snapshot.BaseFactor * 1000})
	if !w.wantsBase() {
		t.Fatalf("segments at %d times the base, no base wanted", snapshot.BaseFactor)
	}
	w.snapshotWritten(35, "v4", snapshot.Stats{Base: 1000, Segs: 1, Count: snapshot.MaxSegments})
	if !w.wantsBase() {
		t.Fatalf("%d segments, no base wanted", snapshot.MaxSegments)
	}
}

// TestWindowQuietBase: a base is taken below baseFactor once the group
// took no command for a whole idle period (the first tick of a
// leadership ends a part of one) and is quiet, with entries confirmed
// since the stored snapshot and segments of at least quietBaseFactor
// times the base; a command clears it until a whole period passes again.
func TestWindowQuietBase(t *testing.T) {
	w := testWindow(1, 1)
	w.snapshotWritten(20, "v1", snapshot.Stats{Base: 1000, Segs: 1500, Count: 3})
	w.next, w.confirmed = 26, 25
	if w.wantsBase() {
		t.Fatal("a base wanted below baseFactor")
	}
	w.idleTick()
	if w.quietBaseDue() {
		t.Fatal("due after the first tick of a leadership")
	}
	w.idleTick()
	if !w.quietBaseDue() {
		t.Fatal("not due after a whole quiet period, segments at 1.5 times the base")
	}
	w.snapSegs = 1499
	if w.quietBaseDue() {
		t.Fatal("due with segments below 1.5 times the base")
	}
	w.snapSegs = 1500
	w.confirmed = 20
	w.next = 21
	if w.quietBaseDue() {
		t.Fatal("due with nothing confirmed since the stored snapshot")
	}
	w.next, w.confirmed = 26, 25
	w.take(&pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Data: []byte("x")}}, time.Time{})
	if w.quietBaseDue() {
		t.Fatal("due with a command batched")
	}
	w.cmds, w.cmdBytes = nil, 0 // as if committed
	if w.quietBaseDue() {
		t.Fatal("due right after a command")
	}
	w.idleTick() // the period held the command
	if w.quietBaseDue() {
		t.Fatal("due after a period that held a command")
	}
	w.idleTick()
	if !w.quietBaseDue() {
		t.Fatal("not due after a whole quiet period again")
	}
	w.hold(&snapshot.Captured{Head: &rsmpb.Snapshot{EndIndex: 25}})
	if w.quietBaseDue() {
		t.Fatal("due while a snapshot is held")
	}
}

// TestWindowPacksWhenQuiet: a log stored as separate objects is moved
// into a pack only in a quiet group whose members all read packs: first a
// snapshot of every confirmed index, then, once it is written and
// truncated, one try at a time, tried again after a wait that doubles.
func TestWindowPacksWhenQuiet(t *testing.T) {
	w := testWindow(1, 1)
	w.cacheSize = 100
	for i := uint64(1); i <= 10; i++ {
		w.cacheEntry(&rsmpb.Entry{Index: i, Term: 1})
	}
	w.snapshotWritten(5, "v1", snapshot.Stats{Base: 1000})
	now := time.Unix(1000, 0)
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d for a log the store cannot pack", s)
	}
	w.unpacked = true
	members := []followerInfo{{ID: "b"}, {ID: "c"}}
	w.readsPacks["b"] = true
	w.readsPacks["d"] = true // not a member
	if s := w.packNext(now, members); s != packWait {
		t.Fatalf("step %d with member c of a version without packs (or not heard from)", s)
	}
	w.readsPacks["c"] = true
	if s := w.packNext(now, members); s != packSnapshot {
		t.Fatalf("step %d with every member reading packs; want a snapshot", s)
	}
	// Nodes of the term before are waited for, a while.
	w.packGrace = 10 * time.Second
	w.expectVersions([]string{"x", "y"}, now)
	w.readsPacks["x"] = true
	if s := w.packNext(now.Add(9*time.Second), members); s != packWait {
		t.Fatalf("step %d with node y of the term before not heard from", s)
	}
	w.readsPacks["y"] = false // registered as a version without packs, then dropped
	if s := w.packNext(now.Add(9*time.Second), members); s != packWait {
		t.Fatalf("step %d with node y of the term before of a version without packs", s)
	}
	if s := w.packNext(now.Add(10*time.Second), members); s != packSnapshot {
		t.Fatalf("step %d once node y is taken for gone; want a snapshot", s)
	}
	w.readsPacks["y"] = true
	w.take(cmd(1), now)
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d with a command batched", s)
	}
	w.cmds, w.cmdBytes = nil, 0
	w.next = 12 // 11 written, not confirmed
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d with a write unconfirmed", s)
	}
	w.next = 11
	if s := w.packNext(now, nil); s != packSnapshot {
		t.Fatalf("step %d in a quiet group with entries after the snapshot; want a snapshot", s)
	}
	w.holdSegmentTo(w.confirmed)
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d with the snapshot held", s)
	}
	j := w.snapshotToWrite()
	if j == nil || j.Base != nil || j.From != 6 || j.End != 10 || len(j.Entries) != 5 {
		t.Fatalf("segment job %+v; want 6 to 10, every confirmed index", j)
	}
	w.snapshotWritten(10, "v2", snapshot.Stats{Base: 1000, Segs: 100, Count: 1})
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d before the truncation ended", s)
	}
	w.snapBusy = false // truncated
	if s := w.packNext(now, nil); s != packTry {
		t.Fatalf("step %d with every index in the snapshot; want a try", s)
	}
	if s := w.packNext(now, nil); s != packWait {
		t.Fatalf("step %d with a try under way", s)
	}
	for _, wait := range []time.Duration{packBackoffMin, 2 * packBackoffMin, 4 * packBackoffMin} {
		w.packDone(false, now)
		if s := w.packNext(now.Add(wait-time.Millisecond), nil); s != packWait {
			t.Fatalf("step %d before %v after a failed try", s, wait)
		}
		now = now.Add(wait)
		if s := w.packNext(now, nil); s != packTry {
			t.Fatalf("step %d %v after a failed try; want another", s, wait)
		}
	}
	w.packDone(true, now)
	if s := w.packNext(now.Add(time.Hour), nil); s != packWait || w.unpacked {
		t.Fatalf("step %d (unpacked %v) once packed", s, w.unpacked)
	}
}

func TestWindowSyncPlan(t *testing.T) {
	hb := time.Second
	t0 := time.Unix(1000, 0)
	w := testWindow(1, 1)
	w.cacheSize = 10
	for i := uint64(8); i <= 10; i++ {
		w.cacheEntry(&rsmpb.Entry{Index: i, Term: 5})
	}
	w.snapEnd = 5
	w.register(followerInfo{ID: "f", ApplyIndex: 7})
	f := w.followers["f"]
	j := w.syncPlan(f, t0, hb, 100, 1<<20)
	if j == nil || len(j.entries) != 3 || j.entries[0].Index != 8 || j.fetchFrom != 0 || j.tooFar {
		t.Fatalf("plan %+v, want 8..10 from the cache", j)
	}
	if w.syncPlan(f, t0, hb, 100, 1<<20) != nil {
		t.Fatal("a second send while one is in flight")
	}
	if known, gone := w.synced("f", f.gen, true, false, 10, time.Time{}); !known || gone {
		t.Fatal("the answer was not taken")
	}
	if w.syncPlan(f, t0.Add(hb/2), hb, 100, 1<<20) != nil {
		t.Fatal("a heartbeat before HeartbeatInterval")
	}
	if j := w.syncPlan(f, t0.Add(hb), hb, 100, 1<<20); j == nil || len(j.entries) != 0 {
		t.Fatal("no heartbeat after HeartbeatInterval")
	}
	// A failure backs off until retryAt.
	w.synced("f", f.gen, false, false, 0, t0.Add(3*hb))
	if w.syncPlan(f, t0.Add(2*hb), hb, 100, 1<<20) != nil {
		t.Fatal("a send before retryAt")
	}
	if got := w.nextSync(hb); !got.Equal(t0.Add(3 * hb)) {
		t.Fatalf("next sync at %v, want retryAt", got)
	}
	// A result of an earlier registration is ignored.
	w.register(followerInfo{ID: "f", ApplyIndex: 5})
	if known, _ := w.synced("f", f.gen, true, false, 10, time.Time{}); known {
		t.Fatal("a stale registration's result was taken")
	}

	t.Run("cache miss above the snapshot: read from the store", func(t *testing.T) {
		w.register(followerInfo{ID: "g", ApplyIndex: 6})
		j := w.syncPlan(w.followers["g"], t0, hb, 100, 1<<20)
		if j.fetchFrom != 7 || j.fetchTo != 10 || len(j.entries) != 0 || j.tooFar {
			t.Fatalf("plan %+v, want a store read of 7..10", j)
		}
	})
	t.Run("below the known snapshot: catch up from the store", func(t *testing.T) {
		w.register(followerInfo{ID: "h", ApplyIndex: 2})
		j := w.syncPlan(w.followers["h"], t0, hb, 100, 1<<20)
		if !j.tooFar || j.fetchFrom != 0 || len(j.entries) != 0 {
			t.Fatalf("plan %+v, want too far behind", j)
		}
		if _, gone := w.synced("h", j.gen, true, true, 0, time.Time{}); !gone {
			t.Fatal("a follower sent to catch up stays registered")
		}
	})
	t.Run("at most maxEntries", func(t *testing.T) {
		w.register(followerInfo{ID: "i", ApplyIndex: 7})
		if j := w.syncPlan(w.followers["i"], t0, hb, 2, 1<<20); len(j.entries) != 2 {
			t.Fatalf("%d entries, want 2", len(j.entries))
		}
	})
}

// Every outstanding request gets an answer when leadership ends, and the
// status says what is known: not written, maybe written, read refused.
func TestWindowDrain(t *testing.T) {
	w := testWindow(2, 2)
	queued := cmd(1)
	w.take(queued, time.Time{})
	w.cutCommands()
	inflight := cmd(2)
	w.take(inflight, time.Time{})
	w.take(cmd(3), time.Time{})
	w.cutCommands()
	batching := cmd(4)
	w.take(batching, time.Time{})
	reading := rd()
	w.take(reading, time.Time{})
	// Pipeline of 1 in flight: queued goes to 11, inflight's batch waits.
	w.depth = 1
	wr := w.nextWrite()
	w.depth = 2
	w.wait(waiter{batch: []*pending{cmd(9)}, entry: &rsmpb.Entry{Index: 10}})
	confirmedRead := rd()
	w.wait(waiter{batch: []*pending{confirmedRead}, answers: []*rsmpb.StateResponse{{}}})
	w.startRound()
	unconfirmed := cmd(10)
	w.wait(waiter{batch: []*pending{unconfirmed}, entry: &rsmpb.Entry{Index: 9}})

	got := map[*pending]rsmpb.Status{}
	for _, a := range w.drain() {
		if _, dup := got[a.p]; dup {
			t.Fatal("a request answered twice")
		}
		got[a.p] = a.status
	}
	want := map[*pending]rsmpb.Status{
		wr.batch[0]:   rsmpb.Status_UNKNOWN_OUTCOME,
		inflight:      rsmpb.Status_NOT_COMMITTED,
		batching:      rsmpb.Status_NOT_COMMITTED,
		reading:       rsmpb.Status_NOT_LEADER,
		confirmedRead: rsmpb.Status_NOT_LEADER,
		unconfirmed:   rsmpb.Status_UNKNOWN_OUTCOME,
	}
	for p, st := range want {
		if got[p] != st {
			t.Errorf("request %d (%v): %v, want %v", p.req.Seq, p.req.Type, got[p], st)
		}
	}
	if len(got) != 8 {
		t.Fatalf("%d answers, want 8", len(got))
	}
	if len(w.drain()) != 0 {
		t.Fatal("a second drain answers again")
	}
}

func TestSupersedes(t *testing.T) {
	for _, tc := range []struct {
		end  uint64 // 0: no snapshot
		from uint64
		want bool
	}{
		{0, 1, false},
		{3, 4, false},
		{4, 4, true},
		{9, 4, true},
	} {
		if got := supersedes(tc.end, tc.from); got != tc.want {
			t.Errorf("snapshot ending at %d, from %d: %v, want %v", tc.end, tc.from, got, tc.want)
		}
	}
}

func TestMembership(t *testing.T) {
	ls := leaderState{Term: 3, Followers: []followerInfo{{ID: "a", Addr: "x:1"}}, CommitIndex: 9}
	if _, changed := membership(ls, followerInfo{ID: "a", Addr: "x:1", ApplyIndex: 5}, 10); changed {
		t.Fatal("a known follower at the same address changes the membership")
	}
	next, changed := membership(ls, followerInfo{ID: "a", Addr: "x:2"}, 10)
	if !changed || len(next.Followers) != 1 || next.Followers[0].Addr != "x:2" || next.CommitIndex != 10 {
		t.Fatalf("a moved follower: %+v", next)
	}
	if len(ls.Followers) != 1 || ls.Followers[0].Addr != "x:1" {
		t.Fatal("membership changed its argument")
	}
	next, _ = membership(ls, followerInfo{ID: "b"}, 4)
	if len(next.Followers) != 2 || next.CommitIndex != 9 {
		t.Fatalf("a new follower: %+v (the commit index never decreases)", next)
	}
}

// Batching in virtual time: a partial batch is cut after FlushInterval,
// a full one at once, each one log write.
// TestLoopBatchingInVirtualTime: a lone command is written at once, not
// after FlushInterval; commands that arrive while a write is in flight go
// into the next write together; a batch is still cut at FlushInterval
// while it waits for the pipeline.
func TestLoopBatchingInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		fs := faultstore.New(mem)
		const putTime = 100 * time.Millisecond
		fs.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(putTime))
		opts := testOptions()
		opts.BatchMinCount, opts.FlushInterval, opts.PipelineDepth = 10, time.Second, 1
		a := newTestNode(t, fs, "a", opts)
		ls, version, _ := a.gs.readLeaderState(t.Context())
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = a.lead(ls, version)
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if a.Status().Role != "LEADER" {
			t.Fatal("a does not lead")
		}
		l := leaderOf(t, a)
		// A session first, through the log like any command: at index 2,
		// written at once.
		reg := &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Register: true, Client: "v#1"},
			start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
		l.enqueue(reg)
		time.Sleep(2 * putTime)
		synctest.Wait()
		var r *rsmpb.StateResponse
		select {
		case r = <-reg.done:
		default:
			t.Fatalf("a lone registration not answered after %v (FlushInterval %v)", 2*putTime, opts.FlushInterval)
		}
		if r.Status != rsmpb.Status_OK || r.Index != 2 || len(r.Result) != 8 {
			t.Fatalf("registration: %v at %d, want OK at 2", r.Status, r.Index)
		}
		session := binary.BigEndian.Uint64(r.Result)
		cmd := func(seq uint64) *pending {
			p := newCommand("v#1", seq)
			p.req.Session = session
			return p
		}
		answer := func(p *pending, index uint64) {
			t.Helper()
			select {
			case r := <-p.done:
				if r.Status != rsmpb.Status_OK || r.Index != index {
					t.Fatalf("command %d: %v at %d, want OK at %d", p.req.Seq, r.Status, r.Index, index)
				}
			default:
				t.Fatalf("command %d not answered", p.req.Seq)
			}
		}
		// One command goes at once; two arriving while it is in flight
		// share the next write.
		first := cmd(1)
		l.enqueue(first)
		synctest.Wait()
		busy := []*pending{cmd(2), cmd(3)}
		for _, p := range busy {
			l.enqueue(p)
		}
		time.Sleep(4 * putTime)
		synctest.Wait()
		answer(first, 3)
		for _, p := range busy {
			answer(p, 4)
		}
		// With the pipeline held longer than FlushInterval, a waiting
		// batch is cut at FlushInterval: a command arriving after that
		// goes into the write after.
		fs.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(3*time.Second))
		held, early, late := cmd(4), cmd(5), cmd(6)
		l.enqueue(held)
		synctest.Wait()
		l.enqueue(early)
		time.Sleep(1500 * time.Millisecond)
		l.enqueue(late)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		answer(held, 5)
		answer(early, 6)
		answer(late, 7)
		a.Node.cancel()
		a.wg.Wait()
	})
}

// TestWindowBatchBytes: commands are batched so that no log entry exceeds
// what the leader can send a follower in one message; a command that fits
// in no entry is refused.
func TestWindowBatchBytes(t *testing.T) {
	w := testWindow(1, 100)
	big := func(seq uint64, size int) *pending {
		p := cmd(seq)
		p.req.Data = make([]byte, size)
		return p
	}
	size := DefaultMaxMessageSize / 3
	for i := range 3 {
		if _, _, _, tooLarge := w.take(big(uint64(i+1), size), time.Time{}); tooLarge {
			t.Fatalf("command %d of %d bytes refused", i+1, size)
		}
	}
	w.cutCommands()
	w.depth = 4
	var entries []*rsmpb.Entry
	for wr := w.nextWrite(); wr != nil; wr = w.nextWrite() {
		wr.entry.Writer, wr.entry.Nonce, wr.entry.Group = "node-a", record.NewNonce(), "g"
		entries = append(entries, wr.entry)
	}
	if len(entries) != 2 {
		t.Fatalf("three commands of a third of MaxMessageSize went into %d entries, want 2", len(entries))
	}
	for _, e := range entries {
		if got := proto.Size(e); got > DefaultMaxMessageSize-syncReserve {
			t.Errorf("entry %d of %d bytes: above the %d a follower can be sent", e.Index, got, DefaultMaxMessageSize-syncReserve)
		}
	}
	if _, _, _, tooLarge := w.take(big(9, DefaultMaxMessageSize-2048), time.Time{}); !tooLarge {
		t.Error("a command that fits in no entry was taken")
	}
	if len(w.cmds) != 0 {
		t.Errorf("the refused command is batched: %d", len(w.cmds))
	}
}

func TestWindowCacheBytes(t *testing.T) {
	w := testWindow(1, 1)
	w.cacheSize = 1000
	w.cacheMax = 10 << 10
	big := func(i uint64, n int) *rsmpb.Entry {
		return &rsmpb.Entry{Index: i, Term: 5, Commands: []*rsmpb.Command{{Machine: "c", Data: make([]byte, n)}}}
	}
	for i := uint64(1); i <= 20; i++ {
		w.cacheEntry(big(i, 1<<10))
	}
	if w.cacheBytes > w.cacheMax {
		t.Fatalf("%d bytes cached, bound %d", w.cacheBytes, w.cacheMax)
	}
	if w.cache[20] == nil || w.cache[1] != nil || len(w.cache) < 8 || len(w.cache) > 10 {
		t.Fatalf("cached %d entries from %d; want the newest, about 9 KiB of them", len(w.cache), w.cacheLow)
	}
	sum := 0
	for _, e := range w.cache {
		sum += proto.Size(e)
	}
	if sum != w.cacheBytes {
		t.Fatalf("cacheBytes %d, entries hold %d", w.cacheBytes, sum)
	}
	// An entry above the bound alone stays: followers are sent it from here.
	w.cacheEntry(big(21, 20<<10))
	if len(w.cache) != 1 || w.cache[21] == nil {
		t.Fatalf("after an entry above the bound: %d cached", len(w.cache))
	}
	// Replacing an entry (a slot taken by a stale writer) counts once.
	w.cacheEntry(big(21, 1<<10))
	if want := proto.Size(big(21, 1<<10)); w.cacheBytes != want {
		t.Fatalf("cacheBytes %d after a replacement, want %d", w.cacheBytes, want)
	}
	if got := cacheMaxBytes(DefaultMaxMessageSize); got != 8<<20 {
		t.Errorf("default bound %d, want 8 MiB", got)
	}
	if got := cacheMaxBytes(10 << 20); got != 40<<20 {
		t.Errorf("bound for 10 MiB messages %d, want 4 of them", got)
	}
}

// TestWindowCacheWithoutFollowers: a leader without followers caches only
// what the stored snapshot does not cover (its next segment is cut from
// the cache); with a follower it keeps LogCacheSize entries, and a
// follower that registers after the trim is sent what the cache still
// holds, read from the store what the snapshot does not cover, and told
// to catch up from the store for the rest.
func TestWindowCacheWithoutFollowers(t *testing.T) {
	w := testWindow(1, 1)
	w.snapEvery, w.cacheSize = 10, 100
	for i := uint64(1); i <= 30; i++ {
		w.cacheEntry(&rsmpb.Entry{Index: i, Term: 1})
	}
	if len(w.cache) != 30 {
		t.Fatalf("%d entries cached before any snapshot; want all 30", len(w.cache))
	}
	w.snapshotWritten(20, "v1", snapshot.Stats{Base: 1000})
	w.cacheEntry(&rsmpb.Entry{Index: 31, Term: 1})
	if len(w.cache) != 11 || w.cacheLow != 21 || w.cache[20] != nil || w.cache[21] == nil {
		t.Fatalf("after a snapshot to 20: %d cached from %d; want 21..31", len(w.cache), w.cacheLow)
	}
	w.confirmed = 31
	w.holdSegment()
	if j := w.snapshotToWrite(); j == nil || j.From != 21 || j.End != 30 || len(j.Entries) != 10 {
		t.Fatalf("segment job %+v; want 21..30 from the cache", j)
	}
	sum := 0
	for _, e := range w.cache {
		sum += proto.Size(e)
	}
	if sum != w.cacheBytes {
		t.Fatalf("cacheBytes %d, entries hold %d", w.cacheBytes, sum)
	}

	w.register(followerInfo{ID: "f", ApplyIndex: 31})
	w.snapshotWritten(31, "v2", snapshot.Stats{Base: 1000, Segs: 100})
	for i := uint64(32); i <= 40; i++ {
		w.cacheEntry(&rsmpb.Entry{Index: i, Term: 1})
	}
	if len(w.cache) != 20 || w.cacheLow != 21 {
		t.Fatalf("with a follower: %d cached from %d; want 21..40 kept", len(w.cache), w.cacheLow)
	}

	// Alone again, the next entry trims to the stored snapshot; a
	// follower that comes back behind it catches up from the store.
	w.unregister("f")
	w.confirmed = 41
	w.cacheEntry(&rsmpb.Entry{Index: 41, Term: 1})
	if len(w.cache) != 10 || w.cacheLow != 32 {
		t.Fatalf("alone again: %d cached from %d; want 32..41", len(w.cache), w.cacheLow)
	}
	w.register(followerInfo{ID: "g", ApplyIndex: 25})
	if j := w.syncPlan(w.followers["g"], time.Unix(1000, 0), time.Second, 100, 1<<20); j == nil || !j.tooFar || len(j.entries) != 0 {
		t.Fatalf("plan for a follower behind the snapshot and the cache: %+v; want catch up from the store", j)
	}
	w.register(followerInfo{ID: "h", ApplyIndex: 31})
	if j := w.syncPlan(w.followers["h"], time.Unix(1000, 0), time.Second, 100, 1<<20); j == nil || j.tooFar || len(j.entries) != 10 || j.entries[0].Index != 32 {
		t.Fatalf("plan for a follower at the snapshot: %+v; want 32..41 from the cache", j)
	}
}

// TestWindowLingersForAnsweredClients: with one write in flight, a batch
// waits for the clients the leader is answering (their commands come
// back a round trip after the answer) instead of leaving them to the
// write after; a lone client is never kept waiting, and clients that do
// not come back hold a batch at most twice their turnaround, never longer
// than a write takes.
func TestWindowLingersForAnsweredClients(t *testing.T) {
	w := testWindow(1, 100)
	t0 := time.Unix(1000, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	seq := uint64(0)
	take := func(n int, at time.Time) {
		for range n {
			seq++
			w.take(cmd(seq), at)
		}
	}
	// commit writes the cut batch, settles it and issues its round.
	commit := func(at time.Time) int {
		t.Helper()
		wr := w.nextWrite()
		if wr == nil {
			t.Fatal("no write to start")
		}
		w.wrote(wr.entry.Index, nil, nil, 600*time.Microsecond)
		if w.settle() != wr {
			t.Fatal("write not settled")
		}
		w.wait(waiter{batch: wr.batch, entry: wr.entry, results: make([]result, len(wr.batch))})
		if w.startRound() == nil {
			t.Fatal("no round")
		}
		return len(wr.batch)
	}
	release := func(at time.Time) {
		t.Helper()
		r := w.rounds[0]
		w.roundDone(r.id, nil)
		if out, err := w.released(at); len(out) != 1 || err != nil {
			t.Fatalf("released %d rounds, %v", len(out), err)
		}
	}
	cut := func(at time.Time) (bool, time.Time) {
		c, wake := w.cutIfRoom(at)
		return c, wake
	}

	// A lone client: written at once, every time.
	take(1, us(0))
	if c, _ := cut(us(0)); !c {
		t.Fatal("a lone command waits with nothing in flight")
	}
	commit(us(600))
	release(us(700))
	take(1, us(800)) // the client comes back after 100µs
	if c, wake := cut(us(800)); !c || !wake.IsZero() {
		t.Fatalf("the lone client's next command waits (until %v)", wake)
	}
	commit(us(1400))

	release(us(1500)) // and it stops

	// Four clients answered while four others queue: the queued batch
	// waits for the round, then for the four to come back.
	take(4, us(1600))
	if c, _ := cut(us(1600)); !c {
		t.Fatal("four commands with nothing in flight wait")
	}
	commit(us(2200))
	take(4, us(2250))
	if c, wake := cut(us(2250)); c || !wake.IsZero() {
		t.Fatalf("cut %v (wake %v) while the clients of the batch in its round are about to be answered", c, wake)
	}
	release(us(2300))
	c, wake := cut(us(2300))
	if c || !wake.Equal(us(2500)) {
		t.Fatalf("after the release: cut %v, wake %v, want a wait until twice the 100µs turnaround", c, wake)
	}
	take(3, us(2380))
	if c, _ := cut(us(2380)); c {
		t.Fatal("cut with one answered client still on its way")
	}
	take(1, us(2400))
	if c, _ := cut(us(2400)); !c {
		t.Fatal("not cut once every answered client came back")
	}
	if n := commit(us(3000)); n != 8 {
		t.Fatalf("the write carries %d commands, want all 8", n)
	}

	// Clients that do not come back hold the batch until the wait ends.
	release(us(3100))
	take(2, us(3200))
	if c, _ := cut(us(3200)); c {
		t.Fatal("cut with six answered clients still on their way")
	}
	if c, _ := cut(w.lg.at.Add(2*w.lg.turn + time.Nanosecond)); !c {
		t.Fatalf("still waiting past twice the turnaround (%v)", w.lg.turn)
	}
	commit(us(3800))

	// A write that takes less than the turnaround caps the wait.
	w.lg.write = 10 * time.Microsecond
	release(us(3900))
	take(1, us(3905))
	if c, wake := cut(us(3905)); c || !wake.Equal(us(3910)) {
		t.Fatalf("cut %v, wake %v: want a wait of at most one write (10µs)", c, wake)
	}
	if c, _ := cut(us(3911)); !c {
		t.Fatal("still waiting past one write's duration")
	}
}

// TestLoopClosedLoopClientsShareOneWrite: eight clients that each send
// their next command when answered end up in one log write per round
// trip, not split into groups that take turns (each write carrying half
// of them), in virtual time.
func TestLoopClosedLoopClientsShareOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		fs.SetLatency(faultstore.OpPutCreate, faultstore.Fixed(100*time.Millisecond))
		fs.SetLatency(faultstore.OpGet, faultstore.Fixed(10*time.Millisecond))
		opts := testOptions()
		opts.BatchMinCount, opts.FlushInterval, opts.PipelineDepth = 100, time.Second, 1
		opts.RequestTimeout = time.Minute
		a := newTestNode(t, fs, "a", opts)
		ls, version, _ := a.gs.readLeaderState(t.Context())
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = a.lead(ls, version)
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		l := leaderOf(t, a)
		const clients, rounds = 8, 30
		var mu sync.Mutex
		perIndex := map[uint64]int{}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := fmt.Sprintf("c%d#1", c)
				reg := newCommand(client, 0)
				reg.req.Register, reg.req.Machine = true, ""
				l.enqueue(reg)
				r := <-reg.done
				if r.Status != rsmpb.Status_OK || len(r.Result) != 8 {
					t.Errorf("client %d: registration %v %s", c, r.Status, r.Message)
					return
				}
				session := binary.BigEndian.Uint64(r.Result)
				for i := range rounds {
					p := newCommand(client, uint64(i+1))
					p.req.Session = session
					l.enqueue(p)
					r := <-p.done
					if r.Status != rsmpb.Status_OK {
						t.Errorf("client %d: %v %s", c, r.Status, r.Message)
						return
					}
					mu.Lock()
					perIndex[r.Index]++
					mu.Unlock()
					time.Sleep(time.Millisecond) // the client's round trip
				}
			}()
		}
		wg.Wait()
		a.Node.cancel()
		a.wg.Wait()
		// The first writes may split the clients; from then on each
		// write carries all of them.
		full := 0
		for _, n := range perIndex {
			if n == clients {
				full++
			}
		}
		if len(perIndex) > rounds+4 || full < rounds-4 {
			t.Fatalf("%d commands took %d writes, %d of them with all %d clients; want about one write per round (%d)", clients*rounds, len(perIndex), full, clients, rounds)
		}
	})
}

// A lone read is answered after one confirmation read, however long
// FlushInterval is; reads sent while a round is in flight are answered by
// the next round, together.
func TestLoopLoneReadWaitsOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		const get = 10 * time.Millisecond
		fs.SetLatency(faultstore.OpGet, faultstore.Fixed(get))
		opts := testOptions()
		opts.BatchMinCount, opts.FlushInterval, opts.PipelineDepth = 100, time.Minute, 1
		opts.RequestTimeout = 10 * time.Minute
		a := newTestNode(t, fs, "a", opts)
		ls, version, _ := a.gs.readLeaderState(t.Context())
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_ = a.lead(ls, version)
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		l := leaderOf(t, a)
		read := func() *pending {
			p := &pending{req: &rsmpb.StateRequest{Type: rsmpb.RequestType_READ, Machine: "c"},
				start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
			l.enqueue(p)
			return p
		}
		start := time.Now()
		r := <-read().done
		if r.Status != rsmpb.Status_OK {
			t.Fatalf("read: %v %s", r.Status, r.Message)
		}
		if took := time.Since(start); took != get {
			t.Fatalf("a lone read took %v of virtual time, want one confirmation read (%v), not FlushInterval (%v)", took, get, opts.FlushInterval)
		}
		// Three reads: the first opens a round, the other two arrive
		// while it is in flight and share the next one.
		start = time.Now()
		first := read()
		synctest.Wait()
		second, third := read(), read()
		for i, p := range []*pending{first, second, third} {
			if r := <-p.done; r.Status != rsmpb.Status_OK {
				t.Fatalf("read %d: %v %s", i, r.Status, r.Message)
			}
		}
		if took := time.Since(start); took != 2*get {
			t.Fatalf("three reads took %v of virtual time, want two rounds (%v)", took, 2*get)
		}
		a.Node.cancel()
		a.wg.Wait()
	})
}
