package rsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
)

// errDeposed ends a leadership: a higher term exists, or this leader can no
// longer tell what it wrote.
var errDeposed = errors.New("rsm: deposed")

// errStoreLost ends a leadership whose store calls got no answer for the
// heartbeat timeout: it steps down so a node that reaches the store takes
// over (docs/rsm.md, "Availability").
var errStoreLost = errors.New("rsm: the store does not answer")

// pending is one state request waiting for its response.
type pending struct {
	req      *rsmpb.StateRequest
	start    time.Time
	done     chan *rsmpb.StateResponse // buffered 1
	finished bool                      // answered by a leader; touched only by its loop
}

func (p *pending) reply(r *rsmpb.StateResponse) {
	r.Id = p.req.Id
	select {
	case p.done <- r:
	default:
	}
}

// leaderRun is one term of leadership on a node. Its protocol state (the
// window) is owned by one goroutine, the loop, which runs on the node's
// lead call; workers do the store calls and RPCs and report back to it as
// events. Other goroutines reach the loop only through channels (reqs,
// follows) and read what Status shows from a copy under mu.
type leaderRun struct {
	n      *Node
	term   uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // workers

	w *window // the loop's

	// enqueue and the end of the loop agree under qmu, so that no request
	// is queued after the loop has answered what was queued.
	qmu    sync.Mutex
	closed bool
	reqs   chan *pending
	// MaxConcurrentRequests tokens for commands, and as many for reads:
	// a node numbers and sends up to MaxConcurrentRequests commands at
	// once (client.slots), and reads in flight beside them must not
	// make the leader refuse one of those BUSY, for the numbers after
	// it would then be refused out of sequence and resent.
	count, readCount chan struct{}

	events  chan any
	follows chan followReq

	ls        leaderState // the loop's: leader_state.json as last written
	lsVersion string
	members   []followReq // Follow requests waiting for the membership write in progress
	writingLS bool
	// lingerUntil: the command batch waits for clients on their way back
	// until then (window.cutIfRoom); the loop's.
	lingerUntil time.Time
	dupLogged   map[string]string // by follower ID, the incarnation last refused as a second process with it

	// The snapshot workers' (one at a time): this leadership's nonce in
	// its segments' names, and whether the next swap sweeps leftovers
	// (the first of a leadership, and after a failure).
	segNonce string
	sweep    bool

	mu        sync.Mutex
	view      []FollowerStatus // for Status and Leave
	confirmed atomic.Uint64

	concurrent prometheus.Gauge
	handled    map[[2]int32]prometheus.Counter // by request type and status; the loop's
	handleTime map[int32]prometheus.Observer   // by request type; the loop's
}

func newLeaderRun(n *Node, term uint64, ls leaderState, version string) *leaderRun {
	ctx, cancel := context.WithCancelCause(n.ctx)
	l := &leaderRun{
		n: n, term: term, ctx: ctx, cancel: cancel,
		w:          newWindow(term, n.opts),
		reqs:       make(chan *pending, 2*n.opts.MaxConcurrentRequests),
		count:      make(chan struct{}, n.opts.MaxConcurrentRequests),
		readCount:  make(chan struct{}, n.opts.MaxConcurrentRequests),
		events:     make(chan any, 4*n.opts.PipelineDepth+16),
		follows:    make(chan followReq),
		dupLogged:  map[string]string{},
		ls:         ls,
		lsVersion:  version,
		concurrent: n.m.concurrent.WithLabelValues(n.group),
		handled:    map[[2]int32]prometheus.Counter{},
		handleTime: map[int32]prometheus.Observer{},
		segNonce:   newNonceHex(),
		sweep:      true,
	}
	l.w.entryRoom = entryRoom(n.opts.MaxMessageSize, n.host.cfg.ID, n.group)
	l.w.unpacked = !n.gs.logPacked.Load() && n.gs.st.Packs()
	for _, f := range ls.Followers {
		l.view = append(l.view, FollowerStatus(f))
	}
	return l
}

func (l *leaderRun) depose(cause error) {
	if cause == nil {
		cause = errDeposed
	}
	l.cancel(cause)
}

// report hands a worker's result to the loop; after the end of the
// leadership it is dropped.
func (l *leaderRun) report(ev any) {
	select {
	case l.events <- ev:
	case <-l.ctx.Done():
	}
}

// goWork runs f as a worker the leadership waits for.
func (l *leaderRun) goWork(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// enqueue accepts a request in order. It never blocks: a full leader
// answers BUSY, an ended one NOT_LEADER.
func (l *leaderRun) enqueue(p *pending) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.closed || l.ctx.Err() != nil {
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
		return
	}
	select {
	case l.tokens(p) <- struct{}{}:
	default:
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_BUSY, Message: "too many pending requests"})
		return
	}
	l.concurrent.Inc()
	l.reqs <- p // room is guaranteed by count
}

// finish answers p and gives back its token, once (rule 11: each
// request's token and gauge are released exactly once).
func (l *leaderRun) finish(p *pending, r *rsmpb.StateResponse) {
	if p.finished {
		return
	}
	p.finished = true
	n := l.n
	typ := int32(p.req.Type)
	h := l.handleTime[typ]
	if h == nil {
		h = n.m.handle.WithLabelValues(n.group, p.req.Type.String())
		l.handleTime[typ] = h
	}
	h.Observe(time.Since(p.start).Seconds())
	key := [2]int32{typ, int32(r.Status)}
	c := l.handled[key]
	if c == nil {
		c = n.m.handled.WithLabelValues(n.group, p.req.Type.String(), r.Status.String())
		l.handled[key] = c
	}
	c.Inc()
	l.concurrent.Dec()
	r.Term = l.term
	// The token is back before the answer: a node that sends its next
	// command on hearing this one is never refused BUSY for it.
	<-l.tokens(p)
	p.reply(r)
}

// tokens is the pool p's request takes its token from.
func (l *leaderRun) tokens(p *pending) chan struct{} {
	if p.req.Type == rsmpb.RequestType_READ {
		return l.readCount
	}
	return l.count
}

// Events the workers report to the loop.
type (
	writeResult struct {
		index uint64
		found *rsmpb.Entry
		err   error
		took  time.Duration
	}
	// visibleResult: the store reported the write of index visible, before
	// it is durable (store.WithVisible).
	visibleResult struct{ index uint64 }
	roundResult   struct {
		id  uint64
		err error
	}
	snapshotResult struct {
		end     uint64
		version string
		stats   snapshot.Stats // of its manifest
		err     error
	}
	truncated  struct{}
	packResult struct {
		packed bool
		err    error
	}
)

// serve runs the loop until the leadership ends, then waits for the
// workers.
func (l *leaderRun) serve() error {
	if l.w.snapEnd > 0 {
		// Entries a snapshot covers that an earlier leader left behind,
		// and stale writers' late creates at or below it.
		end := l.w.snapEnd
		l.goWork(func() { l.truncate(1, end) })
	}
	l.loop()
	l.cancel(errDeposed) // no-op if already ended
	l.wg.Wait()
	return context.Cause(l.ctx)
}

// loop owns the window: it takes requests, worker results and follower
// registrations, applies the protocol's decisions and starts the I/O they
// call for. When leadership ends it answers every outstanding request at
// once.
func (l *leaderRun) loop() {
	n, w := l.n, l.w
	o := n.opts
	var cmdTimer, readTimer, syncTimer, lingerTimer *time.Timer
	var cmdC, readC, syncC, lingerC <-chan time.Time
	var syncAt, lingerAt time.Time
	stop := func(t *time.Timer) {
		if t != nil {
			t.Stop()
		}
	}
	defer func() { stop(cmdTimer); stop(readTimer); stop(syncTimer); stop(lingerTimer) }()
	limit := time.Duration(o.MaxMissedHeartbeats) * o.HeartbeatInterval
	idle := time.NewTicker(limit)
	defer idle.Stop()
	// Availability checks: a store that stopped answering, a follower cut off.
	check := time.NewTicker(max(o.HeartbeatInterval/2, time.Millisecond))
	defer check.Stop()
	var busySince, storeOK time.Time // store work in flight since; its last answer
	storeOK = time.Now()
	take := func(p *pending) {
		read, started, full, tooLarge := w.take(p, time.Now())
		switch {
		case tooLarge:
			l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_TOO_LARGE,
				Message: fmt.Sprintf("command of %d bytes: a log entry carries at most %d (MaxMessageSize %d)", commandSize(p), w.entryRoom, o.MaxMessageSize)})
		case read && full:
			stop(readTimer)
			readC = nil
			l.answerReads(w.cutReads())
		case read && started:
			readTimer = time.NewTimer(o.FlushInterval)
			readC = readTimer.C
		case full:
			stop(cmdTimer)
			cmdC = nil
			w.cutCommands()
		case started:
			cmdTimer = time.NewTimer(o.FlushInterval)
			cmdC = cmdTimer.C
		}
	}
	for {
		if l.ctx.Err() != nil {
			l.end()
			return
		}
		select {
		case <-l.ctx.Done():
			continue
		case p := <-l.reqs:
			take(p)
		case <-cmdC:
			cmdC = nil
			w.cutCommands()
		case <-readC:
			readC = nil
			l.answerReads(w.cutReads())
		case <-syncC:
			syncC, syncAt = nil, time.Time{}
		case <-lingerC:
			lingerC, lingerAt = nil, time.Time{}
		case <-idle.C:
			w.idleTick()
		case now := <-check.C:
			if !busySince.IsZero() {
				if d := now.Sub(later(busySince, storeOK)); d >= limit {
					n.log.Warn("the store does not answer; stepping down so a node that reaches it takes over", "term", l.term, "for", d.Round(time.Millisecond))
					l.depose(fmt.Errorf("%w for %v", errStoreLost, d.Round(time.Millisecond)))
					continue
				}
			}
			l.dropUnreachable(now, limit/2)
		case fr := <-l.follows:
			l.members = append(l.members, fr)
		case ev := <-l.events:
			if storeAnswered(ev) {
				storeOK = time.Now()
			}
			l.handle(ev)
		}
		// Take what else is ready before deciding, so that a round or a
		// write covers all of it.
		for more := true; more && l.ctx.Err() == nil; {
			select {
			case ev := <-l.events:
				if storeAnswered(ev) {
					storeOK = time.Now()
				}
				l.handle(ev)
			case p := <-l.reqs:
				take(p)
			default:
				more = false
			}
		}
		if l.ctx.Err() != nil {
			continue
		}
		l.progress()
		switch busy := len(w.writes) > 0 || len(w.rounds) > 0; {
		case busy && busySince.IsZero():
			busySince = time.Now()
		case !busy:
			busySince = time.Time{}
		}
		if len(w.cmds) == 0 && cmdC != nil {
			stop(cmdTimer) // cut because the pipeline had room
			cmdC = nil
		}
		if len(w.reads) == 0 && readC != nil {
			stop(readTimer) // cut because a round had room
			readC = nil
		}
		if at := l.lingerUntil; !at.IsZero() && !at.Equal(lingerAt) {
			stop(lingerTimer)
			lingerAt = at
			lingerTimer = time.NewTimer(time.Until(at))
			lingerC = lingerTimer.C
		}
		if at := w.nextSync(o.HeartbeatInterval); !at.IsZero() && !at.Equal(syncAt) {
			stop(syncTimer)
			syncAt = at
			syncTimer = time.NewTimer(time.Until(at))
			syncC = syncTimer.C
		}
	}
}

// storeAnswered says ev is a log write or confirmation read the store
// answered: the store is reachable.
func storeAnswered(ev any) bool {
	switch ev := ev.(type) {
	case writeResult:
		return ev.err == nil
	case roundResult:
		return ev.err == nil || errors.Is(ev.err, errDeposed)
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dropUnreachable removes from leader_state.json a follower the leader
// has not reached for bound while it reaches another (window.unreachable):
// the change shows the follower, which reads leader_state.json before it
// attempts leadership, that the leader lives and reaches the others.
func (l *leaderRun) dropUnreachable(now time.Time, bound time.Duration) {
	if l.writingLS {
		return
	}
	id := l.w.unreachable(now, bound)
	if id == "" {
		return
	}
	next := l.ls
	next.Followers = slices.DeleteFunc(slices.Clone(l.ls.Followers), func(x followerInfo) bool { return x.ID == id })
	next.CommitIndex = max(l.w.confirmed, l.ls.CommitIndex)
	l.writingLS = true
	prev := l.lsVersion
	l.n.log.Warn("a follower does not answer; dropping it from the membership", "follower", id, "for", bound)
	l.goWork(func() {
		v, err := l.writeMembers(next, prev)
		l.report(memberResult{drop: id, ls: next, version: v, err: err})
	})
}

// dropped takes the result of a drop.
func (l *leaderRun) dropped(r memberResult) {
	if r.err != nil {
		if errors.Is(r.err, errDeposed) {
			l.depose(r.err)
		}
		return
	}
	r.ls.Counter++
	l.ls, l.lsVersion = r.ls, r.version
	if l.w.unregister(r.drop) {
		l.n.m.synchronizers.WithLabelValues(l.n.group).Dec()
	}
	l.publish()
}

// handle applies one worker's result to the window.
func (l *leaderRun) handle(ev any) {
	n, w := l.n, l.w
	switch ev := ev.(type) {
	case writeResult:
		w.wrote(ev.index, ev.found, ev.err, ev.took)
		for wr := w.settle(); wr != nil; wr = w.settle() {
			if !l.settled(wr) {
				return
			}
		}
	case visibleResult:
		w.visible(ev.index)
	case roundResult:
		w.roundDone(ev.id, ev.err)
		rounds, err := w.released(time.Now())
		for _, r := range rounds {
			for _, wt := range r.ws {
				l.release(wt)
			}
		}
		if err != nil {
			l.depose(err)
			return
		}
		if len(rounds) > 0 {
			l.maybeSnapshot()
		}
	case snapshotResult:
		// On error too: a newer snapshot found is not written over again.
		w.snapshotWritten(ev.end, ev.version, ev.stats)
		if ev.err != nil {
			n.log.Warn("snapshot not written", "err", ev.err)
			w.snapBusy = false
		}
	case truncated:
		w.snapBusy = false
	case packResult:
		w.packDone(ev.packed, time.Now())
		switch {
		case ev.packed:
			n.log.Info("the log is packed now: the store appends its entries to segment files", "term", l.term)
		case ev.err != nil && l.ctx.Err() == nil:
			n.log.Warn("could not ask the store to pack the log; it is stored as before", "err", ev.err)
		}
	case syncResult:
		l.synced(ev)
	case memberResult:
		l.membered(ev)
	case probeResult:
		l.probed(ev)
	}
}

// settled handles one write in index order (rule 4). It returns false when
// the leadership ends.
func (l *leaderRun) settled(wr *write) bool {
	n, w := l.n, l.w
	e := wr.entry
	switch w.outcome(wr) {
	case unsettled:
		n.noteCorrupt(wr.err)
		n.m.logAppendFail.WithLabelValues(n.group, "unknown").Inc()
		n.log.Warn("log write outcome unknown; stepping down", "index", e.Index, "err", wr.err)
		for _, p := range wr.batch {
			l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME, Message: wr.err.Error()})
		}
		l.depose(fmt.Errorf("%w: the write of index %d has an unknown outcome: %w", errDeposed, e.Index, wr.err))
		return false
	case overtaken:
		n.m.logAppendFail.WithLabelValues(n.group, "concurrent_state_modification").Inc()
		for _, p := range wr.batch {
			l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED, Message: "a newer leader took the slot"})
		}
		l.depose(fmt.Errorf("%w: index %d holds term %d (ours %d)", errDeposed, e.Index, wr.found.Term, l.term))
		return false
	case skipped:
		// A deposed leader's late write took the slot: it is invalid for
		// every replica (our seal's term is higher). Our batch did not
		// commit; its requests are retried by their nodes.
		n.m.logAppendFail.WithLabelValues(n.group, "stale_writer").Inc()
		n.rep.do(func(r *replica) { r.apply(wr.found) })
		w.cacheEntry(wr.found)
		for _, p := range wr.batch {
			l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED, Message: "slot taken by a stale writer"})
		}
		return true
	}
	n.m.committed.WithLabelValues(n.group).Inc()
	n.m.handledBatches.WithLabelValues(n.group, "COMMAND").Inc()
	start := time.Now()
	var results []result
	n.rep.do(func(r *replica) { _, results = r.apply(e) })
	n.m.application.WithLabelValues(n.group, "COMMAND").Observe(time.Since(start).Seconds())
	n.m.applyIndex.WithLabelValues(n.group).Set(float64(e.Index))
	if wt, now := w.waitLanded(wr, results, time.Now()); now {
		l.release(wt)
		l.maybeSnapshot()
	}
	return true
}

// release answers a confirmed waiter.
func (l *leaderRun) release(wt waiter) {
	if wt.entry == nil {
		for i, p := range wt.batch {
			l.finish(p, wt.answers[i])
		}
		return
	}
	l.w.confirm(wt)
	l.confirmed.Store(l.w.confirmed)
	for i, p := range wt.batch {
		r := wt.results[i]
		l.finish(p, &rsmpb.StateResponse{Status: r.status, Result: r.data, Index: wt.entry.Index})
	}
}

// end answers every outstanding request when the leadership ends, with
// what is known of it (window.drain), and gives back every token: rule
// 11, every request is answered (docs/rsm.md).
func (l *leaderRun) end() {
	l.qmu.Lock()
	l.closed = true
	l.qmu.Unlock()
	for _, a := range l.w.drain() {
		l.finish(a.p, &rsmpb.StateResponse{Status: a.status, Message: a.msg})
	}
	for {
		select {
		case p := <-l.reqs:
			st := rsmpb.Status_NOT_COMMITTED
			if p.req.Type == rsmpb.RequestType_READ {
				st = rsmpb.Status_NOT_LEADER
			}
			l.finish(p, &rsmpb.StateResponse{Status: st, Message: "leadership ended"})
			continue
		default:
		}
		break
	}
	for _, fr := range l.members {
		fr.reply <- followReply{err: errDeposed}
	}
	l.members = nil
	for range l.w.followers {
		l.n.m.synchronizers.WithLabelValues(l.n.group).Dec()
	}
	l.w.followers = map[string]*follower{}
}

// progress starts the I/O the window's state calls for: writes with room
// in the pipeline, a confirmation round, a snapshot, a membership change,
// follower sends.
func (l *leaderRun) progress() {
	n, w := l.n, l.w
	_, l.lingerUntil = w.cutIfRoom(time.Now())
	for wr := w.nextWrite(); wr != nil; wr = w.nextWrite() {
		wr.entry.Writer, wr.entry.Nonce, wr.entry.Group = n.host.cfg.ID, record.NewNonce(), n.group
		e := wr.entry
		// The store may say when the write is visible, before its sync: a
		// confirmation round issued then runs beside the sync (rule 5(b),
		// window.visible). The store may hold its locks while it says so:
		// a full queue drops the news, and the write waits for a round
		// issued after it lands, as with any store.
		ctx := store.WithVisible(l.ctx, func() {
			select {
			case l.events <- visibleResult{index: e.Index}:
			default:
			}
		})
		l.goWork(func() {
			start := time.Now()
			found, err := n.gs.createEntry(ctx, e)
			took := time.Since(start)
			n.m.logAppend.WithLabelValues(n.group).Observe(took.Seconds())
			l.report(writeResult{index: e.Index, found: found, err: err, took: took})
		})
	}
	l.answerReads(w.readsIfRoom())
	if r := w.startRound(); r != nil {
		id := r.id
		l.goWork(func() { l.report(roundResult{id: id, err: l.confirmRound()}) })
	}
	if w.quietBaseDue() {
		w.calm = false // once per quiet period, whether or not the capture succeeds
		l.holdBase()
	}
	switch w.packNext(time.Now(), l.ls.Followers) {
	case packSnapshot:
		l.snapshotNow()
	case packTry:
		l.goWork(func() {
			packed, err := n.gs.packLog(l.ctx)
			l.report(packResult{packed: packed, err: err})
		})
	}
	if j := w.snapshotToWrite(); j != nil {
		l.goWork(func() { l.snapshot(j) })
	}
	if !l.writingLS && len(l.members) > 0 {
		fr := l.members[0]
		l.members = l.members[1:]
		l.member(fr)
	}
	if len(w.followers) > 0 {
		l.syncFollowers()
	}
}

// confirmRound reads leader_state.json for one round, retrying errors
// that leave the term unknown. It is rule 5(b)'s and rule 6's read (an
// acknowledgement or a read's answer waits for it to show our term), and
// rule 12's: a corrupt leader_state.json ends the leadership at once.
func (l *leaderRun) confirmRound() error {
	for attempt := 0; ; attempt++ {
		err := l.confirmOnce()
		if err == nil || errors.Is(err, errDeposed) || l.ctx.Err() != nil {
			return err
		}
		if errors.Is(err, ErrCorrupt) {
			// The term cannot be confirmed until an operator repairs
			// leader_state.json: the leadership ends and requests fail at
			// once naming it (rule 12) rather than wait out their
			// deadlines. The node retries and leads again once it reads.
			l.n.setProblem(err)
			return fmt.Errorf("%w: %w", errDeposed, err)
		}
		l.n.log.Warn("confirmation read failed; retrying", "err", err)
		if sleepCtx(l.ctx, l.n.gs.backoff(min(attempt+1, 5))) != nil {
			return context.Cause(l.ctx)
		}
	}
}

// answerReads computes every read on the current state, then holds the
// answers until a confirmation round issued after now shows our term
// (rule 6).
func (l *leaderRun) answerReads(b []*pending) {
	if len(b) == 0 {
		return
	}
	n := l.n
	n.m.handledBatches.WithLabelValues(n.group, "READ").Inc()
	answers := make([]*rsmpb.StateResponse, len(b))
	start := time.Now()
	n.rep.do(func(r *replica) {
		for i, p := range b {
			out, ok, err := r.query(p.req.Machine, p.req.Data)
			switch {
			case !ok:
				answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_MACHINE, Message: p.req.Machine}
			case err != nil:
				answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_ERROR, Message: err.Error()}
			case len(out) > n.opts.MaxMessageSize-1024:
				answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_TOO_LARGE, Message: fmt.Sprintf("result of %d bytes", len(out))}
			default:
				answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_OK, Result: out}
			}
		}
	})
	n.m.application.WithLabelValues(n.group, "READ").Observe(time.Since(start).Seconds())
	l.w.wait(waiter{batch: b, answers: answers})
}

// packedDeleteWorkers is the deletes a truncation of a packed log issues
// at once.
const packedDeleteWorkers = 128

// followerStatus is the followers as the loop last saw them.
func (l *leaderRun) followerStatus() []FollowerStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]FollowerStatus(nil), l.view...)
}

// publish copies what Status shows out of the loop's state.
func (l *leaderRun) publish() {
	view := make([]FollowerStatus, 0, len(l.ls.Followers))
	for _, f := range l.ls.Followers {
		fs := FollowerStatus(f)
		if s := l.w.followers[f.ID]; s != nil {
			fs.ApplyIndex, fs.Meta = s.applied, s.info.Meta
		}
		view = append(view, fs)
	}
	l.mu.Lock()
	l.view = view
	l.mu.Unlock()
}
