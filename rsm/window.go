package rsm

import (
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// window is a leader's protocol state: requests being batched, log writes
// in flight, waiters, confirmation rounds, the entry cache, snapshots and
// follower synchronization. One goroutine owns it (leaderRun.loop); its
// methods are the protocol's decisions and do no I/O, start no goroutine
// and read no clock (the time is passed in where heartbeats need it).
type window struct {
	term      uint64
	depth     int // PipelineDepth: writes and confirmation rounds in flight
	minBatch  int // BatchMinCount
	cacheSize int // LogCacheSize
	snapEvery uint64
	// entryRoom bounds the bytes of a batch's commands, so that its log
	// entry can be sent to a follower in one message (MaxMessageSize, less
	// what a Synchronize request and the entry's own fields take).
	entryRoom int

	next      uint64 // next log index to write
	confirmed uint64 // highest index acknowledged by a confirmation round

	cmds, reads []*pending   // batching
	cmdBytes    int          // encoded size of cmds' commands
	ready       [][]*pending // command batches cut, waiting for room in the pipeline
	writes      []*write     // log writes in flight, in index order

	waiting []waiter // registered since the last round was issued
	rounds  []*round // issued, in order
	roundID uint64
	lastOut uint64 // the id of the last round released
	probe   bool   // a round is wanted even with no waiter (idle check, follower saw a newer term)
	// shown: a write was reported visible (window.visible) since the last
	// round was issued; the next round confirms it before it is durable.
	shown  bool
	issued int  // rounds issued since the last idle tick
	taken  int  // commands taken since the last idle tick
	ticked bool // an idle tick came in this leadership
	calm   bool // no command was taken in the last whole idle period

	cache      map[uint64]*rsmpb.Entry
	cacheLow   uint64
	cacheBytes int // encoded size of the cached entries
	cacheMax   int // bound on cacheBytes (cacheMaxBytes)

	snapEnd     uint64 // end index of the newest snapshot known
	snapVersion string
	snapBase    uint64        // bytes of its base; 0 if it is not a manifest (or none): the next snapshot writes a base
	snapSegs    uint64        // bytes of its segments
	snapSegN    int           // and how many there are
	snapBusy    bool          // a snapshot is captured, being written or truncating
	snapHeld    *snapshot.Job // waiting until every index it covers is confirmed

	// Moving a log stored as separate objects into a pack (packNext).
	unpacked    bool                 // the store can pack the log, and has not
	packing     bool                 // a try is under way
	packAfter   time.Time            // no try before (after a failed one)
	packBackoff time.Duration        // the wait after the next failed try
	readsPacks  map[string]bool      // by member: its version reads a packed log, as it last registered
	packHeard   map[string]time.Time // nodes of the term before, since this leadership began (expectVersions)
	packGrace   time.Duration        // how long one of them is waited for

	followers map[string]*follower

	lg linger // when a batch waits for the clients just answered

	mutation mutation // zero but in the simulator's mutation check
}

// linger is what the leader knows of its clients' round trips. A client
// that waits for each answer before its next command comes back a round
// trip after the answer; a batch cut while such clients are on their way
// back leaves them to the next write, and with one write in flight the
// clients split into groups that take turns, each write carrying a part of
// them. Waiting for them instead (cutIfRoom) lets one write carry all.
type linger struct {
	at     time.Time     // the last release of committed commands
	expect int           // commands released then
	back   int           // commands taken since
	turn   time.Duration // moving average: from a release to a command it prompted
	write  time.Duration // moving average: a log write's duration
}

// maxTurn bounds a turnaround sample: a command that comes later than
// this after a release is not one the release prompted.
const maxTurn = 100 * time.Millisecond

// average moves a toward d by an eighth (d alone when a is still zero).
func average(a, d time.Duration) time.Duration {
	if a == 0 {
		return d
	}
	return a + (d-a)/8
}

func newWindow(term uint64, o Options) *window {
	return &window{term: term, depth: o.PipelineDepth, minBatch: o.BatchMinCount, cacheSize: o.LogCacheSize,
		snapEvery: uint64(o.SnapshotThreshold), entryRoom: entryRoom(o.MaxMessageSize, "", ""),
		cache: map[uint64]*rsmpb.Entry{}, cacheMax: cacheMaxBytes(o.MaxMessageSize), followers: map[string]*follower{},
		readsPacks: map[string]bool{}, packHeard: map[string]time.Time{},
		packGrace: packGraceFactor * time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval}
}

// cacheMaxBytes bounds the bytes of the leader's entry cache besides its
// count (LogCacheSize): a follower is sent at most MaxMessageSize at a
// time, so a cache of many large batches holds memory no send needs at
// once; a follower further behind reads the rest from the store.
func cacheMaxBytes(maxMessage int) int { return max(8<<20, 4*maxMessage) }

// syncReserve is what a Synchronize request takes besides its entries
// (leaderRun.syncFollowers sends at most MaxMessageSize less this).
const syncReserve = 4096

// entryRoom is the room for commands in one log entry written by writer
// in group: what a follower can be sent (MaxMessageSize less syncReserve)
// less the entry's own fields at their largest.
func entryRoom(maxMessage int, writer, group string) int {
	fixed := proto.Size(&rsmpb.Entry{Index: math.MaxUint64, Term: math.MaxUint64, Commit: math.MaxUint64,
		Writer: writer, Nonce: make([]byte, 12), Group: group})
	return maxMessage - syncReserve - fixed - 64
}

// commandSize is the bytes p's command adds to an entry.
func commandSize(p *pending) int {
	n := proto.Size(commandOf(p.req))
	return n + protowire.SizeTag(1) + protowire.SizeVarint(uint64(n))
}

// write is one log index a command batch was written to.
type write struct {
	entry *rsmpb.Entry
	batch []*pending
	done  bool
	found *rsmpb.Entry // another writer's entry in the slot
	err   error        // the outcome is unknown
	// visible: the store reported the write visible before it was durable
	// (window.visible), when round after was the last issued; a round issued
	// later confirms it (rule 5(b)).
	visible bool
	after   uint64
}

// waiter is released by the next confirmation round issued after it
// registered: a committed batch (index > 0) with its results, or a read
// batch with its answers.
type waiter struct {
	batch   []*pending
	entry   *rsmpb.Entry
	results []result
	answers []*rsmpb.StateResponse
}

// round is one read of leader_state.json confirming the waiters it holds.
type round struct {
	id   uint64
	ws   []waiter
	done bool
	err  error
}

// follower is one follower's synchronization state.
type follower struct {
	info     followerInfo
	inc      string // its process's incarnation (FollowRequest)
	gen      uint64 // bumped when it registers again: results of older sends are ignored
	next     uint64 // next index to send
	applied  uint64 // its apply index, as it last reported
	inflight bool
	lastSent time.Time
	retryAt  time.Time
	failures int
	heardAt  time.Time // its registration or last successful synchronization
}

// take adds p to its batch. started says p opened the batch (its flush
// timer starts); full that the batch reached BatchMinCount. A command
// that would take the batch's entry past what a follower can be sent
// closes the batch and opens the next; one that fits in no entry is
// refused (tooLarge) and not taken.
func (w *window) take(p *pending, now time.Time) (read, started, full, tooLarge bool) {
	if p.req.Type == rsmpb.RequestType_READ {
		w.reads = append(w.reads, p)
		return true, len(w.reads) == 1, len(w.reads) >= w.minBatch, false
	}
	size := commandSize(p)
	if size > w.entryRoom {
		return false, false, false, true
	}
	if w.cmdBytes+size > w.entryRoom {
		w.cutCommands()
	}
	w.cmds = append(w.cmds, p)
	w.cmdBytes += size
	w.taken, w.calm = w.taken+1, false
	if w.lg.back < w.lg.expect {
		if d := now.Sub(w.lg.at); d >= 0 && d < maxTurn {
			w.lg.turn = average(w.lg.turn, d)
		}
	}
	w.lg.back++
	return false, len(w.cmds) == 1, len(w.cmds) >= w.minBatch, false
}

// cutCommands closes the command batch; it is written when the pipeline
// has room.
func (w *window) cutCommands() {
	if len(w.cmds) > 0 {
		w.ready = append(w.ready, w.cmds)
		w.cmds, w.cmdBytes = nil, 0
	}
}

// cutIfRoom closes the command batch if the pipeline has room for its
// write now, so a lone command is written at once and what arrives while
// the pipeline is full waits for the next free slot (or its FlushInterval
// or BatchMinCount): a busy leader batches. It waits instead, and says
// until when (zero: until an event), while clients it is answering are
// likely on their way back with their next commands (lingers). It reports
// a cut.
func (w *window) cutIfRoom(now time.Time) (cut bool, wake time.Time) {
	if len(w.cmds) == 0 || len(w.ready) > 0 || len(w.writes) >= w.depth {
		return false, time.Time{}
	}
	if wait, until := w.lingers(now); wait {
		return false, until
	}
	w.cutCommands()
	return true, time.Time{}
}

// lingers says whether the batch should wait for more commands. With one
// write at a time (PipelineDepth 1), while committed commands await their
// confirmation round: their clients hear back within one store read, and
// a write cut without them leaves them a whole write to wait (with more
// writes in flight, the next write takes them at once). Then, after a
// release, until as many commands as it answered came in, for at most
// twice the clients' average turnaround and never longer than a log
// write takes, which is what a write without them would cost. A lone
// client is never kept waiting: its command is the one it was answered
// for. FlushInterval and BatchMinCount still cut the batch.
func (w *window) lingers(now time.Time) (bool, time.Time) {
	if w.depth == 1 && w.answering() > 0 {
		return true, time.Time{}
	}
	lg := &w.lg
	if lg.back >= lg.expect || lg.turn == 0 {
		return false, time.Time{}
	}
	until := lg.at.Add(min(2*lg.turn, lg.write))
	if !now.Before(until) {
		return false, time.Time{}
	}
	return true, until
}

// answering counts the committed commands awaiting a confirmation round.
func (w *window) answering() int {
	n := 0
	for _, wt := range w.waiting {
		if wt.entry != nil {
			n += len(wt.batch)
		}
	}
	for _, r := range w.rounds {
		for _, wt := range r.ws {
			if wt.entry != nil {
				n += len(wt.batch)
			}
		}
	}
	return n
}

// cutReads closes the read batch and returns it, to be answered now.
func (w *window) cutReads() []*pending {
	b := w.reads
	w.reads = nil
	return b
}

// readsIfRoom closes the read batch if a confirmation round can be issued
// for it now (fewer than PipelineDepth in flight), so a lone read is
// answered after one store read instead of waiting out FlushInterval, and
// reads that arrive while the rounds are busy share the next one. Rule 6
// holds either way: the round that releases them is issued after their
// answers are computed.
func (w *window) readsIfRoom() []*pending {
	if len(w.reads) == 0 || len(w.rounds) >= w.depth {
		return nil
	}
	return w.cutReads()
}

// nextWrite gives the oldest cut batch the next log index, if fewer than
// PipelineDepth writes are in flight: rule 4, each batch is one
// create-if-absent of the next index. The caller stamps the nonce and
// writer and starts the write.
func (w *window) nextWrite() *write {
	if len(w.ready) == 0 || len(w.writes) >= w.depth {
		return nil
	}
	b := w.ready[0]
	w.ready = w.ready[1:]
	e := &rsmpb.Entry{Index: w.next, Term: w.term, Commit: w.confirmed}
	w.next++
	for _, p := range b {
		e.Commands = append(e.Commands, commandOf(p.req))
	}
	wr := &write{entry: e, batch: b}
	w.writes = append(w.writes, wr)
	return wr
}

// wrote records the result of the write of index, which took d.
func (w *window) wrote(index uint64, found *rsmpb.Entry, err error, d time.Duration) {
	if err == nil && d > 0 {
		w.lg.write = average(w.lg.write, d)
	}
	if wr := w.inFlight(index); wr != nil {
		wr.done, wr.found, wr.err = true, found, err
	}
}

// inFlight is the write of index in flight, if it is.
func (w *window) inFlight(index uint64) *write {
	if len(w.writes) == 0 || index < w.writes[0].entry.Index {
		return nil
	}
	i := index - w.writes[0].entry.Index
	if i >= uint64(len(w.writes)) {
		return nil
	}
	return w.writes[i]
}

// visible records that the store reported the write of index visible,
// before it is durable (driver.WithVisible): every read issued from now on
// finds it, so a confirmation round issued from now on confirms it (rule
// 5(b)), and one is wanted, to run while the write is made durable. The
// write is still acknowledged only once it lands (waitLanded).
func (w *window) visible(index uint64) {
	wr := w.inFlight(index)
	if wr == nil || wr.visible || wr.done {
		return
	}
	wr.visible, wr.after, w.shown = true, w.roundID, true
}

// settle pops the oldest write if its result is in: results are handled
// strictly in index order (rule 5a).
func (w *window) settle() *write {
	if len(w.writes) == 0 || !w.writes[0].done {
		return nil
	}
	wr := w.writes[0]
	w.writes = w.writes[1:]
	return wr
}

// writeOutcome is what a settled write means (rule 4).
type writeOutcome int

const (
	landed    writeOutcome = iota // ours: apply it and wait for a confirmation round
	skipped                       // a lower term's late write took the slot: not committed, invalid for everyone
	overtaken                     // a higher term took the slot: deposed, not committed
	unsettled                     // the outcome is unknown: deposed, it may be committed
)

// outcome reads a settled write's result (rule 4, commit: docs/rsm.md): a
// slot found taken by a lower-term entry is skipped (invalid for every
// replica, behind our seal) and its batch reported not committed; a slot
// taken by a higher term, a slot emptied under us, or a write whose
// outcome the nonce read-back could not settle deposes the leader.
func (w *window) outcome(wr *write) writeOutcome {
	switch {
	case wr.err != nil:
		return unsettled
	case wr.found == nil:
		return landed
	case wr.found.Term < w.term:
		return skipped
	}
	return overtaken
}

// wait registers a waiter with the next confirmation round.
func (w *window) wait(wt waiter) { w.waiting = append(w.waiting, wt) }

// waitLanded registers the waiter of a landed write, holding its results,
// and reports whether it is confirmed already: rule 5(b) asks for a round
// issued after the write landed. One whose store reported it visible
// before it was durable (window.visible) is confirmed by a round issued
// after that: it joins the last round in flight if that one was, or, with
// no round in flight, is answered at once (true) if such a round came
// back. Either only when no waiter waits for the next round, so that
// acknowledgements keep log order. Any other waits for the next round.
func (w *window) waitLanded(wr *write, results []result, now time.Time) (waiter, bool) {
	wt := waiter{batch: wr.batch, entry: wr.entry, results: results}
	if wr.visible && len(w.waiting) == 0 {
		n := len(w.rounds)
		switch {
		case n > 0 && w.rounds[n-1].id > wr.after:
			w.rounds[n-1].ws = append(w.rounds[n-1].ws, wt)
			return wt, false
		case n == 0 && w.lastOut > wr.after:
			w.answered(len(wt.batch), now)
			return wt, true
		}
	}
	w.wait(wt)
	return wt, false
}

// startRound issues a confirmation round holding every waiting waiter, if
// there is one (or a probe is wanted) and fewer than PipelineDepth rounds
// are in flight. The caller reads leader_state.json for it.
//
// Rule 5(b), acknowledgement (docs/rsm.md): an entry or a read is answered
// only once a read of leader_state.json issued after it landed (or was
// computed) still shows our term: one read per round confirms everything
// waiting when it was issued. A write reported visible before it is
// durable (window.visible) wants a round too, issued while it is made
// durable (waitLanded).
func (w *window) startRound() *round {
	if (len(w.waiting) == 0 && !w.probe && !w.shown) || len(w.rounds) >= w.depth {
		return nil
	}
	w.roundID++
	r := &round{id: w.roundID, ws: w.waiting}
	w.waiting, w.probe, w.shown = nil, false, false
	w.rounds = append(w.rounds, r)
	w.issued++
	return r
}

// roundDone records a round's result.
func (w *window) roundDone(id uint64, err error) {
	for _, r := range w.rounds {
		if r.id == id {
			r.done, r.err = true, err
		}
	}
}

// released pops the finished rounds in the order they were issued, so
// acknowledgements keep log order (rule 5). A failed round is left in place and its
// error returned: leadership ends, and it and every later round fail.
// The commands released at now start a linger (cutIfRoom).
func (w *window) released(now time.Time) ([]*round, error) {
	var out []*round
	answered := 0
	for len(w.rounds) > 0 && w.rounds[0].done {
		r := w.rounds[0]
		if r.err != nil {
			return out, r.err
		}
		w.rounds = w.rounds[1:]
		w.lastOut = r.id
		out = append(out, r)
		for _, wt := range r.ws {
			if wt.entry != nil {
				answered += len(wt.batch)
			}
		}
	}
	w.answered(answered, now)
	return out, nil
}

// answered starts a linger (cutIfRoom) for n committed commands released
// at now.
func (w *window) answered(n int, now time.Time) {
	switch {
	case n == 0:
	case w.lg.at.Equal(now):
		w.lg.expect += n
	default:
		w.lg.at, w.lg.expect, w.lg.back = now, n, 0
	}
}

// confirm records a released write as acknowledged: it is cached for the
// followers and the confirmed index moves to it.
func (w *window) confirm(wt waiter) {
	if wt.entry == nil {
		return
	}
	w.cacheEntry(wt.entry)
	if wt.entry.Index > w.confirmed {
		w.confirmed = wt.entry.Index
	}
}

// cacheEntry keeps e for the followers and the next snapshot segment,
// then drops the oldest entries beyond LogCacheSize or cacheMax bytes (the
// newest always stays). Without followers it keeps only the entries the
// stored snapshot does not cover yet: a follower that registers later
// reads older ones from the store, as one further behind than the cache
// does, and a lone leader holds no memory for nobody.
func (w *window) cacheEntry(e *rsmpb.Entry) {
	if old := w.cache[e.Index]; old != nil {
		w.cacheBytes -= proto.Size(old)
	}
	w.cache[e.Index] = e
	w.cacheBytes += proto.Size(e)
	if w.cacheLow == 0 || e.Index < w.cacheLow {
		w.cacheLow = e.Index
	}
	for len(w.cache) > w.cacheSize || (len(w.cache) > 1 && w.cacheBytes > w.cacheMax) ||
		(len(w.cache) > 1 && len(w.followers) == 0 && w.cacheLow <= w.snapEnd) {
		if old := w.cache[w.cacheLow]; old != nil {
			w.cacheBytes -= proto.Size(old)
			delete(w.cache, w.cacheLow)
		}
		w.cacheLow++
	}
}

// idleTick is called every idle period: a leader that issued no round
// since the last one checks its term with a probe round, so one deposed
// while nothing was asked of it stops saying it leads.
func (w *window) idleTick() {
	if w.issued == 0 {
		w.probe = true
	}
	w.issued = 0
	// The first tick ends a part of a period only.
	w.calm, w.taken, w.ticked = w.ticked && w.taken == 0, 0, true
}

// snapshotDue says a snapshot should be taken now: SnapshotThreshold
// entries were confirmed since the last one and none is under way (rule
// 7, docs/rsm.md: a snapshot covers confirmed indexes only).
func (w *window) snapshotDue() bool {
	return !w.snapBusy && w.confirmed >= w.snapEnd+w.snapEvery
}

// wantsBase says the next snapshot writes a new base rather than a
// segment: the stored snapshot is not a manifest, or its segments have
// grown to baseFactor times its base (docs/rsm.md, "What it costs") or
// to maxSegments.
func (w *window) wantsBase() bool {
	return w.snapBase == 0 || w.snapSegs >= snapshot.BaseFactor*w.snapBase || w.snapSegN >= snapshot.MaxSegments
}

// quietBaseDue says a new base should be taken now, though the segments
// are below baseFactor times the base: the group took no command in the
// last whole idle period and is quiet, entries were confirmed since the
// stored snapshot, and its segments have reached quietBaseFactor times
// its base. A restart after a busy period then reads the base alone,
// while the store bytes per command stay at most log + segment +
// base/quietBaseFactor (docs/rsm.md, "What it costs").
func (w *window) quietBaseDue() bool {
	return w.calm && w.quiet() && w.confirmed > w.snapEnd && w.snapBase > 0 &&
		float64(w.snapSegs) >= snapshot.QuietBaseFactor*float64(w.snapBase)
}

// hold keeps a captured base until every index it covers is confirmed
// (rule 7): a deposed leader's unconfirmed entries never reach a
// snapshot.
func (w *window) hold(s *snapshot.Captured) {
	w.snapBusy, w.snapHeld = true, &snapshot.Job{Base: s, From: w.snapEnd + 1, End: s.Head.EndIndex}
}

// holdSegment takes confirmed entries since the stored snapshot as a
// segment: a multiple of SnapshotThreshold of them (so that a manifest's
// segments are alike and it stays small), with those the cache holds
// (the rest are read from the store).
func (w *window) holdSegment() {
	n := (w.confirmed - w.snapEnd) / w.snapEvery * w.snapEvery
	w.holdSegmentTo(w.snapEnd + n)
}

// holdSegmentTo takes the confirmed entries from the stored snapshot's end
// to end as a segment.
func (w *window) holdSegmentTo(end uint64) {
	j := &snapshot.Job{From: w.snapEnd + 1, End: end}
	first := max(j.From, w.cacheLow)
	for i := first; i <= j.End; i++ {
		e := w.cache[i]
		if e == nil {
			j.Entries = nil // not consecutive up to end: read them all
			break
		}
		j.Entries = append(j.Entries, e)
	}
	w.snapBusy, w.snapHeld = true, j
}

// snapshotToWrite returns the held snapshot once it may be written (rule
// 7: every index it covers is confirmed, so a deposed leader's unconfirmed
// entries never reach a snapshot), with the end and version of the stored
// one it replaces by compare-and-swap.
func (w *window) snapshotToWrite() *snapshot.Job {
	if w.snapHeld == nil || w.confirmed < w.snapHeld.End {
		return nil
	}
	j := w.snapHeld
	w.snapHeld = nil
	j.PrevEnd, j.PrevVersion = w.snapEnd, w.snapVersion
	return j
}

// snapshotWritten records a snapshot written (or found) at end, with its
// base's and segments' bytes and its number of segments (0 if it is not a
// manifest).
func (w *window) snapshotWritten(end uint64, version string, st snapshot.Stats) {
	if end > w.snapEnd {
		w.snapEnd, w.snapVersion = end, version
		w.snapBase, w.snapSegs, w.snapSegN = st.Base, st.Segs, st.Count
	}
}

// packStep is what moving the log into a pack calls for next (packNext).
type packStep int

const (
	packWait     packStep = iota // nothing now
	packSnapshot                 // a snapshot of every confirmed index, after which truncation empties the log
	packTry                      // the log is empty: ask the store to pack it
)

// packBackoffMin and packBackoffMax bound the wait after a failed try:
// each forced a snapshot, and what made it fail (a command that came
// meanwhile, a key the log does not own) may last.
const (
	packBackoffMin = time.Second
	packBackoffMax = 10 * time.Minute
)

// packGraceFactor times the failover bound (MaxMissedHeartbeats ×
// HeartbeatInterval) is how long a node of the term before is waited for
// to follow this leader and tell its version before it is taken for gone.
const packGraceFactor = 5

// expectVersions names the nodes of the term before (its leader and its
// followers): each may run a version without packs, and follow this
// leader soon. The log is not packed until each has told its version, or
// packGrace has passed since now.
func (w *window) expectVersions(ids []string, now time.Time) {
	for _, id := range ids {
		w.packHeard[id] = now
	}
}

// packNext decides the next step of moving a log stored as separate
// objects into a pack, on a store that can pack it (unpacked): a store
// packs only an empty prefix, and a live log always holds the entries
// after the snapshot. So when the group is quiet (nothing batched, in
// flight, waiting or held, every written index confirmed), a snapshot is
// taken of every confirmed index, its truncation empties the log, and the
// store is asked to pack it. A command that comes meanwhile is written as
// before and the try fails; the next quiet moment tries again. Only when
// every member (the followers in the membership) has said, registering
// with this leader, that its version reads a packed log, and so has every
// node of the term before that registered, or packGrace passed without
// it: a node of a version without packs could read and write the log no
// more (docs/rsm.md, "Packed logs").
func (w *window) packNext(now time.Time, members []followerInfo) packStep {
	if !w.unpacked || w.packing || now.Before(w.packAfter) || !w.quiet() {
		return packWait
	}
	for _, m := range members {
		if !w.readsPacks[m.ID] {
			return packWait
		}
	}
	for id, since := range w.packHeard {
		if !w.readsPacks[id] && now.Sub(since) < w.packGrace {
			return packWait
		}
	}
	if w.snapEnd < w.confirmed {
		return packSnapshot
	}
	w.packing = true
	return packTry
}

// quiet says nothing is batched, in flight, waiting or held, and every
// written index is confirmed.
func (w *window) quiet() bool {
	return len(w.cmds) == 0 && len(w.reads) == 0 && len(w.ready) == 0 && len(w.writes) == 0 &&
		len(w.waiting) == 0 && len(w.rounds) == 0 && !w.snapBusy && w.snapHeld == nil && w.confirmed+1 >= w.next
}

// packDone records a try's outcome: packed, or tried again after a wait
// that doubles with each failure.
func (w *window) packDone(packed bool, now time.Time) {
	w.packing = false
	if packed {
		w.unpacked = false
		return
	}
	w.packBackoff = min(max(2*w.packBackoff, packBackoffMin), packBackoffMax)
	w.packAfter = now.Add(w.packBackoff)
}

// register adds or replaces a follower; it reports whether it is new.
func (w *window) register(f followerInfo) bool {
	old := w.followers[f.ID]
	nf := &follower{info: f, next: f.ApplyIndex + 1, applied: f.ApplyIndex}
	if old != nil {
		nf.gen = old.gen + 1
	}
	w.followers[f.ID] = nf
	return old == nil
}

// syncJob is what to send one follower next: entries from the cache, then
// from the store if the cache misses (fetchFrom > 0), or the signal to
// catch up from the store.
type syncJob struct {
	id        string
	gen       uint64
	from      uint64
	confirmed uint64
	entries   []*rsmpb.Entry
	fetchFrom uint64 // first index to read from the store (rule 8), 0 for none
	fetchTo   uint64
	tooFar    bool
}

// syncPlan decides what f is sent now, if anything: confirmed entries it
// lacks (at most maxEntries, within budget bytes), or a heartbeat when
// hb has passed since the last send. Entries the cache misses are read
// from the store; indexes a known snapshot covers are not read at all,
// the follower is told to catch up from the store.
func (w *window) syncPlan(f *follower, now time.Time, hb time.Duration, maxEntries, budget int) *syncJob {
	if f.inflight || now.Before(f.retryAt) {
		return nil
	}
	if f.next > w.confirmed && now.Sub(f.lastSent) < hb {
		return nil
	}
	j := &syncJob{id: f.info.ID, gen: f.gen, from: f.next, confirmed: w.confirmed}
	for i := f.next; i <= w.confirmed && len(j.entries) < maxEntries; i++ {
		e := w.cache[i]
		if e == nil {
			if i <= w.snapEnd {
				j.tooFar = true
			} else {
				j.fetchFrom, j.fetchTo = i, min(w.confirmed, f.next+uint64(maxEntries)-1)
			}
			break
		}
		size := proto.Size(e)
		if size > budget && len(j.entries) > 0 {
			break
		}
		budget -= size
		j.entries = append(j.entries, e)
	}
	f.inflight, f.lastSent = true, now
	return j
}

// synced records a follower's answer: ok moves it on to applied+1; a
// failure backs it off until retryAt. It reports whether the follower is
// done with this leader (told to catch up from the store).
func (w *window) synced(id string, gen uint64, ok, tooFar bool, applied uint64, retryAt time.Time) (known, gone bool) {
	f := w.followers[id]
	if f == nil || f.gen != gen {
		return false, false
	}
	f.inflight = false
	if !ok {
		f.failures++
		f.retryAt = retryAt
		return true, false
	}
	f.failures = 0
	if tooFar {
		delete(w.followers, id)
		return true, true
	}
	f.next, f.applied = applied+1, applied
	return true, false
}

// heard records a successful synchronization of (or the registration of)
// a follower at now.
func (w *window) heard(id string, now time.Time) {
	if f := w.followers[id]; f != nil {
		f.heardAt = now
	}
}

// unreachable picks a follower to drop from the membership: one not heard
// from for bound while another was heard from within it. The leader still
// reaches the group, so it is that follower which is cut off; dropped, it
// does not depose the leader (docs/rsm.md, "Availability"). A leader that
// hears no follower drops none: it may be the one cut off, and then the
// followers must take over.
func (w *window) unreachable(now time.Time, bound time.Duration) string {
	lost, reached := "", false
	for id, f := range w.followers {
		if now.Sub(f.heardAt) < bound {
			reached = true
		} else if lost == "" || id < lost {
			lost = id
		}
	}
	if !reached {
		return ""
	}
	return lost
}

// unregister forgets a follower dropped from the membership; it reports
// whether it was registered.
func (w *window) unregister(id string) bool {
	_, ok := w.followers[id]
	delete(w.followers, id)
	return ok
}

// nextSync is when a follower is next due a send; zero if none waits on
// time.
func (w *window) nextSync(hb time.Duration) time.Time {
	var at time.Time
	for _, f := range w.followers {
		if f.inflight {
			continue
		}
		t := f.lastSent.Add(hb)
		if f.retryAt.After(t) {
			t = f.retryAt
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// answer is how one outstanding request is answered when leadership ends.
type answer struct {
	p      *pending
	status rsmpb.Status
	msg    string
}

// drain empties the window when leadership ends and says how every
// outstanding request is answered (rule 11, docs/rsm.md: every request is
// answered): a command not yet written was not committed; one written or
// being written may have been (its outcome is unknown); a read is retried
// on the next leader.
func (w *window) drain() []answer {
	var out []answer
	add := func(ps []*pending, st rsmpb.Status, msg string) {
		for _, p := range ps {
			out = append(out, answer{p, st, msg})
		}
	}
	add(w.reads, rsmpb.Status_NOT_LEADER, "leadership ended")
	add(w.cmds, rsmpb.Status_NOT_COMMITTED, "leadership ended before the batch was written")
	w.cmdBytes = 0
	for _, b := range w.ready {
		add(b, rsmpb.Status_NOT_COMMITTED, "leadership ended before the batch was written")
	}
	for _, wr := range w.writes {
		add(wr.batch, rsmpb.Status_UNKNOWN_OUTCOME, "leadership ended with this batch in flight")
	}
	waiters := w.waiting
	if w.mutation == mutateDropLateWaiters {
		waiters = nil
	}
	for _, r := range w.rounds {
		waiters = append(waiters, r.ws...)
	}
	for _, wt := range waiters {
		if wt.entry != nil {
			add(wt.batch, rsmpb.Status_UNKNOWN_OUTCOME, "leadership ended before the batch was confirmed")
		} else {
			add(wt.batch, rsmpb.Status_NOT_LEADER, "leadership ended before the read was confirmed")
		}
	}
	w.reads, w.cmds, w.ready, w.writes, w.waiting, w.rounds = nil, nil, nil, nil, nil, nil
	return out
}
