package lease

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenure-io/tenure/store"
)

// The member core: every choice a member makes in MemberLeases mode is a
// function of the core's state, what the store showed and a monotonic now.
// It has no goroutines, no I/O and no clock. The loop (member.go) lists,
// reads and writes, feeds the results to the core and carries out what it
// decides: which records to read, which dead members to evict, which
// assignment to write, which shards may start, until when, and how long to
// sleep. What runs (the shards' callbacks) is the loop's: the core is told
// of it where a decision depends on it.

// memberView is what this member knows of another member's record.
type memberView struct {
	owner, session string
	version        string
	since          time.Time // when this version was first seen
	at             time.Time // when it was last confirmed
	// The last content fetched (for release acks and tombstones), and its
	// version.
	rec        MemberRecord
	recVersion string
	evicted    bool
	// foreign is set while the object is another kind of record
	// (ErrForeignRecord): not a member, never evicted or written.
	foreign  bool
	reported string // the version of the foreign record last logged
	// lease is the longest lease the holder's records have stated
	// (leaseMillis), and leaseKnown whether its record has been read at
	// all: until then the holder cannot be judged dead, since its lease
	// may be longer than ours.
	lease      time.Duration
	leaseKnown bool
}

// maxHolderLease bounds a recorded lease so that sums of a few of them do
// not overflow; a record stating more is waited for this long (292 years
// divided by four), which is to say never.
const maxHolderLease = time.Duration(math.MaxInt64 / 4)

// holderLease converts the leaseMillis of a record. Zero (a record that
// does not say) counts as nothing, so that the observer's own lease
// applies; a value beyond maxHolderLease saturates rather than wraps.
func holderLease(leaseMillis int64) time.Duration {
	switch {
	case leaseMillis <= 0:
		return 0
	case leaseMillis > int64(maxHolderLease/time.Millisecond):
		return maxHolderLease
	}
	return time.Duration(leaseMillis) * time.Millisecond
}

// learn records what a read of the holder's record says of its lease. The
// lease only grows: a later record that states less, or that cannot be
// read at all (read is false), never shortens the wait.
func (v *memberView) learn(rec MemberRecord, read bool) {
	if read {
		v.lease = max(v.lease, holderLease(rec.LeaseMillis))
	}
	v.leaseKnown = true
}

// seenAt is when this member first saw a shard assigned to it at term.
type seenAt struct {
	term uint64
	at   time.Time
}

// balanceKey is what a rebalance is computed from; a round whose key is
// the last one that needed no change skips the computation.
type balanceKey struct {
	assignGen, pendingGen uint64
	live, evicted         string
}

// memberTiming is the configuration the core's decisions depend on.
type memberTiming struct {
	lease         time.Duration // LeaseDuration
	renewDeadline time.Duration // two thirds of it
	renewPeriod   time.Duration
	// jitter spreads a pause by a fifth either way; nil means none.
	jitter func(time.Duration) time.Duration
}

func (t memberTiming) spread(d time.Duration) time.Duration {
	if t.jitter == nil {
		return d
	}
	return t.jitter(d)
}

// memberCore is one member's protocol state. It is owned by the loop
// goroutine and is not safe for concurrent use.
type memberCore struct {
	t       memberTiming
	prefix  string
	owner   string
	session string

	myVersion    string
	needRead     bool // our record's state is unknown: read it before writing
	retrySoon    bool // the last round failed
	pendingNonce string
	pendingStart time.Time
	counter      uint64
	renewStart   time.Time // start of the last successful renewal of our record
	confirmStart time.Time // start of the last read that confirmed the assignment
	assign       *table    // the assignment we act on
	assignVer    string
	assignFound  bool
	assignBad    bool
	assignGen    uint64                 // grows whenever assign or session changes
	views        map[string]*memberView // by relative key
	firstSeen    map[string]seenAt      // shard -> when we first saw it assigned to us at a term
	bumps        map[string]bool        // our shards to move to a new term before running again
	nextRenew    time.Time              // when the regular renewal is due
	lapseLogged  bool                   // the current lapse of our rights was logged
	lastChange   time.Time              // when membership or the assignment last changed, as we saw it
	// incumbent maps owners to the session the assignment names, for
	// assignment incGen.
	incumbent map[string]string
	incGen    uint64
	balanced  balanceKey // the last rebalance input that needed no change
	// reconciledGen and reconciledEpoch: the assignment whose shards'
	// runs reconcile last matched; pending: our shards in it not running
	// yet (waiting for a handoff or a new term), mine: how many it gives
	// us; valid: whether we could act at the last reconcile.
	reconciledGen   uint64
	reconciledEpoch uint64
	pending         []string
	mine            int
	valid           bool
	// applied is the epoch our record may state as Applied (see
	// MemberRecord), published the one our last renewal wrote.
	applied, published uint64
}

func newMemberCore(t memberTiming, prefix, owner, session string) *memberCore {
	return &memberCore{t: t, prefix: prefix, owner: owner, session: session,
		views: map[string]*memberView{}, firstSeen: map[string]seenAt{}, bumps: map[string]bool{},
		assign: emptyTable()}
}

func (c *memberCore) key(rel string) string { return c.prefix + rel }

// ownKey is the relative key of our record.
func (c *memberCore) ownKey() string { return memberKey(c.owner, c.session) }

// leaseOf is how long this member must see a record unchanged before the
// holder's rights have surely lapsed: the larger of our own LeaseDuration
// and the lease the holder wrote. Members may run different settings
// during a rolling change; the holder's lease always wins.
func (c *memberCore) leaseOf(v *memberView) time.Duration {
	return max(c.t.lease, v.lease)
}

// dead reports whether the record has been unchanged for the holder's
// lease: its session's rights have lapsed, and it may be evicted. A holder
// whose record was never read is not judged.
func (c *memberCore) dead(v *memberView) bool {
	return v.evicted || v.leaseKnown && v.at.Sub(v.since) >= c.leaseOf(v)
}

// markEvicted flags the views of sessions the assignment lists as evicted.
func (c *memberCore) markEvicted() {
	for _, h := range c.assign.hdr.Evicted {
		if v := c.views[memberKey(h.Owner, h.Session)]; v != nil {
			v.evicted = true
		}
	}
}

// retry is the schedule of attempts of one store call: at once, then
// after a fiftieth and a fifth of the renew period (100 ms and 1 s with the
// defaults), each with jitter.
func (c *memberCore) retry() []time.Duration {
	rp := c.t.renewPeriod
	return []time.Duration{0, c.t.spread(rp / 50), c.t.spread(rp / 5)}
}

// regularPause is the time between two renewals: half to a little over
// the renew period, with jitter.
func (c *memberCore) regularPause() time.Duration {
	rp := c.t.renewPeriod
	return rp/2 + c.t.spread(rp/2)
}

// transition reports whether this member should list more often than it
// renews: it has shards to start (waiting for their handoff), or it saw
// membership or the assignment change less than a renew period ago. A
// stable group lists only when it renews, so its cost does not change.
func (c *memberCore) transition(now time.Time) bool {
	return c.valid && len(c.pending) > 0 || now.Sub(c.lastChange) < c.t.renewPeriod
}

// pause is how long the loop sleeps after a round at now.
func (c *memberCore) pause(now time.Time) time.Duration {
	pause := c.nextRenew.Sub(now)
	switch {
	case c.retrySoon:
		// The last round failed: our rights run on the older
		// confirmations, so try again well before they lapse.
		pause = c.t.spread(c.t.renewPeriod / 4)
		c.retrySoon = false
	case c.applied > c.published:
		// Shards were handed off: tell their new owners now.
		pause = 0
	case c.transition(now):
		// Membership or the assignment is changing: list often, so
		// that handoffs complete in a fraction of a renew period.
		// Renewals keep their own period.
		pause = min(pause, c.t.spread(c.t.renewPeriod/10))
	}
	// Look again the moment a member that stopped renewing would be
	// judged dead, rather than at the next round.
	if d := c.nextDeath().Sub(now); d > 0 && d < pause {
		pause = d + time.Millisecond
	}
	return max(pause, 0)
}

// nextDeath is the earliest moment a member that keeps its current record
// version would be judged dead.
func (c *memberCore) nextDeath() time.Time {
	var next time.Time
	for _, v := range c.views {
		if v.evicted || v.session == c.session {
			continue
		}
		if !v.leaseKnown {
			continue
		}
		if t := v.since.Add(c.leaseOf(v)); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// updateApplied raises applied to the epoch of the assignment reconcile
// last matched, once every run it stopped has returned (idle).
func (c *memberCore) updateApplied(idle bool) {
	if idle {
		c.applied = max(c.applied, c.reconciledEpoch)
	}
}

// renewDue reports whether a round at now writes our record: it is
// unknown or missing, we have handoffs to announce, or it is time.
func (c *memberCore) renewDue(now time.Time) bool {
	return c.needRead || c.myVersion == "" || c.applied > c.published || !now.Before(c.nextRenew)
}

// ownRead is what a read of our own record, after a write whose outcome
// was unknown, tells the loop to do.
type ownRead int

const (
	ownWrite   ownRead = iota // renew as planned
	ownAbandon                // evicted or removed: join again under a new session
	ownFailed                 // the read failed: no renewal this round
)

// readOwn takes the read of our own record at now. Only we write it, so
// what is there is ours: a write of ours that landed counts as a renewal
// from the moment it started, if that is recent enough.
func (c *memberCore) readOwn(now time.Time, data []byte, version string, err error) ownRead {
	rec, derr := DecodeMemberRecord(data)
	switch {
	case errors.Is(err, store.ErrNotFound) && c.myVersion == "":
		c.needRead = false
	case errors.Is(err, store.ErrNotFound), err == nil && (derr != nil || rec.EvictedBy != "" || rec.Session != c.session):
		return ownAbandon
	case err != nil:
		return ownFailed
	default:
		c.needRead = false
		c.myVersion = version
		if rec.Nonce == c.pendingNonce && now.Sub(c.pendingStart) < c.t.renewDeadline {
			c.renewStart = c.pendingStart
		}
	}
	return ownWrite
}

// abandon ends this session after it was evicted; session is the new
// one, which others treat as a restart (its shards come back with new
// terms). The loop stops every shard.
func (c *memberCore) abandon(session string) {
	c.session = session
	c.myVersion, c.renewStart, c.needRead = "", time.Time{}, false
	c.applied, c.published, c.reconciledEpoch = 0, 0, 0
	c.assignGen++
	clear(c.bumps)
	clear(c.firstSeen)
}

// renewal is the record a renewal starting at start writes, and its
// condition: create on the first round, then compare-and-swap on our last
// version, carrying the applied epoch. The loop fills LastUpdated and
// Nonce.
func (c *memberCore) renewal(start time.Time) (MemberRecord, store.Cond) {
	c.counter++
	rec := MemberRecord{OwnerID: c.owner, Session: c.session,
		LeaseMillis: c.t.lease.Milliseconds(), Counter: c.counter, Applied: c.applied}
	cond := store.IfAbsent()
	if c.myVersion != "" {
		cond = store.IfMatch(c.myVersion)
	}
	c.nextRenew = start.Add(c.regularPause())
	return rec, cond
}

// renewed records a renewal that started at start and wrote version.
func (c *memberCore) renewed(rec MemberRecord, start time.Time, version string) {
	c.myVersion, c.renewStart = version, start
	c.published = max(c.published, rec.Applied)
}

// renewFailed records a renewal whose outcome is unknown: read the record
// back before writing again.
func (c *memberCore) renewFailed(rec MemberRecord, start time.Time) {
	c.needRead, c.retrySoon = true, true
	c.nextRenew = time.Time{}
	c.pendingNonce, c.pendingStart = rec.Nonce, start
}

// observeList updates the member views from a listing that started at
// start and ended at end. It returns the member records to read (relative
// keys, in the listing's order) and the assignment's version ("" if
// absent). The loop reads each record into its view (fetched), then passes
// the assignment's version to listedAssignment.
func (c *memberCore) observeList(items []store.Item, end time.Time) (reads []string, assignVer string) {
	seen := map[string]bool{}
	for _, it := range items {
		rel := strings.TrimPrefix(it.Key, c.prefix)
		if rel == assignmentKey {
			assignVer = it.Version
			continue
		}
		owner, session, ok := parseMemberKey(rel)
		if !ok {
			continue
		}
		seen[rel] = true
		v := c.views[rel]
		fetch := false
		if v == nil || v.version != it.Version {
			// A record we did not know, or one that was dead and changed,
			// may be a tombstone: read it.
			check := v == nil || c.dead(v)
			if v == nil {
				v = &memberView{owner: owner, session: session}
				c.views[rel] = v
				c.lastChange = end
			}
			v.version, v.since = it.Version, end
			fetch = check && session != c.session
		}
		if !v.leaseKnown && session != c.session {
			// New, or the last read failed: the holder's lease is still
			// unknown.
			fetch = true
		}
		if fetch {
			reads = append(reads, rel)
		}
		v.at = end
	}
	for rel := range c.views {
		if !seen[rel] {
			delete(c.views, rel)
			c.lastChange = end
		}
	}
	return reads, assignVer
}

// fetched takes the read of a member record into its view: data and ver
// as read, or err. It reports whether the record was read, the error to
// report if it could not be used, and whether that error is a foreign
// record not logged yet.
func (c *memberCore) fetched(rel string, data []byte, ver string, err error) (ok bool, bad error, logForeign bool) {
	v := c.views[rel]
	if errors.Is(err, store.ErrTooLarge) {
		// Not a record a member wrote; it is judged with our own lease.
		v.learn(MemberRecord{}, false)
		return false, err, false
	}
	if err != nil {
		return false, nil, false
	}
	rec, err := DecodeMemberRecord(data)
	v.foreign = errors.Is(err, ErrForeignRecord)
	if err != nil {
		err = fmt.Errorf("%s: %w", c.key(rel), err)
		if v.foreign && ver != v.reported {
			v.reported = ver
			logForeign = true
		}
		v.learn(rec, false)
		return false, err, logForeign
	}
	v.rec, v.recVersion = rec, ver
	v.learn(rec, true)
	v.evicted = rec.EvictedBy != ""
	return true, nil, false
}

// listedAssignment takes the assignment's version from the listing that
// started at start (after the member records were read). It reports
// whether the assignment changed and must be read.
func (c *memberCore) listedAssignment(assignVer string, start, now time.Time) (read bool) {
	c.markEvicted()
	switch {
	case assignVer == "":
		if c.assignVer != "" || c.assignBad {
			c.setAssign(emptyTable(), "", false, false, now)
		}
		c.confirmStart = start
	case assignVer == c.assignVer:
		c.confirmStart = start
	default:
		return true
	}
	return false
}

// assignReport says what the loop logs of an assignment read.
type assignReport int

const (
	reportNone    assignReport = iota
	reportForeign              // another kind of record is where the assignment belongs
	reportCorrupt              // the assignment does not decode
)

// assignmentRead takes the read of the assignment that ran from start to
// end. It returns what to log and the error to report, if any.
func (c *memberCore) assignmentRead(start, end time.Time, data []byte, version string, err error) (assignReport, error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.setAssign(emptyTable(), "", false, false, end)
		c.confirmStart = start
		return reportNone, nil
	case err != nil:
		c.retrySoon = true
		return reportNone, err
	}
	// The assignment read replaces ours whatever it holds: let ours go
	// first, so that two of them are never held at once.
	c.setAssign(emptyTable(), c.assignVer, c.assignFound, true, end)
	a, derr := decodeTable(data)
	if derr != nil {
		derr = fmt.Errorf("%s: %w", c.key(assignmentKey), derr)
		report := reportCorrupt
		switch {
		case c.assignBad && c.assignVer == version:
			report = reportNone
		case errors.Is(derr, ErrForeignRecord):
			report = reportForeign
		}
		c.setAssign(emptyTable(), version, true, true, end)
		return report, derr
	}
	c.setAssign(a, version, true, false, end)
	c.confirmStart = start
	c.noteAssigned(end)
	c.markEvicted()
	return reportNone, nil
}

// setAssign replaces the assignment this member acts on, at now.
func (c *memberCore) setAssign(t *table, version string, found, bad bool, now time.Time) {
	c.assign, c.assignVer, c.assignFound, c.assignBad = t, version, found, bad
	c.assignGen++
	c.lastChange = now
}

// eviction is a store call evictDead decides: delete a tombstone
// everyone has had time to see, or replace a dead member's record with
// tomb by compare-and-swap on the version seen unchanged for its lease.
type eviction struct {
	rel     string
	delete  bool
	tomb    MemberRecord // the loop fills LastUpdated and Nonce
	version string
}

// evictions decides the evictions of a round. The swap and the member's
// own renewal are on the same key, so exactly one wins: if the member
// renewed meanwhile, it is alive; if the tombstone landed, the member's
// next renewal fails and it never acts again under that session. Only
// evicted members' shards move without waiting for a release.
func (c *memberCore) evictions() []eviction {
	var out []eviction
	for rel, v := range c.views {
		if v.evicted && !v.foreign && v.at.Sub(v.since) >= 2*c.leaseOf(v) {
			// A tombstone everyone has had time to see: its session is
			// dead for good, so an unconditional delete is safe.
			out = append(out, eviction{rel: rel, delete: true})
			continue
		}
		if v.evicted || v.foreign || v.session == c.session || !c.dead(v) {
			continue
		}
		// The tombstone keeps the holder's lease, so that members that
		// first see it wait as long before deleting it.
		tomb := MemberRecord{OwnerID: v.owner, Session: v.session,
			LeaseMillis: c.leaseOf(v).Milliseconds(), EvictedBy: c.owner}
		out = append(out, eviction{rel: rel, tomb: tomb, version: v.version})
	}
	return out
}

// tombDeleted records that a tombstone was deleted.
func (c *memberCore) tombDeleted(rel string) { delete(c.views, rel) }

// evicted records a tombstone written at version, at now.
func (c *memberCore) evicted(e eviction, version string, now time.Time) {
	v := c.views[e.rel]
	v.version, v.rec, v.recVersion, v.evicted = version, e.tomb, version, true
	c.lastChange = now
}

// evictRefused records that the member renewed (or someone else evicted
// it) before our tombstone: the loop reads its record again.
func (c *memberCore) evictRefused(e eviction, now time.Time) {
	c.views[e.rel].since = now
}

// noteAssigned records when we first saw each shard assigned to us at its
// term: a handoff from a live member waits a lease from then at most. Only
// shards that wait for a handoff need it.
func (c *memberCore) noteAssigned(at time.Time) {
	// A new map each time: maps do not shrink, and most handoffs end
	// before the next change.
	seen := map[string]seenAt{}
	for i, id := range c.assign.ids {
		if e := c.assign.at(i); len(e.Waits) > 0 && e.Owner == c.owner && e.Session == c.session {
			if s, ok := c.firstSeen[id]; ok && s.term == e.Term {
				seen[id] = s
			} else {
				seen[id] = seenAt{term: e.Term, at: at}
			}
		}
	}
	c.firstSeen = seen
}

// live returns the members that have not been evicted or left, owner ->
// session. Where an owner has several live sessions (two processes with
// one OwnerID), the session the assignment already names wins, else the
// one seen first; if that is not us, we are the duplicate (dup) and stay
// out.
func (c *memberCore) live() (out map[string]string, dup bool) {
	if c.incumbent == nil || c.incGen != c.assignGen {
		c.incumbent, c.incGen = map[string]string{}, c.assignGen
		for _, te := range c.assign.ents {
			if n := c.assign.names[te.name]; n.Owner != "" {
				c.incumbent[n.Owner] = n.Session
			}
		}
	}
	incumbent := c.incumbent
	type cand struct {
		session string
		since   time.Time
	}
	best := map[string]cand{}
	twice := false
	for _, v := range c.views {
		// A member judged dead but not evicted still counts: its shards
		// move only with a wait until the eviction lands. Another kind of
		// record is no member at all.
		if v.evicted || v.foreign {
			continue
		}
		if b, ok := best[v.owner]; ok {
			if v.owner == c.owner {
				twice = true
			}
			switch {
			case incumbent[v.owner] == b.session:
				continue
			case incumbent[v.owner] == v.session:
			case v.since.Before(b.since), v.since.Equal(b.since) && v.session < b.session:
			default:
				continue
			}
		}
		best[v.owner] = cand{v.session, v.since}
	}
	out = make(map[string]string, len(best))
	for o, b := range best {
		out[o] = b.session
	}
	// We count as live only while our own record is current.
	if c.myVersion == "" || c.renewStart.IsZero() {
		if out[c.owner] == c.session {
			delete(out, c.owner)
		}
	}
	return out, twice && out[c.owner] != c.session
}

// balanceInput is what a rebalance needs from outside the core: the live
// members, the shards added and removed since the assignment (pending
// changes, generation pendingGen), and the last term of ours that ended
// for each shard (asked only when a shard waits for a new term).
type balanceInput struct {
	live          map[string]string
	adds, removes []string
	pendingGen    uint64
	ended         func() map[string]uint64
}

// rebalance decides the assignment to write when membership or the shard
// set changed: next, to write on cond, or nil. Concurrent members compute
// the same result; one write wins. inAssignment reports that the current
// assignment already holds the pending changes. The loop fills next's
// LastUpdated and Nonce.
func (c *memberCore) rebalance(in balanceInput) (next *table, cond store.Cond, inAssignment bool) {
	live := in.live
	// Record every eviction we know of in the assignment, and forget those
	// whose tombstones are gone.
	var evicted []Holder
	for _, v := range c.views {
		if v.evicted {
			evicted = append(evicted, Holder{Owner: v.owner, Session: v.session})
		}
	}
	sort.Slice(evicted, func(i, j int) bool {
		if evicted[i].Owner != evicted[j].Owner {
			return evicted[i].Owner < evicted[j].Owner
		}
		return evicted[i].Session < evicted[j].Session
	})
	key := balanceKey{assignGen: c.assignGen, pendingGen: in.pendingGen, live: holdersKey(live, nil), evicted: holdersKey(nil, evicted)}
	if len(c.bumps) == 0 && key == c.balanced {
		// Nothing the result depends on changed since a round that
		// needed no change: skip computing it over every shard again.
		return nil, store.Cond{}, false
	}
	// The shards, sorted: the keys of the assignment written are these.
	shards := c.assign.ids
	if len(in.adds) > 0 || len(in.removes) > 0 {
		set := make(map[string]bool, c.assign.len()+len(in.adds))
		for _, id := range c.assign.ids {
			set[id] = true
		}
		for _, id := range in.adds {
			set[id] = true
		}
		for _, id := range in.removes {
			delete(set, id)
		}
		shards = sortedKeys(set)
	}
	// The next assignment's entries, in the order of ids: computed only
	// if the current one needs a change, over the compact form, without a
	// map of every shard.
	var ents []Entry
	ids, changed := shards, false
	if !c.assign.balanced(live, shards) {
		ents, changed = balanceEntries(c.assign.get, c.assign.len(), live, shards)
	}
	// change makes ents a new version of the assignment, if it is not one
	// already. Unchanged, the shards are the current ones.
	change := func() {
		if !changed {
			ids, ents = c.assign.ids, make([]Entry, c.assign.len())
			for i := range ents {
				ents[i] = c.assign.at(i)
			}
			changed = true
		}
	}
	if !slices.Equal(evicted, c.assign.hdr.Evicted) {
		change()
	}
	var ended map[string]uint64
	if len(c.bumps) > 0 {
		ended = in.ended()
	}
	for id := range c.bumps {
		var e Entry
		var ok bool
		if changed {
			var i int
			if i, ok = slices.BinarySearch(ids, id); ok {
				e = ents[i]
			}
		} else {
			e, ok = c.assign.get(id)
		}
		if !ok || e.Owner != c.owner || e.Session != c.session || e.Term != ended[id] {
			delete(c.bumps, id)
			continue
		}
		change()
		i, _ := slices.BinarySearch(ids, id)
		ents[i].Term++
	}
	if !changed {
		c.balanced = key
		return nil, store.Cond{}, true
	}
	// Only a member that is itself live and current writes.
	if live[c.owner] != c.session {
		return nil, store.Cond{}, false
	}
	b := newTableBuilder(ids)
	for i, id := range ids {
		b.add(id, ents[i])
	}
	next = b.t
	next.hdr = Assignment{Epoch: c.assign.hdr.Epoch + 1, Evicted: evicted,
		UpdatedBy: c.owner}
	cond = store.IfAbsent()
	if c.assignFound {
		cond = store.IfMatch(c.assignVer)
	}
	return next, cond, false
}

// assignWritten records that the assignment next, written from start to
// end, is at version.
func (c *memberCore) assignWritten(next *table, version string, start, end time.Time) {
	c.setAssign(next, version, true, false, end)
	c.confirmStart = start
	c.noteAssigned(end)
	clear(c.bumps)
}

// holdersKey is a canonical string for a set of member sessions.
func holdersKey(live map[string]string, hs []Holder) string {
	var b strings.Builder
	for _, o := range sortedKeys(live) {
		b.WriteString(o + "\x00" + live[o] + "\x00")
	}
	for _, h := range hs {
		b.WriteString(h.Owner + "\x00" + h.Session + "\x00")
	}
	return b.String()
}

// rightsDeadline is when our rights to every shard lapse unless renewed:
// RenewDeadline after the earlier of the starts of the renewal of our
// record and of the read that confirmed the assignment, as both must hold.
func (c *memberCore) rightsDeadline() time.Time {
	if c.renewStart.IsZero() || c.confirmStart.IsZero() || c.assignBad {
		return time.Time{}
	}
	first := c.renewStart
	if c.confirmStart.Before(first) {
		first = c.confirmStart
	}
	return first.Add(c.t.renewDeadline)
}

// lapsed reports whether our rights have lapsed at now, and whether to
// warn of it: once per lapse, after a round whose renewal failed, not
// every round until the store is back.
func (c *memberCore) lapsed(now time.Time, renewed bool) (warn bool) {
	switch lapsed := !now.Before(c.rightsDeadline()); {
	case !lapsed:
		c.lapseLogged = false
	case !renewed && !c.lapseLogged:
		c.lapseLogged = true
		return true
	}
	return false
}

// beginReconcile reports whether the assignment changed since the last
// reconcile, so that every shard must be looked at again.
func (c *memberCore) beginReconcile() (rescan bool) {
	rescan = c.reconciledGen != c.assignGen
	c.reconciledGen = c.assignGen
	return rescan
}

// mineAt reports whether the assignment gives shard id to our session at
// term: a run at another term, or of a shard given to another, stops.
func (c *memberCore) mineAt(id string, term uint64) bool {
	e, ok := c.assign.get(id)
	return ok && e.Owner == c.owner && e.Session == c.session && e.Term == term
}

// superseded reports whether the assignment has moved shard id past term:
// such an ended term can never come back.
func (c *memberCore) superseded(id string, term uint64) bool {
	e, ok := c.assign.get(id)
	return ok && e.Term > term
}

// countPending lists the shards the assignment gives us that do not run
// (running reports those that do), when the assignment changed (rescan)
// or runs stopped since the list was made (runs is how many run).
func (c *memberCore) countPending(rescan bool, runs int, running func(string) bool) {
	if !rescan && runs+len(c.pending) == c.mine {
		return
	}
	c.pending, c.mine = c.pending[:0], 0
	for i, id := range c.assign.ids {
		if c.assign.isOwner(i, c.owner, c.session) {
			c.mine++
			if !running(id) {
				c.pending = append(c.pending, id)
			}
		}
	}
}

// reconciled records that the runs match the assignment, and whether we
// could act (valid).
func (c *memberCore) reconciled(valid bool) {
	c.reconciledEpoch = c.assign.hdr.Epoch
	c.valid = valid
}

// handoff is what one reconcile learned of an earlier owner's record.
type handoff struct {
	v       *memberView // nil: the member left
	read    bool        // its current record was read
	applied bool        // it states it applied our assignment
}

// handoffScan goes through the pending shards once, deciding which may
// start. It stops where it needs an earlier owner's record read (need);
// the loop reads it into its view (fetched), tells the scan (read) and
// resumes it. Each record is read at most once per scan.
type handoffScan struct {
	c     *memberCore
	now   time.Time
	live  map[string]string
	ended map[string]uint64
	cache map[[2]string]*handoff
	i     int
	// need is the holder whose record the scan waits for.
	need        [2]string
	ready, keep []string
}

func (c *memberCore) scanHandoffs(now time.Time, live map[string]string, ended map[string]uint64) *handoffScan {
	return &handoffScan{c: c, now: now, live: live, ended: ended, cache: map[[2]string]*handoff{}, keep: c.pending[:0]}
}

// next runs the scan until it ends (done) or needs the record at rel read.
func (s *handoffScan) next() (rel string, done bool) {
	c := s.c
	for ; s.i < len(c.pending); s.i++ {
		id := c.pending[s.i]
		e, _ := c.assign.get(id)
		if s.ended[id] == e.Term {
			// A term that ended (our rights lapsed) is never resumed: the
			// next rebalance moves the shard to a new term.
			c.bumps[id] = true
			s.keep = append(s.keep, id)
			continue
		}
		ok, need := s.handoffDone(id, e)
		if need != "" {
			return need, false
		}
		if ok {
			s.ready = append(s.ready, id)
		} else {
			s.keep = append(s.keep, id)
		}
	}
	return "", true
}

// read tells the scan whether the record it needed was read.
func (s *handoffScan) read(ok bool) {
	st := &handoff{v: s.c.views[memberKey(s.need[0], s.need[1])], read: ok}
	st.applied = ok && st.v.rec.Applied >= s.c.assign.hdr.Epoch
	s.cache[s.need] = st
}

// handoffDone reports whether every earlier owner that may still act on
// the shard has stopped: its record states it applied the assignment that
// gives us the shard (or, as earlier versions wrote, released the shard),
// or it is no longer live, or its own lease (the larger of ours and the
// one its record states) has passed since we first saw the shard assigned
// to us: it saw the assignment that moved the shard before that, so its
// rights, confirmed no later than that, have lapsed. need names a record
// to read before it can tell.
func (s *handoffScan) handoffDone(id string, e Entry) (ok bool, need string) {
	c := s.c
	first, seen := c.firstSeen[id]
	seen = seen && first.term == e.Term
	for _, h := range e.Waits {
		if h.Session == c.session || s.live[h.Owner] != h.Session {
			continue
		}
		k := [2]string{h.Owner, h.Session}
		st := s.cache[k]
		if st == nil {
			st = &handoff{v: c.views[memberKey(h.Owner, h.Session)]}
			if st.v != nil {
				if st.v.recVersion != st.v.version {
					s.need = k
					return false, memberKey(h.Owner, h.Session)
				}
				st.read = true
				st.applied = st.v.rec.Applied >= c.assign.hdr.Epoch
			}
			s.cache[k] = st
		}
		v := st.v
		switch {
		case v == nil: // gone: left
		case seen && v.leaseKnown && s.now.Sub(first.at) >= c.leaseOf(v):
		case st.applied:
		case st.read && released(v.rec, id, h.Term):
		default:
			return false, ""
		}
	}
	return true, ""
}

// setPending keeps the shards still waiting to start; requeued of them
// were kept in order by the scan, the rest were ready but could not start.
func (c *memberCore) setPending(keep []string, requeued int) {
	c.pending = keep
	if len(keep) > requeued {
		sort.Strings(c.pending)
	}
}

// released reports whether rec, as earlier versions wrote it, releases
// shard at term.
func released(rec MemberRecord, shard string, term uint64) bool {
	t, ok := rec.Released[shard]
	return ok && t >= term
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
