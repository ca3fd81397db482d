package election

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/internal/notify"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Errors returned by the Elector.
var (
	ErrAlreadyStarted = errors.New("election: already started")
	ErrStopped        = errors.New("election: stopped")
	// ErrDuplicateServerID is reported (in Status and the log) when the
	// lock names this member's ServerID with another session: two
	// processes share one ServerID. They still never lead at once, because
	// ownership is decided by session, but the configuration is wrong.
	ErrDuplicateServerID = errors.New("election: another process uses this ServerID")
	// ErrWorkStillRunning is returned by Run (and Stop) when
	// OnStartedLeading had not returned LeaderTimeout after its context was
	// cancelled. The lock was not released: it lapses after the lease, as
	// after a crash.
	ErrWorkStillRunning = errors.New("election: OnStartedLeading did not return after its context was cancelled")
)

// PanicError is returned by Run when the election loop panicked. The
// elector stopped leading before returning it.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("election: loop panicked: %v", e.Value) }

// Elector takes part in one election. It is safe for concurrent use; its
// state is changed by one goroutine (the one running Run) and read by
// every method.
type Elector struct {
	cfg     Config
	st      *store.Store
	ownsSt  bool
	clk     clock.Clock
	log     *slog.Logger
	session string

	core *core // owned by the loop goroutine

	mu        sync.Mutex
	pub       published
	changed   chan struct{} // closed and replaced on every published change
	startOnce bool
	cancelRun context.CancelFunc
	runDone   chan struct{}
	runErr    error

	// leadership of the current term, owned by the loop goroutine.
	lead *leadership
	// previous term's work still running (waited for before a new term).
	prevWork chan struct{}
	wake     chan struct{}
	// reported is the observation whose term problem was last logged.
	reported obsKey

	metrics    *metrics // nil without a Registerer
	notes      *notify.Queue
	peer       *peerServer
	httpClient *http.Client // configured peer client (PeerClientTLS, or system roots)
	// testPeerClient, if set (tests only), asks every leader instead.
	testPeerClient *http.Client
	// pinClient accepts only the leader's key pinKey; owned by the loop.
	pinClient *http.Client
	pinKey    string

	// A store that notifies changes (etcd): followers watch the lock.
	watcher     driver.Watcher
	watchCh     <-chan driver.WatchEvent
	watchCancel context.CancelFunc

	// hookStep, if set (tests only), runs at the top of every loop step.
	hookStep func()
	// hookTransition, if set (tests only), sees every start and end of a
	// term and every move of its deadline, as the elector makes them.
	hookTransition func(transition)
}

type obsKey struct {
	found   bool
	version string
}

// published is the state every method reads.
type published struct {
	leading  bool
	term     uint64
	deadline time.Time
	obs      observation
	haveObs  bool
	mode     string
	dupID    bool
	lastErr  error
	problem  error  // why the observed record cannot be taken over
	version  string // our last written version, served to peers
	record   Record // our last written record, served to peers
	// releasing: stepping down, the release not yet written.
	releasing bool
}

// transition is a change of leadership, for tests.
type transition struct {
	leading  bool
	term     uint64
	at       time.Time
	deadline time.Time
}

type leadership struct {
	ctx      context.Context
	cancel   context.CancelFunc
	timer    clock.Timer
	deadline time.Time
	done     chan struct{}
	term     uint64
}

// New returns an Elector for cfg. It validates the configuration and, when
// cfg.Store is nil, opens cfg.StoreURL. It does not touch the store; Run
// probes it first.
func New(ctx context.Context, cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Elector{
		cfg:     cfg,
		st:      cfg.Store,
		clk:     cfg.Clock,
		session: rand.Text()[:16],
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	e.log = cfg.Logger.With("election", cfg.LockfilePath, "server", cfg.ServerID)
	var storeOpts []store.Option
	if cfg.Registerer != nil && e.st == nil {
		sm, err := store.NewMetrics(cfg.Registerer, nil)
		if err != nil {
			return nil, fmt.Errorf("election: %w", err)
		}
		storeOpts = append(storeOpts, store.WithObserver(sm.Observe))
	}
	if e.st == nil {
		st, err := store.Open(ctx, cfg.StoreURL, storeOpts...)
		if err != nil {
			return nil, fmt.Errorf("election: %w", err)
		}
		e.st, e.ownsSt = st, true
	}
	t := timing{
		frequent: cfg.FrequentInterval, infrequent: cfg.InfrequentInterval,
		leaderTimeout: cfg.LeaderTimeout, renewDeadline: cfg.RenewDeadline,
		retry:  cfg.RetrySchedule,
		jitter: func(d time.Duration) time.Duration { return store.Jitter(d, cfg.RetryJitter) },
	}
	e.core = newCore(t, cfg.ServerID, cfg.ServerAddr, e.session, cfg.peerEnabled())
	e.core.peerAnyLeader = cfg.PeerClientTLS != nil || cfg.PeerMode
	e.core.priority = cfg.Priority
	if w, ok := e.st.Driver().(driver.Watcher); ok {
		e.watcher = w
		e.core.watch = true
	}
	if cfg.Registerer != nil {
		m, err := registerMetrics(cfg.Registerer, e)
		if err != nil {
			if e.ownsSt {
				e.st.Close()
			}
			return nil, err
		}
		e.metrics = m
	}
	return e, nil
}

// Session returns this elector's random session identifier, written in
// every record it writes.
func (e *Elector) Session() string { return e.session }

// Start runs the election in a goroutine until Stop is called or ctx ends.
// A second Start returns ErrAlreadyStarted; Start after Stop returns
// ErrStopped.
func (e *Elector) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.startOnce {
		e.mu.Unlock()
		if e.runDone != nil {
			select {
			case <-e.runDone:
				return ErrStopped
			default:
			}
		}
		return ErrAlreadyStarted
	}
	e.startOnce = true
	ctx, cancel := context.WithCancel(ctx)
	e.cancelRun = cancel
	e.runDone = make(chan struct{})
	e.mu.Unlock()
	go func() {
		err := e.run(ctx)
		e.mu.Lock()
		e.runErr = err
		e.mu.Unlock()
		close(e.runDone)
	}()
	return nil
}

// running reports whether Start or Run was called and the loop has not
// ended.
func (e *Elector) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.startOnce || e.runDone == nil {
		return false
	}
	select {
	case <-e.runDone:
		return false
	default:
		return true
	}
}

// Stop ends the election: it cancels the leadership context, waits for
// every OnStartedLeading call to return, releases the lock so a follower can
// take it at once, and returns. Work that has not returned LeaderTimeout
// after its context was cancelled makes Stop return ErrWorkStillRunning
// without releasing. If ctx ends first, Stop returns ctx's error and the
// rest goes on in the background, bounded as described. Stop is
// idempotent; it returns the error Run ended with, if any.
func (e *Elector) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.startOnce {
		e.startOnce = true
		e.runDone = make(chan struct{})
		close(e.runDone)
		e.mu.Unlock()
		return nil
	}
	cancel, done := e.cancelRun, e.runDone
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	select {
	case <-done:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.runErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run takes part in the election until ctx ends, then steps down as Stop
// describes and returns nil, or an error if the store refuses conditional
// writes, the loop panicked, or the work did not return
// (ErrWorkStillRunning). Run may be called once, instead of Start.
func (e *Elector) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.startOnce {
		done := e.runDone
		e.mu.Unlock()
		select {
		case <-done:
			return ErrStopped
		default:
			return ErrAlreadyStarted
		}
	}
	e.startOnce = true
	e.runDone = make(chan struct{})
	e.mu.Unlock()
	err := e.run(ctx)
	e.mu.Lock()
	e.runErr = err
	e.mu.Unlock()
	close(e.runDone)
	return err
}

func (e *Elector) run(ctx context.Context) (err error) {
	e.notes = notify.New(e.log)
	defer func() {
		// OnNewLeader calls still queued get a second; a call that blocks
		// is left to finish on its own goroutine.
		t := e.clk.NewTimer(time.Second)
		defer t.Stop()
		if !e.notes.CloseWithin(t.C()) {
			e.log.Warn("OnNewLeader has not returned; not waiting for it")
		}
	}()
	if e.ownsSt {
		defer e.st.Close()
	}
	if e.cfg.SkipProbe {
		// The caller probed the store.
	} else if _, perr := store.Probe(ctx, e.st, 1); perr != nil {
		if errors.Is(perr, store.ErrConditionsIgnored) {
			e.log.Error("refusing to run: the store does not enforce conditional writes", "err", perr)
			return perr
		}
		// Any other probe failure is the store being unreachable now; the
		// loop retries it like every other store error. One the stop cut
		// short is no failure.
		if ctx.Err() == nil {
			e.log.Warn("store probe failed; continuing", "err", perr)
		}
	}
	if e.cfg.peerEnabled() {
		ps, perr := startPeerServer(e)
		switch {
		case perr != nil && e.cfg.PeerMode:
			return perr
		case perr != nil:
			// Peer mode only by default: the address may be one the
			// member shows but does not own. Lead and follow through the
			// store; as a follower, still ask leaders that serve peers.
			e.log.Warn("peer server cannot listen; leading without it (set PeerDisabled if ServerAddr is not this member's to listen on)",
				"addr", e.cfg.PeerListenAddr, "err", perr)
		}
		e.peer = ps
	}
	if ps := e.peer; ps != nil {
		defer func() {
			// Serve the release a little longer, so that followers between
			// two long-polls still hear of it from us rather than from the
			// store.
			e.mu.Lock()
			released := e.pub.record.Released
			e.mu.Unlock()
			if released {
				t := e.clk.NewTimer(min(e.cfg.FrequentInterval/2, time.Second))
				<-t.C()
			}
			ps.close()
		}()
	}
	defer e.closePeerClients()
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
			e.log.Error("election loop panicked; stepping down", "panic", r)
			e.core.leading = false
			e.sync(e.clk.Now(), err)
			e.awaitWork()
		}
	}()
	e.loop(ctx)
	e.stopWatch()
	return e.shutdown()
}

func (e *Elector) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if e.hookStep != nil {
			e.hookStep()
		}
		now := e.clk.Now()
		d := e.core.next(now)
		switch d.op {
		case opWait:
			e.wait(ctx, d.until.Sub(now))
		case opRead:
			e.read(ctx)
		case opPeer:
			e.peerCheck(ctx)
		case opWatch:
			e.watchWait(ctx, d.until)
		case opAcquire:
			if (e.core.obs.rec.Released && e.core.obs.rec.HandoverTo != e.session) || !e.core.obs.found {
				// Several followers saw the same release: spread them.
				e.wait(ctx, time.Duration(mrand.Int64N(int64(e.cfg.FrequentInterval/50)+1)))
				if ctx.Err() != nil {
					return
				}
			}
			e.write(ctx, d)
		case opRenew, opRelease:
			e.write(ctx, d)
		case opAsk:
			// Store-only members ask through the lock record, which the
			// leader finds at its next renewal. This is the one place to
			// ask over the peer endpoint instead, when the leader serves
			// one.
			e.write(ctx, d)
		case opDemote:
			e.log.Warn("renew deadline passed without a successful renewal; stepped down",
				"term", e.core.term, "deadline", e.cfg.RenewDeadline)
			e.core.demote()
		}
		e.sync(e.clk.Now(), nil)
		if e.core.leading && e.watchCh != nil {
			// A leader learns of its lock through its own writes.
			e.stopWatch()
		}
	}
}

func (e *Elector) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := e.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	case <-e.wake:
	}
}

// poke wakes the loop from a wait.
func (e *Elector) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Elector) read(ctx context.Context) {
	var (
		data    []byte
		version string
		err     error
	)
	for i, pause := range e.cfg.RetrySchedule {
		if i > 0 || pause > 0 {
			p := store.Jitter(pause, e.cfg.RetryJitter)
			if e.core.leading {
				// A leader reads to settle a write; near its deadline it
				// retries sooner, as its writes do.
				p = min(p, e.core.deadline().Sub(e.clk.Now())/4)
			}
			e.wait(ctx, p)
		}
		rctx, cancel := context.WithTimeout(ctx, e.callTimeout())
		data, version, err = e.st.GetLimited(rctx, e.cfg.LockfilePath, MaxRecordSize)
		cancel()
		if err == nil || errors.Is(err, store.ErrNotFound) || !store.IsRetryable(err) || ctx.Err() != nil {
			break
		}
	}
	now := e.clk.Now()
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.core.observe(now, false, Record{}, nil, "")
	case errors.Is(err, store.ErrTooLarge):
		// Not a record we can read: reported and never taken over, as
		// corrupt bytes are. The size error carries no version; none is
		// needed, since nobody may write over it but a repair.
		e.core.observe(now, true, Record{}, err, "")
	case err != nil:
		e.setErr(err)
		e.log.Warn("reading the lock failed", "err", err)
		e.core.failed(opRead, now, now, nil)
	default:
		rec, derr := e.decode(data)
		e.core.observe(now, true, rec, derr, version)
	}
}

// decode decodes the lock record read from the store; its error names the
// key.
func (e *Elector) decode(data []byte) (Record, error) {
	rec, err := DecodeRecord(data)
	if err != nil {
		return Record{}, fmt.Errorf("%s: %w", e.cfg.LockfilePath, err)
	}
	return rec, nil
}

// watchWait waits for the store to notify a change of the lock, at most
// until until. An event is an observation like a read; a watch that ends
// early falls back to polling for a frequent interval.
func (e *Elector) watchWait(ctx context.Context, until time.Time) {
	c := e.core
	if e.watchCh == nil {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := e.watcher.Watch(wctx, e.cfg.LockfilePath, c.obs.version)
		if err != nil {
			cancel()
			e.log.Info("watching the lock failed; polling", "err", err)
			c.watchDownUntil = e.clk.Now().Add(e.cfg.FrequentInterval)
			return
		}
		e.watchCh, e.watchCancel = ch, cancel
	}
	t := e.clk.NewTimer(until.Sub(e.clk.Now()))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-e.wake:
	case <-t.C():
		// Unchanged for the holder's lease as far as the watch tells: confirm
		// with a read before taking the lock.
		c.needRead = true
	case ev, ok := <-e.watchCh:
		now := e.clk.Now()
		if !ok {
			e.stopWatch()
			c.watchDownUntil = now.Add(e.cfg.FrequentInterval)
			c.needRead = true
			return
		}
		if ev.Deleted {
			c.observe(now, false, Record{}, nil, "")
			return
		}
		rec, derr := e.decode(ev.Data)
		c.observe(now, true, rec, derr, ev.Version)
	}
}

func (e *Elector) stopWatch() {
	if e.watchCancel != nil {
		e.watchCancel()
	}
	e.watchCh, e.watchCancel = nil, nil
}

// callTimeout bounds one store call.
func (e *Elector) callTimeout() time.Duration {
	return e.cfg.RenewDeadline / 2
}

// attemptTimeout bounds one attempt of a write (and its read-back).
func (e *Elector) attemptTimeout() time.Duration {
	return e.cfg.RenewDeadline / 8
}

func (e *Elector) write(ctx context.Context, d decision) {
	start := e.clk.Now()
	d.record.LastUpdated = e.clk.Wall()
	data := d.record.Encode()
	limit := start.Add(e.cfg.RenewDeadline)
	if d.op == opRenew {
		limit = e.core.deadline()
	}
	wctx, cancel := context.WithTimeout(ctx, limit.Sub(start))
	version, err := store.PutResolved(wctx, e.st, e.cfg.LockfilePath, data, d.cond, store.ResolveOptions{
		Attempts: len(e.cfg.RetrySchedule),
		MaxSize:  MaxRecordSize,
		// A call that hangs (a dead connection) is abandoned in time for
		// another attempt before the deadline.
		AttemptTimeout: e.attemptTimeout(),
		Backoff: func(n int) time.Duration {
			p := store.Jitter(e.cfg.RetrySchedule[min(n, len(e.cfg.RetrySchedule)-1)], e.cfg.RetryJitter)
			// Near the deadline, retry sooner: an outage that ends just
			// before it is then ridden out.
			return min(p, limit.Sub(e.clk.Now())/4)
		},
	})
	cancel()
	now := e.clk.Now()
	e.metrics.wrote(d.op, err, errors.Is(err, store.ErrPreconditionFailed), now.Sub(start).Seconds())
	switch {
	case err == nil:
		e.core.wrote(d.op, start, now, d.record, version)
		switch d.op {
		case opAcquire:
			e.log.Info("became leader", "term", d.record.Term)
		case opAsk:
			e.log.Info("asked the leader to hand over", "leader", d.record.LeaderID, "term", d.record.Term, "priority", e.cfg.Priority)
			return // the leader's record, not ours: not served to peers
		case opRelease:
			e.log.Info("handed over the lock", "term", d.record.Term)
		}
		e.publishWrite(d.record, version)
	case errors.Is(err, store.ErrPreconditionFailed):
		if d.op == opRenew {
			e.log.Warn("lost the lock to another member", "term", e.core.term)
		}
		e.core.refused(d.op, now)
	default:
		e.setErr(err)
		if ctx.Err() != nil {
			// The stop cut the write short: no failure to warn about.
			e.log.Debug("a write cut short by the stop", "op", d.op.String(), "err", err)
		} else {
			e.log.Warn("writing the lock failed", "op", d.op.String(), "err", err)
		}
		e.core.failed(d.op, start, now, &pendingWrite{nonce: d.record.Nonce, start: start, term: d.record.Term, acquire: d.op == opAcquire})
	}
}

// sync publishes the core's state, starts or ends leadership terms and
// queues OnNewLeader notes. Only the loop goroutine calls it.
func (e *Elector) sync(now time.Time, loopErr error) {
	c := e.core
	if e.lead != nil && c.leading && c.term == e.lead.term && e.lead.ctx.Err() != nil {
		// The term's context ended while the core still leads: the
		// fencing timer fired just before a renewal was accepted, or
		// OnStartedLeading panicked. A term whose work has stopped is
		// not resumed: step down; the lock, being ours, is taken again
		// with a new term after a frequent interval.
		c.demote()
		c.retryAt = now.Add(e.cfg.FrequentInterval)
	}
	if e.lead != nil && (!c.leading || c.term != e.lead.term) {
		e.endTerm(now)
		// No new term, in the core or the store, until this one's work
		// has returned.
		c.waitForWork = true
	}
	if c.leading && e.lead == nil {
		if e.prevWork != nil {
			select {
			case <-e.prevWork:
				e.prevWork = nil
			default:
				// The previous term's work has not returned: do not start
				// another beside it. Step down; the lock is ours, so the
				// next acquisition can follow once the work returns.
				c.demote()
				c.waitForWork = true
			}
		}
		if c.leading {
			e.startTerm(now)
		}
	}
	if e.lead != nil && e.lead.deadline != c.deadline() {
		// Move the fencing timer to the new deadline.
		e.lead.timer.Stop()
		e.lead.deadline = c.deadline()
		e.lead.timer = e.clk.AfterFunc(c.deadline().Sub(now), e.lead.cancel)
		if e.hookTransition != nil {
			e.hookTransition(transition{leading: true, term: c.term, at: now, deadline: c.deadline()})
		}
	}
	if e.prevWork != nil {
		select {
		case <-e.prevWork:
			e.prevWork = nil
			c.waitForWork = false
		default:
		}
	}

	mode := "frequent"
	switch {
	case c.leading:
		mode = "leader"
	case c.watch && now.After(c.watchDownUntil) && c.haveObs && c.obs.found && !c.obs.rec.Released:
		mode = "watch"
	case c.stable() && c.peerable():
		mode = "peer"
	case c.stable():
		mode = "infrequent"
	}
	e.mu.Lock()
	p := &e.pub
	problem := c.termProblem()
	if k := (obsKey{c.obs.found, c.obs.version}); problem != nil && k != e.reported {
		e.reported = k
		p.lastErr = problem
		if errors.Is(problem, ErrForeignRecord) {
			e.log.Error("the object at LockfilePath is not a lock record; it is never taken over or written: use a key of its own for the lock",
				"err", problem)
		} else {
			e.log.Error("the lock record cannot be taken over; an operator must repair it with a term floor above every term used (tenure lock repair --term-floor N)",
				"err", problem)
		}
	} else if problem == nil {
		e.reported = obsKey{}
	}
	changed := p.leading != c.leading || p.term != c.term || p.deadline != c.deadline() ||
		p.obs.version != c.obs.version || p.obs.notLeading != c.obs.notLeading || p.mode != mode || p.dupID != c.duplicateID || (p.problem == nil) != (problem == nil)
	if c.duplicateID && !p.dupID {
		p.lastErr = ErrDuplicateServerID
		e.log.Error("the lock names this ServerID with another session: two processes share one ServerID",
			"session", e.session, "other", c.obs.rec.Session)
	}
	p.leading, p.term, p.deadline = c.leading, c.term, c.deadline()
	p.obs, p.haveObs, p.mode, p.dupID, p.problem = c.obs, c.haveObs, mode, c.duplicateID, problem
	if loopErr != nil {
		p.lastErr = loopErr
		p.leading = false
	}
	if changed {
		close(e.changed)
		e.changed = make(chan struct{})
	}
	e.mu.Unlock()

	if c.haveObs && c.obs.found && !c.obs.corrupt && !c.obs.rec.Released {
		k := leaderKey{id: c.obs.rec.LeaderID, term: c.obs.rec.Term}
		if k != c.lastObserved {
			c.lastObserved = k
			if f := e.cfg.OnNewLeader; f != nil {
				id, addr, term := c.obs.rec.LeaderID, c.obs.rec.LeaderAddr, c.obs.rec.Term
				e.notes.Add(func() { f(id, addr, term) })
			}
		}
	}
}

func (e *Elector) startTerm(now time.Time) {
	c := e.core
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), termKey{}, c.term))
	l := &leadership{ctx: ctx, cancel: cancel, done: make(chan struct{}), term: c.term, deadline: c.deadline()}
	l.timer = e.clk.AfterFunc(c.deadline().Sub(now), cancel)
	e.lead = l
	e.metrics.transition(true)
	// Publish before the work starts, so that IsLeader is true inside
	// OnStartedLeading.
	e.mu.Lock()
	e.pub.leading, e.pub.term, e.pub.deadline = true, c.term, c.deadline()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
	if e.hookTransition != nil {
		e.hookTransition(transition{leading: true, term: c.term, at: now, deadline: c.deadline()})
	}
	go func() {
		defer close(l.done)
		defer e.poke()
		if f := e.cfg.OnStartedLeading; f != nil {
			if r := notify.Safely(func() { f(ctx) }); r != nil {
				e.log.Error("OnStartedLeading panicked", "panic", r, "term", l.term)
				cancel()
			}
		}
		<-ctx.Done()
		if f := e.cfg.OnStoppedLeading; f != nil {
			if r := notify.Safely(f); r != nil {
				e.log.Error("OnStoppedLeading panicked", "panic", r, "term", l.term)
			}
		}
	}()
}

func (e *Elector) endTerm(now time.Time) {
	l := e.lead
	e.lead = nil
	l.timer.Stop()
	l.cancel()
	e.prevWork = l.done
	e.metrics.transition(false)
	if e.hookTransition != nil {
		e.hookTransition(transition{leading: false, term: l.term, at: now, deadline: l.deadline})
	}
	e.log.Info("stopped leading", "term", l.term)
}

// shutdown runs when the loop's context ends: stop campaigning, end the
// term, wait for every term's work to return, then release.
func (e *Elector) shutdown() error {
	c := e.core
	c.stopped = true
	wasLeading := c.leading
	e.mu.Lock()
	e.pub.releasing = wasLeading
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.pub.releasing = false
		close(e.changed)
		e.changed = make(chan struct{})
		e.mu.Unlock()
	}()
	now := e.clk.Now()
	c.leading = false
	// Ending the current term makes its work the previous term's: one
	// wait covers it and a term that ended earlier and is still winding
	// down.
	e.sync(now, nil)
	if !e.awaitWork() {
		return ErrWorkStillRunning
	}
	// Release if the lock still holds our last write. After the deadline
	// this is still safe (the swap fails if anyone took over) and lets a
	// follower take the lock at once instead of after LeaderTimeout.
	ours := c.version != "" && c.haveObs && c.obs.found && c.obs.version == c.version
	if !wasLeading && !ours {
		return nil
	}
	rec, cond := c.releaseRecord()
	rec.LastUpdated = e.clk.Wall()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	version, err := store.PutResolved(ctx, e.st, e.cfg.LockfilePath, rec.Encode(), cond, store.ResolveOptions{
		Attempts: len(e.cfg.RetrySchedule),
		Backoff:  func(n int) time.Duration { return e.cfg.RetrySchedule[min(n, len(e.cfg.RetrySchedule)-1)] },
		MaxSize:  MaxRecordSize,
	})
	if err != nil {
		e.log.Warn("releasing the lock failed; followers will take it after LeaderTimeout", "err", err)
		return nil
	}
	e.publishWrite(rec, version)
	e.log.Info("released the lock", "term", rec.Term)
	return nil
}

// awaitWork waits for the work of the term that ended last (every earlier
// term's had returned before it began), at most LeaderTimeout, and reports
// whether it returned. Work that does not return is left running: the lock
// is then never released, so it lapses after the lease as after a crash.
func (e *Elector) awaitWork() bool {
	if e.prevWork == nil {
		return true
	}
	t := e.clk.NewTimer(e.cfg.LeaderTimeout)
	defer t.Stop()
	select {
	case <-e.prevWork:
		e.prevWork = nil
		return true
	case <-t.C():
		e.log.Error("OnStartedLeading has not returned LeaderTimeout after its context was cancelled; not releasing the lock, which lapses after the lease",
			"leaderTimeout", e.cfg.LeaderTimeout)
		return false
	}
}

// publishWrite makes a record we wrote successfully available to peers.
func (e *Elector) publishWrite(rec Record, version string) {
	e.mu.Lock()
	e.pub.record, e.pub.version = rec, version
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

func (e *Elector) setErr(err error) {
	e.mu.Lock()
	e.pub.lastErr = err
	e.mu.Unlock()
}

type termKey struct{}

// TermOf returns the term of the leadership whose context ctx is (the ctx
// passed to OnStartedLeading), and false for any other context. Unlike
// Term, it cannot change while the work runs.
func TermOf(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(termKey{}).(uint64)
	return t, ok
}

// IsLeader reports whether this member leads now: it holds the lock and
// the renew deadline, measured from the start of its last successful
// renewal, has not passed at the moment of the call.
func (e *Elector) IsLeader() bool {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub.leading && now.Before(e.pub.deadline)
}

// Leader returns the identity and address of the leader as last observed
// (this member's own while it leads), and false if there is none.
func (e *Elector) Leader() (id, addr string, ok bool) {
	leading := e.IsLeader()
	e.mu.Lock()
	defer e.mu.Unlock()
	if leading {
		return e.cfg.ServerID, e.cfg.ServerAddr, true
	}
	o := e.pub.obs
	if !e.pub.haveObs || !o.found || o.corrupt || o.rec.Released || o.rec.Session == e.session {
		return "", "", false
	}
	return o.rec.LeaderID, o.rec.LeaderAddr, true
}

// Term returns this member's term while it leads, else the highest term
// observed. Pass it to the systems the leader writes to as a fencing token.
func (e *Elector) Term() uint64 {
	if e.IsLeader() {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.pub.term
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pub.obs.found && !e.pub.obs.corrupt {
		return max(e.pub.obs.rec.Term, e.pub.term)
	}
	return e.pub.term
}

// WaitForLeadership blocks until this member leads or ctx ends.
func (e *Elector) WaitForLeadership(ctx context.Context) error {
	for {
		if e.IsLeader() {
			return nil
		}
		e.mu.Lock()
		ch := e.changed
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status is a snapshot of an elector's view.
type Status struct {
	ServerID   string `json:"serverID"`
	ServerAddr string `json:"serverAddr,omitempty"`
	Session    string `json:"session"`
	// Leader is IsLeader at the time of the call.
	Leader bool   `json:"leader"`
	Term   uint64 `json:"term"`
	// Remaining is how long this member may still act without renewing.
	Remaining time.Duration `json:"remainingNanos,omitempty"`
	// The lock record as last observed.
	LeaderID      string `json:"leaderID,omitempty"`
	LeaderAddr    string `json:"leaderAddr,omitempty"`
	LeaderTerm    uint64 `json:"leaderTerm,omitempty"`
	Released      bool   `json:"released,omitempty"`
	RecordVersion string `json:"recordVersion,omitempty"`
	// Unchanged is how long the record's version has been unchanged, as
	// this member saw it.
	Unchanged time.Duration `json:"unchangedNanos,omitempty"`
	// Mode is "leader", "watch" (the store notifies changes), "peer",
	// "infrequent" or "frequent".
	Mode              string `json:"mode"`
	DuplicateServerID bool   `json:"duplicateServerID,omitempty"`
	// RecordProblem, when set, says why no member can take the lock over:
	// the record's term cannot be read (its bytes do not decode, or it has
	// no term) or it is at its maximum, and the lock stays with its holder,
	// or with nobody, until an operator repairs it (Repair); or the object
	// is another kind of record (ErrForeignRecord), which no member and no
	// repair ever writes over.
	RecordProblem string `json:"recordProblem,omitempty"`
	// LeaderNotLeading: the member the record names answered this member,
	// over its peer endpoint, that it does not lead, and the record has
	// not changed since: no one leads until its lease lapses.
	LeaderNotLeading bool   `json:"leaderNotLeading,omitempty"`
	LastError        string `json:"lastError,omitempty"`
}

// Status returns a snapshot of the elector's view.
func (e *Elector) Status() Status {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pub
	s := Status{ServerID: e.cfg.ServerID, ServerAddr: e.cfg.ServerAddr, Session: e.session, Mode: p.mode, DuplicateServerID: p.dupID}
	s.Leader = p.leading && now.Before(p.deadline)
	if s.Leader {
		s.Term = p.term
		s.Remaining = p.deadline.Sub(now)
	}
	if p.haveObs && p.obs.found {
		s.RecordVersion = p.obs.version
		s.Unchanged = now.Sub(p.obs.since)
		if !p.obs.corrupt {
			s.LeaderID, s.LeaderAddr, s.LeaderTerm, s.Released = p.obs.rec.LeaderID, p.obs.rec.LeaderAddr, p.obs.rec.Term, p.obs.rec.Released
			s.LeaderNotLeading = p.obs.notLeading && !p.obs.rec.Released && !s.Leader
			s.Term = max(s.Term, p.obs.rec.Term)
		}
	}
	if p.problem != nil {
		s.RecordProblem = p.problem.Error()
	}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	return s
}

// RecordProblem returns why no member can take the lock over, as last
// observed, or nil: an error matching ErrUnreadableRecord,
// ErrTermExhausted or ErrForeignRecord. See the package documentation for
// the repair.
func (e *Elector) RecordProblem() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub.problem
}

// PeerHandler returns the handler of the peer endpoint, for members that
// serve it on their own HTTPS server instead of the elector's.
func (e *Elector) PeerHandler() http.Handler { return peerHandler{e} }
