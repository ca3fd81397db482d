package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tenure-io/tenure/internal/notify"
	"github.com/tenure-io/tenure/store"
)

// The member loop: one goroutine owns the member core (membercore.go),
// does the store calls it asks for and feeds it their results, and starts
// and stops the shards' runs it decides. Every RenewPeriod a member renews
// its record (one compare-and-swap) and lists the prefix (one request),
// which returns the version of every member record and of the assignment;
// the assignment is read only when its version changes.

// shardRun is one term of one shard led by this member. Without callbacks
// nothing runs and cancel and done are nil: the term ends when it stops.
type shardRun struct {
	id     string
	term   uint64
	cancel context.CancelFunc
	done   chan struct{} // closed when the callbacks have returned
}

type memberMode struct {
	c    *Coordinator
	core *memberCore // owned by the loop goroutine

	fenceTimer interface{ Stop() bool } // owned by the loop goroutine

	// hookStep, if set (tests only), runs at the top of every round.
	hookStep func()
	// hook, if set (tests only), sees every start and end of a shard's
	// term and every move of the deadline.
	hook func(shard string, leading bool, term uint64, at, deadline time.Time)

	mu        sync.Mutex
	session   string               // the core's, for Status
	runs      map[string]*shardRun // shards we lead
	finishing map[*shardRun]bool   // runs stopped whose callbacks have not returned yet
	busy      map[string]int       // shard -> its runs in finishing
	// ended maps shards to the last term of ours that ended, while the
	// shard may still be assigned to us at it: such a term is never
	// resumed.
	ended     map[string]uint64
	heldGen   uint64 // grows with every start and stop
	notified  uint64 // the heldGen OnChange last reported
	pubShards []string
	pubGen    uint64 // the pendingGen pubShards was built with
	deadline  time.Time
	members   []string
	epoch     uint64
	lastErr   error
	duplicate bool
	adds      []string
	removes   []string
	pendGen   uint64 // grows with every change of adds and removes
	wake      chan struct{}
}

func newMemberMode(c *Coordinator) *memberMode {
	t := memberTiming{lease: c.cfg.LeaseDuration, renewDeadline: c.cfg.renewDeadline(), renewPeriod: c.cfg.RenewPeriod,
		jitter: func(d time.Duration) time.Duration { return store.Jitter(d, 0.2) }}
	session := rand.Text()[:16]
	m := &memberMode{
		c: c, core: newMemberCore(t, c.cfg.Prefix, c.cfg.OwnerID, session), session: session,
		ended: map[string]uint64{},
		runs:  map[string]*shardRun{}, finishing: map[*shardRun]bool{}, busy: map[string]int{},
		wake: make(chan struct{}, 1), pendGen: 1,
	}
	m.adds = slices.Clone(c.cfg.ShardIDs)
	m.pubShards = slices.Compact(slices.Sorted(slices.Values(c.cfg.ShardIDs)))
	return m
}

func (m *memberMode) key(rel string) string { return m.c.cfg.Prefix + rel }

func (m *memberMode) sleep(ctx context.Context, d time.Duration) error {
	t := m.c.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// get reads key, retrying transient failures on the retry schedule.
func (m *memberMode) get(ctx context.Context, key string) (data []byte, version string, err error) {
	for _, pause := range m.core.retry() {
		if pause > 0 {
			if err := m.sleep(ctx, pause); err != nil {
				return nil, "", err
			}
		}
		gctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		data, version, err = m.c.cfg.Store.GetLimited(gctx, key, maxRecordSize)
		cancel()
		if err == nil || !store.IsRetryable(err) {
			return data, version, err
		}
	}
	return nil, "", err
}

// callTimeout bounds one store read: a hung call must not hold the loop
// past the point where our rights would lapse.
func (m *memberMode) callTimeout() time.Duration { return m.c.cfg.renewDeadline() / 2 }

func (m *memberMode) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *memberMode) now() time.Time { return m.c.cfg.Clock.Now() }

// PanicError is returned (by Stop) when the coordinator's loop panicked.
// Every shard was stopped first.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("lease: loop panicked: %v", e.Value) }

func (m *memberMode) run(ctx context.Context) (err error) {
	cfg := m.c.cfg
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
			m.c.log.Error("the coordinator loop panicked; stopping every shard", "panic", r)
			m.setErr(err)
			m.mu.Lock()
			m.deadline = time.Time{}
			m.mu.Unlock()
			m.leave()
		}
	}()
	for ctx.Err() == nil {
		if m.hookStep != nil {
			m.hookStep()
		}
		m.tick(ctx)
		t := cfg.Clock.NewTimer(m.core.pause(m.now()))
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-m.wake:
		}
		t.Stop()
	}
	m.leave()
	return nil
}

// tick is one round: renew, list, read the assignment if it changed,
// rebalance if membership changed, then start and stop shards.
func (m *memberMode) tick(ctx context.Context) {
	cfg := m.c.cfg
	m.updateApplied()
	renewed := true
	if m.core.renewDue(m.now()) {
		renewed = m.renew(ctx)
	}
	var (
		items              []store.Item
		err                error
		listStart, listEnd time.Time
	)
	for _, pause := range m.core.retry() {
		if pause > 0 {
			if m.sleep(ctx, pause) != nil {
				return
			}
		}
		listStart = m.now()
		lctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		items, err = cfg.Store.ListAll(lctx, cfg.Prefix, 1000)
		cancel()
		listEnd = m.now()
		if err == nil || !store.IsRetryable(err) {
			break
		}
	}
	if err != nil {
		m.setErr(fmt.Errorf("lease: listing %s: %w", cfg.Prefix, err))
		m.core.retrySoon = true
	} else {
		m.observe(ctx, items, listStart, listEnd)
		m.evictDead(ctx)
		m.rebalance(ctx)
	}
	if m.core.lapsed(m.now(), renewed) {
		m.c.log.Warn("renew deadline passed; stopped acting on every shard")
	}
	m.reconcile(ctx)
}

// updateApplied raises the epoch our record may state as applied once
// every run stopped has returned.
func (m *memberMode) updateApplied() {
	m.mu.Lock()
	idle := len(m.finishing) == 0
	m.mu.Unlock()
	m.core.updateApplied(idle)
}

// renew writes our record. After a failure whose outcome is unknown it
// first reads the record back.
func (m *memberMode) renew(ctx context.Context) bool {
	cfg := m.c.cfg
	if m.core.needRead {
		data, v, err := m.get(ctx, m.key(m.core.ownKey()))
		switch m.core.readOwn(m.now(), data, v, err) {
		case ownAbandon:
			m.abandon()
		case ownFailed:
			m.setErr(err)
			return false
		}
	}
	start := m.now()
	rec, cond := m.core.renewal(start)
	rec.LastUpdated, rec.Nonce = cfg.Clock.Wall(), rand.Text()
	wctx, cancel := context.WithTimeout(ctx, cfg.renewDeadline())
	defer cancel()
	v, err := store.PutResolved(wctx, cfg.Store, m.key(m.core.ownKey()), rec.encode(), cond, store.ResolveOptions{
		Attempts: 3, MaxSize: maxRecordSize,
		Backoff: func(n int) time.Duration {
			return store.Jitter([]time.Duration{0, cfg.RenewPeriod / 50, cfg.RenewPeriod / 5}[min(n, 2)], 0.2)
		},
	})
	if err == nil {
		m.core.renewed(rec, start, v)
		return true
	}
	m.setErr(err)
	if ctx.Err() != nil {
		// The stop cut the renewal short: no failure to warn about.
		m.c.log.Debug("a renewal cut short by the stop", "err", err)
	} else {
		m.c.log.Warn("renewing our member record failed", "err", err)
	}
	m.core.renewFailed(rec, start)
	return false
}

// abandon ends this session after it was evicted: every shard stops, and
// the member joins again under a new session, which others treat as a
// restart (its shards come back with new terms).
func (m *memberMode) abandon() {
	m.c.log.Warn("this member was judged dead and evicted; joining again with a new session", "session", m.core.session)
	session := rand.Text()[:16]
	m.mu.Lock()
	for _, r := range m.runs {
		m.stopRunLocked(r)
	}
	m.session = session
	clear(m.ended)
	m.mu.Unlock()
	m.core.abandon(session)
}

// observe updates the member views from a listing, reading the records
// the core asks for, and reads the assignment if its version changed.
func (m *memberMode) observe(ctx context.Context, items []store.Item, start, end time.Time) {
	reads, assignVer := m.core.observeList(items, end)
	for _, rel := range reads {
		m.fetch(ctx, rel)
	}
	if !m.core.listedAssignment(assignVer, start, m.now()) {
		return
	}
	getStart := m.now()
	data, v, err := m.get(ctx, m.key(assignmentKey))
	getEnd := m.now()
	report, err := m.core.assignmentRead(getStart, getEnd, data, v, err)
	switch report {
	case reportForeign:
		m.c.log.Error("the object where the assignment record belongs is another kind of record; acting on no shard and never writing it: give the coordinators a Prefix of their own", "version", v, "err", err)
	case reportCorrupt:
		m.c.log.Error("the assignment record is corrupt; acting on no shard until it is repaired", "version", v, "err", err)
	}
	if err != nil {
		m.setErr(err)
	}
}

// fetch reads a member record into its view.
func (m *memberMode) fetch(ctx context.Context, rel string) bool {
	gctx, cancel := context.WithTimeout(ctx, m.callTimeout())
	data, ver, err := m.c.cfg.Store.GetLimited(gctx, m.key(rel), maxRecordSize)
	cancel()
	ok, bad, logForeign := m.core.fetched(rel, data, ver, err)
	if logForeign {
		m.c.log.Error("an object among the member records is another kind of record; it is never counted as a member nor written over", "err", bad)
	}
	if bad != nil {
		m.setErr(bad)
	}
	return ok
}

// evictDead carries out the evictions the core decides: tombstones for
// members judged dead, and deletes of tombstones everyone has seen.
func (m *memberMode) evictDead(ctx context.Context) {
	cfg := m.c.cfg
	for _, e := range m.core.evictions() {
		if e.delete {
			dctx, cancel := context.WithTimeout(ctx, m.callTimeout())
			if err := cfg.Store.Delete(dctx, m.key(e.rel), store.Cond{}); err == nil {
				m.core.tombDeleted(e.rel)
			}
			cancel()
			continue
		}
		e.tomb.LastUpdated, e.tomb.Nonce = cfg.Clock.Wall(), rand.Text()
		wctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		ver, err := store.PutResolved(wctx, cfg.Store, m.key(e.rel), e.tomb.encode(), store.IfMatch(e.version), store.ResolveOptions{Attempts: 2, MaxSize: maxRecordSize})
		cancel()
		switch {
		case err == nil:
			m.c.log.Info("evicted a dead member", "member", e.tomb.OwnerID, "session", e.tomb.Session)
			m.core.evicted(e, ver, m.now())
		case errors.Is(err, store.ErrPreconditionFailed):
			// It renewed (or someone else evicted it): look again.
			m.core.evictRefused(e, m.now())
			m.fetch(ctx, e.rel)
		default:
			m.setErr(err)
		}
	}
}

// live returns the live members as the core sees them, and publishes
// whether another live process uses our OwnerID.
func (m *memberMode) live() map[string]string {
	live, dup := m.core.live()
	m.mu.Lock()
	if dup && !m.duplicate {
		m.c.log.Error("another live process uses this OwnerID; staying idle until it stops", "session", m.core.session)
		m.lastErr = ErrDuplicateOwner
	}
	m.duplicate = dup
	m.mu.Unlock()
	return live
}

// rebalance writes the new assignment the core decides, if any.
func (m *memberMode) rebalance(ctx context.Context) {
	if m.core.assignBad {
		return
	}
	cfg := m.c.cfg
	live := m.live()
	if len(live) == 0 {
		return
	}
	m.mu.Lock()
	in := balanceInput{live: live, adds: slices.Clone(m.adds), removes: slices.Clone(m.removes), pendingGen: m.pendGen,
		ended: func() map[string]uint64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return maps.Clone(m.ended)
		}}
	m.mu.Unlock()
	next, cond, inAssignment := m.core.rebalance(in)
	if inAssignment {
		m.clearPending(in.adds, in.removes)
	}
	if next == nil {
		return
	}
	next.hdr.LastUpdated, next.hdr.Nonce = cfg.Clock.Wall(), rand.Text()
	start := m.now()
	wctx, cancel := context.WithTimeout(ctx, cfg.renewDeadline())
	v, err := store.PutResolved(wctx, cfg.Store, m.key(assignmentKey), next.encode(), cond, store.ResolveOptions{Attempts: 3, MaxSize: maxRecordSize})
	cancel()
	end := m.now()
	switch {
	case err == nil:
		m.core.assignWritten(next, v, start, end)
		m.clearPending(in.adds, in.removes)
		m.c.log.Info("rebalanced shards", "epoch", next.hdr.Epoch, "members", len(live), "shards", next.len())
	case errors.Is(err, store.ErrPreconditionFailed):
		// Someone else rebalanced first; the next listing shows it.
		m.poke()
	default:
		m.setErr(err)
	}
}

func (m *memberMode) clearPending(adds, removes []string) {
	if len(adds) == 0 && len(removes) == 0 {
		return
	}
	done := make(map[string]bool, len(adds)+len(removes))
	for _, s := range adds {
		done[s] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adds = slices.DeleteFunc(m.adds, func(s string) bool { return done[s] })
	clear(done)
	for _, s := range removes {
		done[s] = true
	}
	m.removes = slices.DeleteFunc(m.removes, func(s string) bool { return done[s] })
	// The initial shards are all pending adds: do not keep their room.
	if len(m.adds) == 0 {
		m.adds = nil
	}
	if len(m.removes) == 0 {
		m.removes = nil
	}
	m.pendGen++
}

// reconcile starts and stops shard work to match the assignment and our
// rights, as the core decides, and publishes the result. Its work over
// every shard is done only when the assignment changed or runs stopped;
// otherwise it looks at the shards still waiting to start.
func (m *memberMode) reconcile(ctx context.Context) {
	now := m.now()
	deadline := m.core.rightsDeadline()
	live := m.live()
	rescan := m.core.beginReconcile()
	valid, moved, stopped := m.stopRuns(now, deadline, rescan)
	started := 0
	if valid && len(m.core.pending) > 0 {
		started = m.startReady(ctx, now, deadline, live)
	}
	m.updateApplied()
	m.publish(now, deadline, live, rescan, moved, started, stopped)
}

// stopRuns publishes the deadline and stops the runs the assignment no
// longer gives us, or every run if we cannot act (valid is false). moved
// reports whether the deadline changed.
func (m *memberMode) stopRuns(now, deadline time.Time, rescan bool) (valid, moved bool, stopped int) {
	core := m.core
	m.mu.Lock()
	valid = !m.duplicate && now.Before(deadline)
	// Publish the deadline before any run starts, so that IsLeader and
	// Held are true as soon as OnStartedLeading runs.
	moved = m.deadline != deadline
	m.deadline = deadline
	if rescan || !valid {
		for id, r := range m.runs {
			if !valid || !core.mineAt(id, r.term) {
				m.stopRunLocked(r)
				stopped++
			}
		}
		if stopped > len(m.runs) {
			// Maps do not shrink: a member that held every shard
			// before the others joined would keep room for them all.
			runs := make(map[string]*shardRun, len(m.runs))
			maps.Copy(runs, m.runs)
			m.runs = runs
		}
	}
	if rescan {
		// A term that ended and that the shard has since moved past can
		// never come back: forget it.
		for id, t := range m.ended {
			if core.superseded(id, t) {
				delete(m.ended, id)
			}
		}
		if len(m.ended) == 0 {
			m.ended = map[string]uint64{}
		}
	}
	// Every shard of ours is either running or pending, unless runs
	// stopped (the deadline passed) since pending was computed.
	core.countPending(rescan, len(m.runs), func(id string) bool { return m.runs[id] != nil })
	m.mu.Unlock()
	core.reconciled(valid)
	return valid, moved, stopped
}

// startReady starts the pending shards whose handoff the core finds
// done, reading the earlier owners' records it asks for.
func (m *memberMode) startReady(ctx context.Context, now, deadline time.Time, live map[string]string) (started int) {
	core := m.core
	m.mu.Lock()
	ended := maps.Clone(m.ended)
	m.mu.Unlock()
	scan := core.scanHandoffs(now, live, ended)
	for {
		rel, done := scan.next()
		if done {
			break
		}
		scan.read(m.fetch(ctx, rel))
	}
	keep, ready := scan.keep, scan.ready
	requeued := len(keep)
	m.mu.Lock()
	// The checks above may have made store calls: the rights may have
	// lapsed meanwhile.
	if m.duplicate || !m.now().Before(deadline) {
		keep = append(keep, ready...)
		ready = nil
	}
	for _, id := range ready {
		if m.busy[id] > 0 {
			// The previous term's work has not returned yet.
			keep = append(keep, id)
			continue
		}
		e, _ := core.assign.get(id)
		m.startRunLocked(id, e.Term, deadline)
		started++
	}
	m.mu.Unlock()
	core.setPending(keep, requeued)
	return started
}

// publish makes the round's result visible: the shards and members known,
// the epoch, OnChange and the log; and sets the timer that fences every
// shard at the deadline.
func (m *memberMode) publish(now, deadline time.Time, live map[string]string, rescan, moved bool, started, stopped int) {
	core := m.core
	members := make([]string, 0, len(live))
	for o := range live {
		members = append(members, o)
	}
	sort.Strings(members)
	m.mu.Lock()
	if rescan || m.pubGen != m.pendGen {
		shards := core.assign.ids
		if len(m.adds) > 0 {
			shards = append(slices.Clone(core.assign.ids), m.adds...)
			sort.Strings(shards)
			shards = slices.Compact(shards)
		}
		m.pubShards, m.pubGen = shards, m.pendGen
	}
	m.members, m.epoch = members, core.assign.hdr.Epoch
	held := len(m.runs)
	if m.hook != nil && moved {
		for _, r := range m.runs {
			m.hook(r.id, true, r.term, now, deadline)
		}
	}
	var after []string
	changed := m.heldGen != m.notified
	if changed {
		after, m.notified = sortedKeys(m.runs), m.heldGen
	}
	m.mu.Unlock()
	if started > 0 || stopped > 0 {
		// One line per change, whatever the number of shards; each
		// shard's start and stop is logged at debug level.
		m.c.log.Info("shards changed", "epoch", core.assign.hdr.Epoch, "started", started, "stopped", stopped, "held", held, "waiting", len(core.pending))
	}
	if changed {
		m.c.changed(after)
	}
	// One timer fences every shard at the deadline, in case the loop is
	// stuck in a store call when it passes.
	if m.fenceTimer != nil {
		m.fenceTimer.Stop()
		m.fenceTimer = nil
	}
	if held > 0 {
		m.fenceTimer = m.c.cfg.Clock.AfterFunc(deadline.Sub(m.now()), m.fenceAll)
	}
}

// fenceAll stops every shard if the deadline has passed.
func (m *memberMode) fenceAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now().Before(m.deadline) {
		return
	}
	for _, r := range m.runs {
		m.stopRunLocked(r)
	}
	m.poke()
}

// stopRunLocked ends a run: it cancels its context, if callbacks run, and
// the shard counts as busy until they return. The caller holds m.mu.
func (m *memberMode) stopRunLocked(r *shardRun) {
	if m.hook != nil {
		m.hook(r.id, false, r.term, m.now(), m.deadline)
	}
	delete(m.runs, r.id)
	m.ended[r.id] = r.term
	m.heldGen++
	m.c.metrics.leading(false)
	m.c.log.Debug("stopped leading shard", "shard", r.id, "term", r.term)
	if r.cancel == nil {
		return
	}
	m.finishing[r] = true
	m.busy[r.id]++
	r.cancel()
}

// startRunLocked starts leading a shard. The caller holds m.mu.
func (m *memberMode) startRunLocked(id string, term uint64, deadline time.Time) {
	cfg := m.c.cfg
	if m.hook != nil {
		m.hook(id, true, term, m.now(), deadline)
	}
	r := &shardRun{id: id, term: term}
	m.runs[id] = r
	m.heldGen++
	m.c.metrics.leading(true)
	m.c.log.Debug("leading shard", "shard", id, "term", term)
	if cfg.OnStartedLeading == nil && cfg.OnStoppedLeading == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer func() {
			m.mu.Lock()
			delete(m.finishing, r)
			if m.busy[id]--; m.busy[id] <= 0 {
				delete(m.busy, id)
			}
			m.mu.Unlock()
			close(r.done)
			// Tell the new owner of the release at once.
			m.poke()
		}()
		if f := cfg.OnStartedLeading; f != nil {
			if p := notify.Safely(func() { f(ctx, id, term) }); p != nil {
				m.c.log.Error("OnStartedLeading panicked", "shard", id, "panic", p)
			}
		}
		<-ctx.Done()
		if f := cfg.OnStoppedLeading; f != nil {
			if p := notify.Safely(func() { f(id, term) }); p != nil {
				m.c.log.Error("OnStoppedLeading panicked", "shard", id, "panic", p)
			}
		}
	}()
}

// leave stops every shard, waits for the work to return, and deletes our
// record so that the others reassign our shards at once.
func (m *memberMode) leave() {
	m.mu.Lock()
	for _, r := range m.runs {
		m.stopRunLocked(r)
	}
	var waiting []chan struct{}
	for r := range m.finishing {
		waiting = append(waiting, r.done)
	}
	m.mu.Unlock()
	if m.fenceTimer != nil {
		m.fenceTimer.Stop()
	}
	for _, done := range waiting {
		<-done
	}
	m.c.changed(nil)
	if m.core.myVersion == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.renewDeadline())
	defer cancel()
	// Unconditional: the key is this session's alone, and whatever is
	// there (our record, or a tombstone evicting this session) may go now
	// that no shard runs. A conditional delete would add nothing, and
	// some stores refuse them (store.ErrUnsupported).
	if err := m.c.cfg.Store.Delete(ctx, m.key(m.core.ownKey()), store.Cond{}); err != nil {
		m.c.log.Warn("removing our member record failed; the others will judge us dead after LeaseDuration", "err", err)
	}
}

func (m *memberMode) setErr(err error) {
	m.mu.Lock()
	m.lastErr = err
	m.mu.Unlock()
}

func (m *memberMode) isLeader(shard string) bool {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[shard] != nil && now.Before(m.deadline)
}

func (m *memberMode) known(shard string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := slices.BinarySearch(m.pubShards, shard)
	return ok || slices.Contains(m.adds, shard)
}

func (m *memberMode) term(shard string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.runs[shard]; r != nil {
		return r.term
	}
	return 0
}

func (m *memberMode) held() []string {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !now.Before(m.deadline) {
		return nil
	}
	return sortedKeys(m.runs)
}

func (m *memberMode) add(shard string) {
	m.mu.Lock()
	if !slices.Contains(m.adds, shard) {
		m.adds = append(m.adds, shard)
	}
	m.removes = slices.DeleteFunc(m.removes, func(s string) bool { return s == shard })
	m.pendGen++
	m.mu.Unlock()
	m.poke()
}

func (m *memberMode) remove(shard string) {
	m.mu.Lock()
	m.adds = slices.DeleteFunc(m.adds, func(s string) bool { return s == shard })
	if !slices.Contains(m.removes, shard) {
		m.removes = append(m.removes, shard)
	}
	m.pendGen++
	m.mu.Unlock()
	m.poke()
}

func (m *memberMode) status() Status {
	held := m.held()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{OwnerID: m.c.cfg.OwnerID, Session: m.session, Mode: MemberLeases.String(), Held: held,
		Shards: slices.Clone(m.pubShards), Members: slices.Clone(m.members), Epoch: m.epoch}
	if m.lastErr != nil {
		st.LastError = m.lastErr.Error()
	}
	return st
}
