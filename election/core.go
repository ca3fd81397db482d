package election

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tenure-io/tenure/store"
)

// The decision core: every choice the elector makes is a function of the
// core's state, the latest observation and a monotonic now. It has no
// goroutines, no I/O and no clock; the Elector's loop feeds it and carries
// out what it decides.

type opKind int

const (
	opWait    opKind = iota // nothing to do until decision.until
	opRead                  // read the lock record from the store
	opPeer                  // ask the leader over HTTPS (long-poll)
	opAcquire               // write decision.record with decision.cond
	opRenew                 // write decision.record with decision.cond
	opDemote                // the deadline passed: stop leading now
	opWatch                 // wait for the store to notify a change (until decision.until)
	opAsk                   // ask the leader to hand over: write decision.record (a copy of its record)
	opRelease               // hand over: write decision.record (released, naming the successor)
)

func (k opKind) String() string {
	return [...]string{"wait", "read", "peer", "acquire", "renew", "demote", "watch", "ask", "release"}[k]
}

type decision struct {
	op     opKind
	until  time.Time // opWait: wake then, unless something else happens
	cond   store.Cond
	record Record
}

type timing struct {
	frequent, infrequent, leaderTimeout, renewDeadline time.Duration
	retry                                              []time.Duration
	// jitter spreads a timer; nil means none.
	jitter func(time.Duration) time.Duration
}

func (t timing) spread(d time.Duration) time.Duration {
	if t.jitter == nil {
		return d
	}
	return t.jitter(d)
}

// observation of the lock record.
type observation struct {
	found   bool
	corrupt bool  // the bytes are not a record we can read
	derr    error // why, when corrupt
	rec     Record
	version string
	// lease is the holder's lease as it wrote it (leaseMillis); 0 when
	// the record does not say.
	lease time.Duration
	// since is when this member first saw version; a follower judges the
	// leader dead when version has not changed for the lease from here.
	since time.Time
	// at is when the observation was last confirmed (read or peer answer).
	at time.Time
	// changed: the confirmation before this one showed another version,
	// so the leader is alive and renewing.
	changed bool
	// notLeading: the member the record names answered, over its peer
	// endpoint, that it does not lead (it lost its lease, or stopped), at
	// this version. No one leads until the lease lapses or it is released.
	notLeading bool
}

type core struct {
	t         timing
	id, addr  string
	session   string
	peerMode  bool
	leaseMill int64
	// peerKey is written in our records (Record.PeerKey); peerAnyLeader:
	// ask leaders whose record names no key too (see peerable).
	peerKey       string
	peerAnyLeader bool
	// watch: the store notifies changes, so a follower waits for them
	// instead of polling. watchDownUntil: the last watch ended early; poll
	// until then.
	watch          bool
	watchDownUntil time.Time

	obs     observation
	haveObs bool
	maxTerm uint64

	// Leadership.
	leading    bool
	term       uint64
	version    string    // version of our last successful write
	renewStart time.Time // start of the write that produced version
	renewAt    time.Time // when to renew next
	counter    uint64
	pollAt     time.Time // follower: when to read the store next

	// A write whose outcome is unknown: if a later read shows its nonce, it
	// landed, and its start time bounds its lease.
	pending      *pendingWrite
	needRead     bool
	failures     int       // consecutive failed store calls
	retryAt      time.Time // no store call before this after a failure
	peerFailed   bool      // the last peer check failed: poll the store frequently
	waitForWork  bool      // the previous term's work has not returned yet
	stopped      bool      // Stop was called: never acquire
	duplicateID  bool      // another session uses our ServerID
	lastObserved leaderKey // for OnNewLeader

	priority int
	// handoff: asked to hand over, this member stepped down; once the
	// term's work has returned it releases the lock, naming the successor.
	handoff *handoff
}

type handoff struct {
	version string // the asking member's copy of our record
	to      string // its session
}

type pendingWrite struct {
	nonce   string
	start   time.Time
	term    uint64
	acquire bool
}

type leaderKey struct {
	id   string
	term uint64
}

func newCore(t timing, id, addr, session string, peerMode bool) *core {
	return &core{t: t, id: id, addr: addr, session: session, peerMode: peerMode, leaseMill: t.leaderTimeout.Milliseconds()}
}

// deadline is when the current leadership ends unless renewed.
func (c *core) deadline() time.Time { return c.renewStart.Add(c.t.renewDeadline) }

// lease is how long the observed record's version must stay unchanged
// before this member may take the lock: the holder's lease as written in
// the record, or this member's own LeaderTimeout if that is longer. The
// holder fences itself within its own lease, less the drift margin, so
// whichever member holds the lock, no taker acts before the holder stops.
func (c *core) lease() time.Duration {
	return max(c.t.leaderTimeout, c.obs.lease)
}

// expired reports whether the observed record lets a follower take the
// lock: there is none, it was released, it is this session's own (only this
// session could believe it leads, and it does not), or its version has not
// changed for the holder's lease on this member's clock.
func (c *core) expired() bool {
	o := c.obs
	switch {
	case !o.corrupt && o.rec.Released && o.rec.HandoverTo != "" && o.rec.HandoverTo != c.session:
		// Handed over to another member, which takes it at once; the
		// others wait a frequent interval in case it does not.
		return o.at.Sub(o.since) >= c.t.frequent
	case !o.found, o.rec.Released && !o.corrupt:
		return true
	case !o.corrupt && o.rec.Session == c.session:
		return true
	}
	return o.at.Sub(o.since) >= c.lease()
}

// Reasons a lock cannot be taken over; see termProblem.
var (
	// ErrUnreadableRecord: the lock record's term cannot be read (its bytes
	// do not decode, or it has no term, as S3lect writes it), so no member
	// can take the lock with a larger term. An operator repairs it with an
	// explicit term floor (Repair, tenure lock repair).
	ErrUnreadableRecord = errors.New("election: the lock record's term cannot be read")
	// ErrTermExhausted: the lock's term has reached the largest value; a
	// takeover would wrap it to zero, so none is made.
	ErrTermExhausted = errors.New("election: the lock's term is at its maximum")
)

// termProblem says why the observed record cannot be taken over with a
// larger term, or returns nil if it can. The term handed to applications
// must only grow, so a record whose term is unknown is never taken over:
// it waits for an operator's repair.
func (c *core) termProblem() error {
	o := c.obs
	switch {
	case !c.haveObs:
		return nil
	case o.found && o.corrupt && errors.Is(o.derr, ErrForeignRecord):
		// Another kind of record: not ours to repair either.
		return fmt.Errorf("version %s: %w", o.version, o.derr)
	case o.found && o.corrupt:
		return fmt.Errorf("version %s: %w: %w", o.version, ErrUnreadableRecord, o.derr)
	case o.found:
		if err := o.rec.CheckTerm(); err != nil {
			return fmt.Errorf("version %s: %w", o.version, err)
		}
	}
	if c.maxTerm == math.MaxUint64 {
		return fmt.Errorf("%w: %d", ErrTermExhausted, c.maxTerm)
	}
	return nil
}

// stable reports whether leadership looks settled: a live leader that is
// renewing, and no recent failure.
func (c *core) stable() bool {
	return c.haveObs && c.obs.found && !c.obs.corrupt && !c.obs.rec.Released && c.obs.changed &&
		c.failures == 0 && !c.peerFailed
}

// next decides what to do at now.
func (c *core) next(now time.Time) decision {
	if c.leading {
		return c.nextLeader(now)
	}
	if c.stopped {
		return decision{op: opWait, until: now.Add(24 * time.Hour)}
	}
	if now.Before(c.retryAt) {
		return decision{op: opWait, until: c.retryAt}
	}
	if !c.haveObs || c.needRead {
		return decision{op: opRead}
	}
	if h := c.handoff; h != nil {
		if c.waitForWork {
			// Never release while the term's work runs.
			return decision{op: opWait, until: now.Add(c.t.frequent)}
		}
		c.counter++
		rec := c.record(now, c.term, true)
		rec.HandoverTo = h.to
		return decision{op: opRelease, cond: store.IfMatch(h.version), record: rec}
	}
	if c.wantsHandover() {
		rec := c.obs.rec
		rec.Nonce, rec.HandoverTo, rec.HandoverPriority = newNonce(), c.session, c.priority
		return decision{op: opAsk, cond: store.IfMatch(c.obs.version), record: rec}
	}
	if c.expired() {
		if c.termProblem() != nil {
			// Never taken over: keep reading, so that a repair is seen.
			if now.Before(c.pollAt) {
				return decision{op: opWait, until: c.pollAt}
			}
			return decision{op: opRead}
		}
		if c.waitForWork {
			return decision{op: opWait, until: now.Add(c.t.frequent)}
		}
		return c.acquire(now)
	}
	if c.watch && !now.Before(c.watchDownUntil) && c.obs.found && !c.obs.rec.Released {
		// Every change will be notified: wait for one, or for the moment
		// the record would have been unchanged for the holder's lease,
		// when a read confirms it before taking the lock.
		return decision{op: opWatch, until: c.obs.since.Add(c.lease())}
	}
	if c.stable() && c.peerable() {
		return decision{op: opPeer}
	}
	// Read again at the next poll, or at the moment the version held would
	// expire, whichever comes first: a leader that stops renewing (crashed,
	// paused) is then replaced within the lease and one poll of its last
	// renewal, however stable it looked.
	at := minTime(c.pollAt, c.obs.since.Add(c.lease()))
	if now.Before(at) {
		return decision{op: opWait, until: at}
	}
	return decision{op: opRead}
}

// wantsHandover reports whether this member should ask the live leader to
// hand over: its priority is higher than the leader's and than that of any
// member that has already asked.
func (c *core) wantsHandover() bool {
	o := c.obs
	return !c.stopped && c.stable() && o.rec.Session != c.session && !o.rec.Released &&
		c.priority > o.rec.Priority && (o.rec.HandoverTo == "" || c.priority > o.rec.HandoverPriority)
}

func (c *core) nextLeader(now time.Time) decision {
	if !now.Before(c.deadline()) {
		return decision{op: opDemote}
	}
	if now.Before(c.retryAt) {
		return decision{op: opWait, until: minTime(c.retryAt, c.deadline())}
	}
	if c.needRead {
		return decision{op: opRead}
	}
	at := c.renewAt
	if c.failures > 0 {
		at = now // retryAt already spaced the attempts
	}
	if now.Before(at) {
		return decision{op: opWait, until: at}
	}
	c.counter++
	rec := c.record(now, c.term, false)
	return decision{op: opRenew, cond: store.IfMatch(c.version), record: rec}
}

// acquire takes the lock with the next term; the caller has checked
// termProblem, so the term is known and below the maximum.
func (c *core) acquire(now time.Time) decision {
	term := c.maxTerm
	if c.obs.found && !c.obs.corrupt && c.obs.rec.Term > term {
		term = c.obs.rec.Term
	}
	c.counter++
	rec := c.record(now, term+1, false)
	cond := store.IfAbsent()
	if c.obs.found {
		cond = store.IfMatch(c.obs.version)
	}
	return decision{op: opAcquire, cond: cond, record: rec}
}

// record builds the record to write; LastUpdated is filled by the caller
// from the wall clock.
func (c *core) record(_ time.Time, term uint64, released bool) Record {
	return Record{
		LeaderID: c.id, LeaderAddr: c.addr, Term: term, LeaseMillis: c.leaseMill,
		Session: c.session, Nonce: newNonce(), Counter: c.counter, Released: released, PeerKey: c.peerKey,
		Priority: c.priority,
	}
}

// releaseRecord is what a leader writes when it steps down.
func (c *core) releaseRecord() (Record, store.Cond) {
	c.counter++
	return c.record(time.Time{}, c.term, true), store.IfMatch(c.version)
}

// observe records a read or peer answer at now: found is false when the
// key is absent; derr is why the bytes found do not decode, if they do not.
func (c *core) observe(now time.Time, found bool, rec Record, derr error, version string) {
	prev := c.obs
	corrupt := derr != nil
	o := observation{found: found, corrupt: corrupt, derr: derr, rec: rec, version: version, at: now, since: now}
	if found && !corrupt {
		o.lease = leaseOf(rec)
	}
	if c.haveObs && prev.found == found && prev.version == version {
		o.since, o.notLeading = prev.since, prev.notLeading
	}
	o.changed = c.haveObs && (prev.version != version || prev.found != found)
	c.obs, c.haveObs, c.needRead = o, true, false
	c.failures, c.retryAt = 0, time.Time{}
	if o.changed {
		// The leader is renewing: worth asking it again in peer mode.
		c.peerFailed = false
	}
	c.pollAt = now.Add(c.t.spread(c.pollEvery()))
	if found && !corrupt && rec.HandoverTo == c.session && rec.Session != c.session {
		// We asked the leader to hand over: look often for its release.
		c.pollAt = now.Add(c.t.spread(c.t.frequent / 10))
	}
	if c.handoff != nil && (!found || version != c.handoff.version) {
		c.handoff = nil // someone else wrote: nothing of ours to release
	}
	if found && !corrupt && rec.Term > c.maxTerm {
		c.maxTerm = rec.Term
	}
	// Another session writing under our ServerID. A record left by our
	// own previous process (same ID, dead) is not a duplicate: only one
	// that changes while naming another session is.
	other := found && !corrupt && !rec.Released && rec.LeaderID == c.id && rec.Session != c.session
	// Once seen, the report stays until the record stops naming another
	// session under our ID (a poll that finds the version unchanged does
	// not clear it).
	switch {
	case !other:
		c.duplicateID = false
	case prev.found && prev.rec.Session == rec.Session && prev.version != version:
		c.duplicateID = true
	}

	// An earlier write of ours whose outcome was unknown has landed if its
	// nonce is in the store.
	// A renewal counts only while its term is still ours; a term that has
	// ended is never resumed (the lock, being ours, is taken again with a
	// new term instead).
	if p := c.pending; p != nil && found && !corrupt && rec.Nonce == p.nonce {
		c.pending = nil
		fresh := now.Before(p.start.Add(c.t.renewDeadline))
		switch {
		case c.leading && !p.acquire && p.term == c.term && fresh:
			c.renewStart, c.version = p.start, version
			c.renewAt = p.start.Add(c.renewInterval())
		case !c.leading && p.acquire && fresh && !c.stopped:
			c.becomeLeader(p.start, p.term, version)
		}
	}
	// While leading, the store showing anything but our version means we
	// were deposed (or an unknown write of ours landed, handled above).
	if c.leading && (!found || version != c.version) {
		if found && !corrupt && rec.Session == c.session && rec.Term == c.term && rec.HandoverTo != "" && !rec.Released {
			// Asked to hand over: the term ends now, and the lock is
			// released to the asking member once the work has returned.
			c.handoff = &handoff{version: version, to: rec.HandoverTo}
		}
		c.demote()
	}
}

// wrote records a successful write that started at start.
func (c *core) wrote(op opKind, start, now time.Time, rec Record, version string) {
	c.failures, c.retryAt, c.pending = 0, time.Time{}, nil
	switch op {
	case opAcquire:
		c.becomeLeader(start, rec.Term, version)
	case opAsk:
		// Our copy of the leader's record does not extend its lease: the
		// leader's last renewal is still the one we first saw, so the
		// version keeps the time we first saw it.
		since := c.obs.since
		c.observe(now, true, rec, nil, version)
		c.obs.since = since
		return
	case opRelease:
		c.handoff = nil
	case opRenew:
		if !now.Before(c.deadline()) {
			// The renewal came back after the deadline: leadership has
			// already been fenced. Our record is in the store, so the
			// next acquisition (a new term) can follow at once.
			c.demote()
			c.observe(now, true, rec, nil, version)
			return
		}
		c.renewStart, c.version = start, version
		c.renewAt = start.Add(c.renewInterval())
	}
	c.observe(now, true, rec, nil, version)
}

// readsPerLease is how often a polling follower reads the store per
// holder's lease, at least: the failover after a crash is at most the lease
// and one such poll after the holder's last renewal, and a release is seen
// within one poll.
const readsPerLease = 4

// pollEvery is the pause between a polling follower's reads: the frequent
// interval during transitions, the infrequent one while the leader is seen
// renewing, and never more than a quarter of the holder's lease.
func (c *core) pollEvery() time.Duration {
	d := c.t.frequent
	if c.stable() {
		d = c.t.infrequent
	}
	return min(d, c.lease()/readsPerLease)
}

// renewInterval is the pause between the starts of two renewals: exactly
// FrequentInterval. The leader is the lock's only writer, so its renewals
// need no jitter; a fixed pause keeps its cost at one write per
// FrequentInterval (720 an hour at the defaults) and the outage it rides
// out wherever the outage starts at RenewDeadline - FrequentInterval.
func (c *core) renewInterval() time.Duration {
	return c.t.frequent
}

func (c *core) becomeLeader(start time.Time, term uint64, version string) {
	c.leading, c.term, c.version, c.renewStart = true, term, version, start
	c.renewAt = start.Add(c.renewInterval())
	if term > c.maxTerm {
		c.maxTerm = term
	}
}

// refused records a definite precondition failure: someone else holds
// the lock, or holds a newer version than we saw.
func (c *core) refused(op opKind, now time.Time) {
	c.failures, c.retryAt = 0, time.Time{}
	if op == opRenew {
		// Another writer: deposed, or asked to hand over; the read that
		// follows tells which (observe demotes either way).
		c.needRead = true
		return
	}
	if op == opRelease {
		c.handoff = nil
	}
	c.needRead = true
	c.peerFailed = false
}

// failed records a store call that failed or whose outcome is unknown.
// pending is the write that may have landed (nil for reads).
func (c *core) failed(op opKind, start, now time.Time, pending *pendingWrite) {
	if pending != nil {
		c.pending = pending
		c.needRead = true // learn whether it landed before writing again
	}
	if op == opPeer {
		c.peerFailed = true
		c.needRead = true
		return
	}
	c.failures++
	pause := c.backoff()
	if c.leading {
		// Near the deadline, try more often: an outage that ends just
		// before it should still be ridden out. The floor keeps the
		// retries finite as the deadline nears.
		pause = max(min(pause, c.deadline().Sub(now)/4), 10*time.Millisecond)
	}
	c.retryAt = now.Add(pause)
}

// backoff is the pause after a store call failed (each call has already
// been retried on the retry schedule): a leader keeps trying at the
// schedule's longest pause until its deadline; a follower waits the frequent
// interval.
func (c *core) backoff() time.Duration {
	if c.leading {
		longest := time.Duration(0)
		for _, d := range c.t.retry {
			longest = max(longest, d)
		}
		return c.t.spread(max(longest, c.t.frequent/10))
	}
	return c.t.spread(c.t.frequent)
}

// peerNotLeading records that the holder answered that it does not lead:
// a peer check that failed, at the version observed.
func (c *core) peerNotLeading(now time.Time) {
	c.obs.notLeading = true
	c.failed(opPeer, now, now, nil)
}

// peerAnswered records a successful peer check.
func (c *core) peerAnswered(now time.Time, rec Record, version string) {
	c.peerFailed = false
	c.observe(now, true, rec, nil, version)
}

func (c *core) demote() {
	c.leading = false
	c.needRead = true
}

// leaseOf is the lease a record's writer declared. A value too large for
// a Duration is a lease that never runs out.
func leaseOf(rec Record) time.Duration {
	if rec.LeaseMillis > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(rec.LeaseMillis) * time.Millisecond
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
