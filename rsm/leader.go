package rsm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// errDeposed ends a leadership: a higher term exists, or this leader can no
// longer tell what it wrote.
var errDeposed = errors.New("rsm: deposed")

// pending is one state request waiting for its response.
type pending struct {
	req   *rsmpb.StateRequest
	start time.Time
	done  chan *rsmpb.StateResponse // buffered 1
}

func (p *pending) reply(r *rsmpb.StateResponse) {
	r.Id = p.req.Id
	select {
	case p.done <- r:
	default:
	}
}

// slot is one log index a command batch was written to.
type slot struct {
	entry *rsmpb.Entry
	batch []*pending
	found *rsmpb.Entry // another writer's entry in the slot
	err   error
	done  chan struct{}
}

// waiter is released by the next confirmation round: ok when the read of
// leader_state.json issued after it registered still showed our term.
type waiter func(ok bool)

// leaderRun is one term of leadership on a node.
type leaderRun struct {
	n      *Node
	term   uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	reqs    chan *pending
	batches chan []*pending
	slots   chan *slot
	depth   chan struct{} // PipelineDepth tokens: writes not yet handled in order

	count chan struct{} // MaxConcurrentRequests tokens

	mu          sync.Mutex
	ls          leaderState
	lsVersion   string
	waiters     []waiter
	wake        chan struct{}
	confirmed   uint64
	next        uint64 // next log index to write
	cache       map[uint64]*rsmpb.Entry
	cacheLow    uint64 // lowest cached index
	newEntries  chan struct{}
	snapEnd     uint64 // end index of the newest snapshot known
	snapVersion string
	snapping    bool
	syncers     map[string]*syncer
	followerIdx map[string]uint64
}

func newLeaderRun(n *Node, term uint64, ls leaderState, version string) *leaderRun {
	ctx, cancel := context.WithCancelCause(n.ctx)
	return &leaderRun{
		n: n, term: term, ctx: ctx, cancel: cancel,
		reqs:        make(chan *pending, n.opts.MaxConcurrentRequests),
		batches:     make(chan []*pending),
		slots:       make(chan *slot, n.opts.PipelineDepth),
		depth:       make(chan struct{}, n.opts.PipelineDepth),
		count:       make(chan struct{}, n.opts.MaxConcurrentRequests),
		ls:          ls,
		lsVersion:   version,
		wake:        make(chan struct{}, 1),
		cache:       map[uint64]*rsmpb.Entry{},
		newEntries:  make(chan struct{}),
		syncers:     map[string]*syncer{},
		followerIdx: map[string]uint64{},
	}
}

func (l *leaderRun) depose(cause error) {
	if cause == nil {
		cause = errDeposed
	}
	l.cancel(cause)
}

// takeover loads the log, writes the seal and confirms the term. Only after
// it returns nil does the leader serve.
func (l *leaderRun) takeover() error {
	n := l.n
	for attempt := 0; ; attempt++ {
		if err := l.ctx.Err(); err != nil {
			return context.Cause(l.ctx)
		}
		if attempt > 0 {
			if err := sleepCtx(l.ctx, n.gs.backoff(min(attempt, 4))); err != nil {
				return context.Cause(l.ctx)
			}
		}
		snapEnd, snapVersion, err := n.catchUp(l.ctx)
		if err != nil {
			n.noteCorrupt(err)
			n.log.Warn("takeover: catch-up failed", "term", l.term, "err", err)
			continue
		}
		n.repMu.Lock()
		maxTerm, applied := n.rep.maxTerm, n.rep.applied
		n.repMu.Unlock()
		if maxTerm > l.term {
			return fmt.Errorf("%w: the log holds term %d, above ours (%d)", errDeposed, maxTerm, l.term)
		}
		// The seal: a no-op of our term at the first index not yet written.
		index := applied + 1
		sealed := false
		for !sealed {
			seal := &rsmpb.Entry{Index: index, Term: l.term, Writer: n.host.cfg.ID, Nonce: newNonce(), Noop: true,
				Settings: n.sealSettings()} // a new group's settings (session.go)
			found, err := n.gs.createEntry(l.ctx, seal)
			switch {
			case err != nil:
				// Unknown: read the log again from the top.
				n.log.Warn("takeover: seal write failed", "index", index, "err", err)
			case found == nil:
				// Our seal landed (or was emptied by a truncation, which the
				// snapshot check below detects).
				n.repMu.Lock()
				n.rep.apply(seal)
				n.repMu.Unlock()
				sealed = true
				continue
			default:
				n.repMu.Lock()
				valid, _ := n.rep.apply(found)
				maxTerm := n.rep.maxTerm
				n.repMu.Unlock()
				if valid && maxTerm > l.term {
					return fmt.Errorf("%w: met term %d at index %d before our seal", errDeposed, maxTerm, index)
				}
				index++
				continue
			}
			break
		}
		if !sealed {
			n.resetReplica()
			continue
		}
		// A seal counts only if the snapshot has not moved past it.
		snap, version, err := n.gs.readSnapshot(l.ctx)
		if err != nil {
			n.noteCorrupt(err)
			n.resetReplica()
			continue
		}
		if snap != nil && snap.EndIndex >= index {
			n.log.Info("takeover: a snapshot moved past the seal; taking over again from it", "seal", index, "snapshot_end", snap.EndIndex)
			continue
		}
		if snap != nil {
			snapEnd, snapVersion = snap.EndIndex, version
		}
		if err := l.confirmOnce(); err != nil {
			return err
		}
		l.mu.Lock()
		l.next = index + 1
		l.confirmed = index
		l.snapEnd, l.snapVersion = snapEnd, snapVersion
		l.mu.Unlock()
		n.log.Info("leading", "term", l.term, "seal", index)
		return nil
	}
}

// confirmOnce reads leader_state.json and fails unless it still shows our term.
func (l *leaderRun) confirmOnce() error {
	n := l.n
	start := time.Now()
	ls, _, err := n.gs.readLeaderState(l.ctx)
	n.m.leaderCheck.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
	n.m.confirmReads.WithLabelValues(n.group).Inc()
	if err != nil {
		n.noteCorrupt(err)
		return err
	}
	if ls.Term != l.term || ls.LeaderID != n.host.cfg.ID {
		n.observeLeader(ls)
		return fmt.Errorf("%w: leader_state.json shows term %d of %s", errDeposed, ls.Term, ls.LeaderID)
	}
	return nil
}

// serve runs the leader's goroutines until it is deposed or the node stops.
func (l *leaderRun) serve() error {
	l.wg.Add(4)
	go func() { defer l.wg.Done(); l.batcher() }()
	go func() { defer l.wg.Done(); l.committer() }()
	go func() { defer l.wg.Done(); l.orderer() }()
	go func() { defer l.wg.Done(); l.confirmer() }()
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.finishTruncation() }()
	<-l.ctx.Done()
	l.wg.Wait()
	l.mu.Lock()
	syncers := l.syncers
	l.syncers = map[string]*syncer{}
	l.mu.Unlock()
	for _, s := range syncers {
		s.stop()
	}
	// Fail whatever is still queued.
	for {
		select {
		case p := <-l.reqs:
			l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
		default:
			return context.Cause(l.ctx)
		}
	}
}

// enqueue accepts a request in order. It never blocks: a full leader
// answers BUSY.
func (l *leaderRun) enqueue(p *pending) {
	select {
	case <-l.ctx.Done():
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
		return
	default:
	}
	select {
	case l.count <- struct{}{}:
	default:
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_BUSY, Message: "too many pending requests"})
		return
	}
	l.n.m.concurrent.WithLabelValues(l.n.group).Inc()
	l.reqs <- p // room is guaranteed by count
}

func (l *leaderRun) finish(p *pending, r *rsmpb.StateResponse) {
	n := l.n
	typ := p.req.Type.String()
	n.m.handle.WithLabelValues(n.group, typ).Observe(time.Since(p.start).Seconds())
	n.m.handled.WithLabelValues(n.group, typ, r.Status.String()).Inc()
	n.m.concurrent.WithLabelValues(n.group).Dec()
	r.Term = l.term
	p.reply(r)
	<-l.count
}

// batcher accumulates requests by type and flushes a batch after
// FlushInterval or at BatchMinCount, whichever is first. Reads are answered
// here, in sequence with the commands the orderer applies (both hold repMu).
func (l *leaderRun) batcher() {
	o := l.n.opts
	var cmds, reads []*pending
	var cmdTimer, readTimer <-chan time.Time
	flushCmds := func() {
		b := cmds
		cmds, cmdTimer = nil, nil
		select {
		case l.batches <- b:
		case <-l.ctx.Done():
			for _, p := range b {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
			}
		}
	}
	flushReads := func() {
		b := reads
		reads, readTimer = nil, nil
		l.answerReads(b)
	}
	for {
		select {
		case <-l.ctx.Done():
			for _, p := range append(cmds, reads...) {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
			}
			return
		case p := <-l.reqs:
			if p.req.Type == rsmpb.RequestType_READ {
				reads = append(reads, p)
				if len(reads) == 1 {
					readTimer = time.After(o.FlushInterval)
				}
				if len(reads) >= o.BatchMinCount {
					flushReads()
				}
				continue
			}
			cmds = append(cmds, p)
			if len(cmds) == 1 {
				cmdTimer = time.After(o.FlushInterval)
			}
			if len(cmds) >= o.BatchMinCount {
				flushCmds()
			}
		case <-cmdTimer:
			flushCmds()
		case <-readTimer:
			flushReads()
		}
	}
}

// answerReads computes every read on the current state, then holds the
// answers until a confirmation round issued after now shows our term.
func (l *leaderRun) answerReads(b []*pending) {
	n := l.n
	n.m.handledBatches.WithLabelValues(n.group, "READ").Inc()
	answers := make([]*rsmpb.StateResponse, len(b))
	start := time.Now()
	n.repMu.Lock()
	for i, p := range b {
		m, ok := n.rep.machines[p.req.Machine]
		if !ok {
			answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_MACHINE, Message: p.req.Machine}
			continue
		}
		out, err := m.Query(p.req.Data)
		switch {
		case err != nil:
			answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_ERROR, Message: err.Error()}
		case len(out) > n.opts.MaxMessageSize-1024:
			answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_TOO_LARGE, Message: fmt.Sprintf("result of %d bytes", len(out))}
		default:
			answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_OK, Result: out}
		}
	}
	n.repMu.Unlock()
	n.m.application.WithLabelValues(n.group, "READ").Observe(time.Since(start).Seconds())
	l.addWaiter(func(ok bool) {
		for i, p := range b {
			if ok {
				l.finish(p, answers[i])
			} else {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
			}
		}
	})
}

// committer gives each command batch the next log index and writes it,
// with up to PipelineDepth writes in flight.
func (l *leaderRun) committer() {
	defer close(l.slots)
	n := l.n
	for {
		select {
		case l.depth <- struct{}{}: // released by the orderer
		case <-l.ctx.Done():
			return
		}
		var b []*pending
		select {
		case <-l.ctx.Done():
			return
		case b = <-l.batches:
		}
		l.mu.Lock()
		index := l.next
		l.next++
		l.mu.Unlock()
		e := &rsmpb.Entry{Index: index, Term: l.term, Writer: n.host.cfg.ID, Nonce: newNonce()}
		for _, p := range b {
			e.Commands = append(e.Commands, commandOf(p.req))
		}
		s := &slot{entry: e, batch: b, done: make(chan struct{})}
		select {
		case l.slots <- s:
		case <-l.ctx.Done():
			for _, p := range b {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
			}
			return
		}
		go func() {
			defer close(s.done)
			start := time.Now()
			s.found, s.err = n.gs.createEntry(l.ctx, e)
			n.m.logAppend.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
		}()
	}
}

// orderer handles written slots strictly in index order: it applies each
// landed entry and registers its acknowledgement with the next
// confirmation round, so an entry is acknowledged only when every index
// from the seal up to it holds our entry or a lower-term one we skipped.
func (l *leaderRun) orderer() {
	n := l.n
	deposed := false
	for s := range l.slots {
		<-s.done
		<-l.depth
		if deposed {
			for _, p := range s.batch {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME, Message: "leadership ended with this batch in flight"})
			}
			continue
		}
		e := s.entry
		switch {
		case s.err != nil:
			n.noteCorrupt(s.err)
			n.m.logAppendFail.WithLabelValues(n.group, "unknown").Inc()
			n.log.Warn("log write outcome unknown; stepping down", "index", e.Index, "err", s.err)
			l.depose(fmt.Errorf("%w: the write of index %d has an unknown outcome: %v", errDeposed, e.Index, s.err))
			deposed = true
			for _, p := range s.batch {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME, Message: s.err.Error()})
			}
			continue
		case s.found != nil && s.found.Term < l.term:
			// A deposed leader's late write took the slot: it is invalid
			// for every replica (our seal's term is higher). Our batch did
			// not commit; its requests are retried by their nodes.
			n.m.logAppendFail.WithLabelValues(n.group, "stale_writer").Inc()
			n.repMu.Lock()
			n.rep.apply(s.found)
			n.repMu.Unlock()
			l.cacheEntry(s.found)
			for _, p := range s.batch {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED, Message: "slot taken by a stale writer"})
			}
			continue
		case s.found != nil:
			n.m.logAppendFail.WithLabelValues(n.group, "concurrent_state_modification").Inc()
			l.depose(fmt.Errorf("%w: index %d holds term %d (ours %d)", errDeposed, e.Index, s.found.Term, l.term))
			deposed = true
			for _, p := range s.batch {
				l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED, Message: "a newer leader took the slot"})
			}
			continue
		}
		n.m.committed.WithLabelValues(n.group).Inc()
		n.m.handledBatches.WithLabelValues(n.group, "COMMAND").Inc()
		start := time.Now()
		n.repMu.Lock()
		_, results := n.rep.apply(e)
		n.repMu.Unlock()
		n.m.application.WithLabelValues(n.group, "COMMAND").Observe(time.Since(start).Seconds())
		n.m.applyIndex.WithLabelValues(n.group).Set(float64(e.Index))
		batch := s.batch
		l.addWaiter(func(ok bool) {
			if !ok {
				for _, p := range batch {
					l.finish(p, &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME, Message: "leadership ended before the batch was confirmed"})
				}
				return
			}
			l.cacheEntry(e)
			l.advance(e.Index)
			for i, p := range batch {
				r := results[i]
				l.finish(p, &rsmpb.StateResponse{Status: r.status, Result: r.data, Index: e.Index})
			}
		})
	}
}

func (l *leaderRun) addWaiter(w waiter) {
	l.mu.Lock()
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// confirmer runs confirmation rounds: one read of leader_state.json,
// issued after every waiter it releases registered, confirms them all. Up
// to PipelineDepth rounds are in flight, so batches that land while a read
// is out need not wait for it to end before theirs starts; rounds release
// their waiters in the order they were issued, so acknowledgements keep
// log order.
func (l *leaderRun) confirmer() {
	type round struct {
		ws   []waiter
		err  error
		done chan struct{}
	}
	depth := l.n.opts.PipelineDepth
	queue := make(chan *round, depth)
	tokens := make(chan struct{}, depth) // rounds in flight
	released := make(chan struct{})
	go func() {
		defer close(released)
		failed := false
		for r := range queue {
			<-r.done
			if r.err != nil && !failed {
				failed = true
				l.depose(r.err)
			}
			for _, w := range r.ws {
				w(!failed)
			}
			<-tokens
			if !failed {
				l.maybeSnapshot()
			}
		}
	}()
	defer func() {
		close(queue)
		<-released
		l.mu.Lock()
		ws := l.waiters
		l.waiters = nil
		l.mu.Unlock()
		for _, w := range ws {
			w(false)
		}
	}()
	// An idle leader still checks its term now and then, so that one
	// deposed while nothing was asked of it stops saying it leads.
	idle := time.Duration(l.n.opts.MaxMissedHeartbeats) * l.n.opts.HeartbeatInterval
	tick := time.NewTicker(idle)
	defer tick.Stop()
	rounds := 0
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.wake:
		case <-tick.C:
			if rounds == 0 {
				if err := l.confirmOnce(); errors.Is(err, errDeposed) {
					l.depose(err)
					return
				}
			}
			rounds = 0
			continue
		}
		l.mu.Lock()
		ws := l.waiters
		l.waiters = nil
		l.mu.Unlock()
		if len(ws) == 0 {
			continue
		}
		rounds++
		r := &round{ws: ws, done: make(chan struct{})}
		select {
		case tokens <- struct{}{}: // blocks while PipelineDepth rounds are in flight
		case <-l.ctx.Done():
			for _, w := range ws {
				w(false)
			}
			return
		}
		queue <- r // room: at most depth rounds hold tokens
		go func() {
			defer close(r.done)
			for attempt := 0; ; attempt++ {
				if r.err = l.confirmOnce(); r.err == nil || errors.Is(r.err, errDeposed) || l.ctx.Err() != nil {
					return
				}
				l.n.log.Warn("confirmation read failed; retrying", "err", r.err)
				if sleepCtx(l.ctx, l.n.gs.backoff(min(attempt+1, 5))) != nil {
					return
				}
			}
		}()
	}
}

// advance records index as confirmed and wakes the synchronizers.
func (l *leaderRun) advance(index uint64) {
	l.mu.Lock()
	if index > l.confirmed {
		l.confirmed = index
		close(l.newEntries)
		l.newEntries = make(chan struct{})
	}
	l.mu.Unlock()
}

func (l *leaderRun) cacheEntry(e *rsmpb.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cache[e.Index] = e
	if l.cacheLow == 0 || e.Index < l.cacheLow {
		l.cacheLow = e.Index
	}
	for len(l.cache) > l.n.opts.LogCacheSize {
		delete(l.cache, l.cacheLow)
		l.cacheLow++
	}
}

// maybeSnapshot starts a snapshot when SnapshotThreshold entries were
// confirmed since the last one.
func (l *leaderRun) maybeSnapshot() {
	n := l.n
	l.mu.Lock()
	due := !l.snapping && l.confirmed >= l.snapEnd+uint64(n.opts.SnapshotThreshold)
	if due {
		l.snapping = true
	}
	l.mu.Unlock()
	if !due {
		return
	}
	// Capture the state now (repMu: in sequence with applies); write it only
	// once every index it covers is confirmed, so a deposed leader's
	// unconfirmed entries never reach a snapshot.
	n.repMu.Lock()
	snap, err := n.rep.snapshot()
	n.repMu.Unlock()
	if err != nil {
		n.log.Error("snapshot failed", "err", err)
		l.mu.Lock()
		l.snapping = false
		l.mu.Unlock()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() {
			l.mu.Lock()
			l.snapping = false
			l.mu.Unlock()
		}()
		for {
			l.mu.Lock()
			confirmed, ch := l.confirmed, l.newEntries
			l.mu.Unlock()
			if confirmed >= snap.EndIndex {
				break
			}
			select {
			case <-ch:
			case <-l.ctx.Done():
				return
			}
		}
		if err := l.writeSnapshot(snap); err != nil {
			n.log.Warn("snapshot not written", "end", snap.EndIndex, "err", err)
			return
		}
		l.truncate(snap.StartIndex, snap.EndIndex)
	}()
}

func (l *leaderRun) writeSnapshot(snap *rsmpb.Snapshot) error {
	n := l.n
	start := time.Now()
	defer func() { n.m.snapshotUpload.WithLabelValues(n.group).Observe(time.Since(start).Seconds()) }()
	// The snapshot only moves forward: compare-and-swap on the version
	// this leader last read or wrote, and never replace a snapshot that
	// ends later. Only if another writer moved it is it read again.
	l.mu.Lock()
	end, version := l.snapEnd, l.snapVersion
	l.mu.Unlock()
	var v string
	for attempt := 0; ; attempt++ {
		if end >= snap.EndIndex {
			return fmt.Errorf("the stored snapshot already ends at %d", end)
		}
		if end > 0 {
			snap.StartIndex = end + 1
		}
		snap.Writer, snap.WriterTerm, snap.Nonce = n.host.cfg.ID, l.term, newNonce()
		var err error
		v, err = n.gs.writeSnapshot(l.ctx, snap, version)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || store.IsAmbiguous(err) || attempt > 0 {
			return err
		}
		cur, cv, rerr := n.gs.readSnapshot(l.ctx)
		if rerr != nil {
			return rerr
		}
		end, version = 0, cv
		if cur != nil {
			end = cur.EndIndex
		}
	}
	l.mu.Lock()
	if snap.EndIndex > l.snapEnd {
		l.snapEnd, l.snapVersion = snap.EndIndex, v
	}
	l.mu.Unlock()
	n.setSnapshotIndex(snap.EndIndex)
	n.log.Debug("snapshot written", "start", snap.StartIndex, "end", snap.EndIndex)
	return nil
}

// truncate deletes the log entries a snapshot covers. An interrupted
// truncation is finished by the next leader (finishTruncation).
func (l *leaderRun) truncate(from, to uint64) {
	n := l.n
	start := time.Now()
	defer func() { n.m.logTruncate.WithLabelValues(n.group).Observe(time.Since(start).Seconds()) }()
	// List from the start of the log, not from `from`: what an earlier
	// truncation left behind goes too. One page is enough for this
	// snapshot's entries plus some leftovers; the rest go next time.
	idx, err := n.gs.listLog(l.ctx, 0, int(min(to-from+1, 10000))+64)
	if err != nil {
		if l.ctx.Err() == nil {
			n.log.Warn("truncation: list failed", "err", err)
		}
		return
	}
	// Deletes are independent: a few at a time, so truncation keeps up
	// with the log on a slow store.
	const workers = 8
	work := make(chan uint64)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := n.gs.deleteEntry(l.ctx, i); err != nil && l.ctx.Err() == nil {
					n.log.Warn("truncation: delete failed; the next truncation retries", "index", i, "err", err)
				}
			}
		}()
	}
	for _, i := range idx {
		if i > to {
			break
		}
		select {
		case work <- i:
		case <-l.ctx.Done():
		}
		if l.ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
}

// finishTruncation deletes entries a snapshot covers that an earlier
// leader left behind, and stale writers' late creates at or below it.
func (l *leaderRun) finishTruncation() {
	l.mu.Lock()
	end := l.snapEnd
	l.mu.Unlock()
	if end == 0 {
		return
	}
	l.truncate(1, end)
}
