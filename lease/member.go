package lease

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/internal/notify"
	"github.com/tenure-io/tenure/internal/recordkind"
	"github.com/tenure-io/tenure/store"
)

// Member-lease mode. Keys under the prefix:
//
//	members/<owner>/<session>   one record per member instance, renewed every RenewPeriod
//	assignment.json             shard -> owner, session, term; changed only on membership change
//
// Every RenewPeriod a member renews its record (one compare-and-swap) and
// lists the prefix (one request), which returns the version of every
// member record and of the assignment: a record whose version has not
// changed for the holder's lease (the larger of our LeaseDuration and the
// leaseMillis it wrote), as this member observed it, belongs to a dead
// member. The assignment is read only when its version changes. A member
// acts on a shard only while the assignment names its session for the
// shard, its own record was renewed, and the assignment was confirmed
// unchanged, both within RenewDeadline.

// MemberRecord is a member's lease record.
type MemberRecord struct {
	// Kind says what the record is: every record a member writes says
	// MemberKind. Records of the previous version have none.
	Kind        string    `json:"kind,omitempty"`
	OwnerID     string    `json:"ownerID"`
	Session     string    `json:"session"`
	LastUpdated time.Time `json:"lastUpdated"`
	LeaseMillis int64     `json:"leaseMillis"`
	Nonce       string    `json:"nonce"`
	Counter     uint64    `json:"counter"`
	// Applied is the highest assignment epoch this session has applied:
	// every shard that assignment does not give it, at the term it gives,
	// has been stopped and its work has returned. An owner waiting for
	// this member's handoff of a shard it sees assigned to itself at epoch
	// E may start once Applied ≥ E. One number, whatever the number of
	// shards that moved.
	Applied uint64 `json:"applied,omitempty"`
	// Released maps shards to the last term this member held them at.
	// Earlier versions wrote it instead of Applied; it is still honoured.
	Released map[string]uint64 `json:"released,omitempty"`
	// EvictedBy is set on a tombstone: another member judged this one dead
	// and replaced its record by compare-and-swap on the version it saw
	// unchanged for a lease. The evicted session never acts again.
	EvictedBy string `json:"evictedBy,omitempty"`
}

// DecodeMemberRecord parses a member record. A record whose kind is not
// MemberKind, or that has no kind and not the previous version's ownerID or
// has the fields of another tenure record, is refused with an error
// matching ErrForeignRecord.
func DecodeMemberRecord(data []byte) (MemberRecord, error) {
	var r MemberRecord
	if len(data) > maxRecordSize {
		return r, fmt.Errorf("lease: member record is %d bytes", len(data))
	}
	if err := recordkind.Require(data, MemberKind); err != nil {
		return r, fmt.Errorf("lease: member record: %w: %w", ErrForeignRecord, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return MemberRecord{}, fmt.Errorf("lease: member record: %w", err)
	}
	if r.Kind != "" && r.Kind != MemberKind {
		return MemberRecord{}, fmt.Errorf("lease: member record: %w: it is a record of kind %q", ErrForeignRecord, r.Kind)
	}
	if r.OwnerID == "" || r.Session == "" {
		return MemberRecord{}, errors.New("lease: member record without ownerID or session")
	}
	if r.LeaseMillis < 0 {
		return MemberRecord{}, fmt.Errorf("lease: member record has a negative leaseMillis %d", r.LeaseMillis)
	}
	return r, nil
}

// encode returns the record's JSON, with its kind.
func (r MemberRecord) encode() []byte {
	r.Kind = MemberKind
	b, err := json.Marshal(r)
	if err != nil {
		// Strings, numbers, a time and a map of numbers: Marshal cannot
		// fail on them.
		panic("lease: encoding a member record: " + err.Error())
	}
	return b
}

const assignmentKey = "assignment.json"

func memberKey(owner, session string) string {
	return "members/" + url.PathEscape(owner) + "/" + session
}

func parseMemberKey(rel string) (owner, session string, ok bool) {
	rest, ok := strings.CutPrefix(rel, "members/")
	if !ok {
		return "", "", false
	}
	o, s, ok := strings.Cut(rest, "/")
	if !ok || s == "" || strings.Contains(s, "/") {
		return "", "", false
	}
	owner, err := url.PathUnescape(o)
	if err != nil || owner == "" {
		return "", "", false
	}
	return owner, s, true
}

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

// leaseOf is how long this member must see a record unchanged before the
// holder's rights have surely lapsed: the larger of our own LeaseDuration
// and the lease the holder wrote. Members may run different settings
// during a rolling change; the holder's lease always wins.
func (m *memberMode) leaseOf(v *memberView) time.Duration {
	return max(m.c.cfg.LeaseDuration, v.lease)
}

// dead reports whether the record has been unchanged for the holder's
// lease: its session's rights have lapsed, and it may be evicted. A holder
// whose record was never read is not judged.
func (m *memberMode) dead(v *memberView) bool {
	return v.evicted || v.leaseKnown && v.at.Sub(v.since) >= m.leaseOf(v)
}

// markEvicted flags the views of sessions the assignment lists as evicted.
func (m *memberMode) markEvicted() {
	for _, h := range m.assign.hdr.Evicted {
		if v := m.views[memberKey(h.Owner, h.Session)]; v != nil {
			v.evicted = true
		}
	}
}

// shardRun is one term of one shard led by this member. Without callbacks
// nothing runs and cancel and done are nil: the term ends when it stops.
type shardRun struct {
	id     string
	term   uint64
	cancel context.CancelFunc
	done   chan struct{} // closed when the callbacks have returned
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

type memberMode struct {
	c       *Coordinator
	session string

	// Owned by the loop goroutine.
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
	fenceTimer   interface{ Stop() bool }
	nextRenew    time.Time // when the regular renewal is due
	lapseLogged  bool      // the current lapse of our rights was logged
	lastChange   time.Time // when membership or the assignment last changed, as we saw it
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

	// hookStep, if set (tests only), runs at the top of every round.
	hookStep func()
	// hook, if set (tests only), sees every start and end of a shard's
	// term and every move of the deadline.
	hook func(shard string, leading bool, term uint64, at, deadline time.Time)

	mu        sync.Mutex
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
	m := &memberMode{
		c: c, session: rand.Text()[:16],
		views: map[string]*memberView{}, firstSeen: map[string]seenAt{},
		ended: map[string]uint64{}, bumps: map[string]bool{},
		runs: map[string]*shardRun{}, finishing: map[*shardRun]bool{}, busy: map[string]int{},
		wake: make(chan struct{}, 1), pendGen: 1, assign: emptyTable(),
	}
	m.adds = slices.Clone(c.cfg.ShardIDs)
	m.pubShards = slices.Compact(slices.Sorted(slices.Values(c.cfg.ShardIDs)))
	return m
}

func (m *memberMode) key(rel string) string { return m.c.cfg.Prefix + rel }

// retry is the schedule of attempts of one store call: at once, then
// after a fiftieth and a fifth of the renew period (100 ms and 1 s with the
// defaults), each with jitter.
func (m *memberMode) retry() []time.Duration {
	rp := m.c.cfg.RenewPeriod
	return []time.Duration{0, store.Jitter(rp/50, 0.2), store.Jitter(rp/5, 0.2)}
}

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
	for _, pause := range m.retry() {
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
		pause := m.nextRenew.Sub(m.now())
		switch {
		case m.retrySoon:
			// The last round failed: our rights run on the older
			// confirmations, so try again well before they lapse.
			pause = store.Jitter(cfg.RenewPeriod/4, 0.2)
			m.retrySoon = false
		case m.applied > m.published:
			// Shards were handed off: tell their new owners now.
			pause = 0
		case m.transition():
			// Membership or the assignment is changing: list often, so
			// that handoffs complete in a fraction of a renew period.
			// Renewals keep their own period.
			pause = min(pause, store.Jitter(cfg.RenewPeriod/10, 0.2))
		}
		// Look again the moment a member that stopped renewing would be
		// judged dead, rather than at the next round.
		if d := m.nextDeath().Sub(m.now()); d > 0 && d < pause {
			pause = d + time.Millisecond
		}
		pause = max(pause, 0)
		t := cfg.Clock.NewTimer(pause)
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
	if m.needRead || m.myVersion == "" || m.applied > m.published || !m.now().Before(m.nextRenew) {
		renewed = m.renew(ctx)
	}
	var (
		items              []store.Item
		err                error
		listStart, listEnd time.Time
	)
	for _, pause := range m.retry() {
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
		m.retrySoon = true
	} else {
		m.observe(ctx, items, listStart, listEnd)
		m.evictDead(ctx)
		m.rebalance(ctx)
	}
	switch lapsed := !m.now().Before(m.rightsDeadline()); {
	case !lapsed:
		m.lapseLogged = false
	case !renewed && !m.lapseLogged:
		// Once per lapse, not every round until the store is back.
		m.c.log.Warn("renew deadline passed; stopped acting on every shard")
		m.lapseLogged = true
	}
	m.reconcile(ctx)
}

// regularPause is the time between two renewals: half to a little over
// the renew period, with jitter.
func (m *memberMode) regularPause() time.Duration {
	rp := m.c.cfg.RenewPeriod
	return rp/2 + store.Jitter(rp/2, 0.2)
}

// transition reports whether this member should list more often than it
// renews: it has shards to start (waiting for their handoff), or it saw
// membership or the assignment change less than a renew period ago. A
// stable group lists only when it renews, so its cost does not change.
func (m *memberMode) transition() bool {
	return m.valid && len(m.pending) > 0 || m.now().Sub(m.lastChange) < m.c.cfg.RenewPeriod
}

// updateApplied raises applied to the epoch of the assignment reconcile
// last matched, once every run it stopped has returned.
func (m *memberMode) updateApplied() {
	m.mu.Lock()
	idle := len(m.finishing) == 0
	m.mu.Unlock()
	if idle {
		m.applied = max(m.applied, m.reconciledEpoch)
	}
}

// renew writes our record: create on the first round, then compare-and-
// swap on our last version, carrying the release acks. After a failure
// whose outcome is unknown it first reads the record back: only we write
// it, so what is there is ours (a write of ours that landed counts as a
// renewal from the moment it started, if that is recent enough).
func (m *memberMode) renew(ctx context.Context) bool {
	cfg := m.c.cfg
	key := m.key(memberKey(cfg.OwnerID, m.session))
	if m.needRead {
		data, v, err := m.get(ctx, key)
		rec, derr := DecodeMemberRecord(data)
		switch {
		case errors.Is(err, store.ErrNotFound) && m.myVersion == "":
			m.needRead = false
		case errors.Is(err, store.ErrNotFound), err == nil && (derr != nil || rec.EvictedBy != "" || rec.Session != m.session):
			// Evicted (or removed): this session never acts again.
			m.abandon()
			key = m.key(memberKey(cfg.OwnerID, m.session))
		case err != nil:
			m.setErr(err)
			return false
		default:
			m.needRead = false
			m.myVersion = v
			if rec.Nonce == m.pendingNonce && m.now().Sub(m.pendingStart) < cfg.renewDeadline() {
				m.renewStart = m.pendingStart
			}
		}
	}
	m.counter++
	applied := m.applied
	rec := MemberRecord{
		OwnerID: cfg.OwnerID, Session: m.session, LastUpdated: cfg.Clock.Wall(),
		LeaseMillis: cfg.LeaseDuration.Milliseconds(), Nonce: rand.Text(), Counter: m.counter,
		Applied: applied,
	}
	data := rec.encode()
	cond := store.IfAbsent()
	if m.myVersion != "" {
		cond = store.IfMatch(m.myVersion)
	}
	start := m.now()
	m.nextRenew = start.Add(m.regularPause())
	wctx, cancel := context.WithTimeout(ctx, cfg.renewDeadline())
	defer cancel()
	v, err := store.PutResolved(wctx, cfg.Store, key, data, cond, store.ResolveOptions{
		Attempts: 3, MaxSize: maxRecordSize,
		Backoff: func(n int) time.Duration {
			return store.Jitter([]time.Duration{0, cfg.RenewPeriod / 50, cfg.RenewPeriod / 5}[min(n, 2)], 0.2)
		},
	})
	if err == nil {
		m.myVersion, m.renewStart = v, start
		m.published = max(m.published, applied)
		return true
	}
	m.setErr(err)
	if ctx.Err() != nil {
		// The stop cut the renewal short: no failure to warn about.
		m.c.log.Debug("a renewal cut short by the stop", "err", err)
	} else {
		m.c.log.Warn("renewing our member record failed", "err", err)
	}
	m.needRead, m.retrySoon = true, true
	m.nextRenew = time.Time{}
	m.pendingNonce, m.pendingStart = rec.Nonce, start
	return false
}

// abandon ends this session after it was evicted: every shard stops, and
// the member joins again under a new session, which others treat as a
// restart (its shards come back with new terms).
func (m *memberMode) abandon() {
	m.c.log.Warn("this member was judged dead and evicted; joining again with a new session", "session", m.session)
	m.mu.Lock()
	for _, r := range m.runs {
		m.stopRunLocked(r)
	}
	m.session = rand.Text()[:16]
	m.mu.Unlock()
	m.myVersion, m.renewStart, m.needRead = "", time.Time{}, false
	m.applied, m.published, m.reconciledEpoch = 0, 0, 0
	m.assignGen++
	m.mu.Lock()
	clear(m.ended)
	m.mu.Unlock()
	clear(m.bumps)
	clear(m.firstSeen)
}

// observe updates the member views from a listing, and reads the
// assignment if its version changed.
func (m *memberMode) observe(ctx context.Context, items []store.Item, start, end time.Time) {
	cfg := m.c.cfg
	seen := map[string]bool{}
	assignVer := ""
	for _, it := range items {
		rel := strings.TrimPrefix(it.Key, cfg.Prefix)
		if rel == assignmentKey {
			assignVer = it.Version
			continue
		}
		owner, session, ok := parseMemberKey(rel)
		if !ok {
			continue
		}
		seen[rel] = true
		v := m.views[rel]
		fetched := false
		if v == nil || v.version != it.Version {
			// A record we did not know, or one that was dead and changed,
			// may be a tombstone: read it.
			check := v == nil || m.dead(v)
			if v == nil {
				v = &memberView{owner: owner, session: session}
				m.views[rel] = v
				m.lastChange = end
			}
			v.version, v.since = it.Version, end
			if check && session != m.session {
				m.fetch(ctx, rel, v)
				fetched = true
			}
		}
		if !v.leaseKnown && !fetched && session != m.session {
			// The last read failed: the holder's lease is still unknown.
			m.fetch(ctx, rel, v)
		}
		v.at = end
	}
	for rel := range m.views {
		if !seen[rel] {
			delete(m.views, rel)
			m.lastChange = end
		}
	}
	m.markEvicted()
	switch {
	case assignVer == "":
		if m.assignVer != "" || m.assignBad {
			m.setAssign(emptyTable(), "", false, false)
		}
		m.confirmStart = start
	case assignVer == m.assignVer:
		m.confirmStart = start
	default:
		getStart := m.now()
		data, v, err := m.get(ctx, m.key(assignmentKey))
		getEnd := m.now()
		switch {
		case errors.Is(err, store.ErrNotFound):
			m.setAssign(emptyTable(), "", false, false)
			m.confirmStart = getStart
		case err != nil:
			m.setErr(err)
			m.retrySoon = true
			return
		default:
			// The assignment read replaces ours whatever it holds: let
			// ours go first, so that two of them are never held at once.
			m.setAssign(emptyTable(), m.assignVer, m.assignFound, true)
			a, derr := decodeTable(data)
			if derr != nil {
				derr = fmt.Errorf("%s: %w", m.key(assignmentKey), derr)
				switch {
				case m.assignBad && m.assignVer == v:
				case errors.Is(derr, ErrForeignRecord):
					m.c.log.Error("the object where the assignment record belongs is another kind of record; acting on no shard and never writing it: give the coordinators a Prefix of their own", "version", v, "err", derr)
				default:
					m.c.log.Error("the assignment record is corrupt; acting on no shard until it is repaired", "version", v, "err", derr)
				}
				m.setErr(derr)
				m.setAssign(emptyTable(), v, true, true)
				return
			}
			m.setAssign(a, v, true, false)
			m.confirmStart = getStart
			m.noteAssigned(getEnd)
			m.markEvicted()
		}
	}
}

// setAssign replaces the assignment this member acts on.
func (m *memberMode) setAssign(t *table, version string, found, bad bool) {
	m.assign, m.assignVer, m.assignFound, m.assignBad = t, version, found, bad
	m.assignGen++
	m.lastChange = m.now()
}

// fetch reads a member record into its view.
func (m *memberMode) fetch(ctx context.Context, rel string, v *memberView) bool {
	gctx, cancel := context.WithTimeout(ctx, m.callTimeout())
	data, ver, err := m.c.cfg.Store.GetLimited(gctx, m.key(rel), maxRecordSize)
	cancel()
	if errors.Is(err, store.ErrTooLarge) {
		// Not a record a member wrote; it is judged with our own lease.
		m.setErr(err)
		v.learn(MemberRecord{}, false)
		return false
	}
	if err != nil {
		return false
	}
	rec, err := DecodeMemberRecord(data)
	v.foreign = errors.Is(err, ErrForeignRecord)
	if err != nil {
		err = fmt.Errorf("%s: %w", m.key(rel), err)
		if v.foreign && ver != v.reported {
			v.reported = ver
			m.c.log.Error("an object among the member records is another kind of record; it is never counted as a member nor written over", "err", err)
		}
		m.setErr(err)
		v.learn(rec, false)
		return false
	}
	v.rec, v.recVersion = rec, ver
	v.learn(rec, true)
	v.evicted = rec.EvictedBy != ""
	return true
}

// nextDeath is the earliest moment a member that keeps its current record
// version would be judged dead.
func (m *memberMode) nextDeath() time.Time {
	var next time.Time
	for _, v := range m.views {
		if v.evicted || v.session == m.session {
			continue
		}
		if !v.leaseKnown {
			continue
		}
		if t := v.since.Add(m.leaseOf(v)); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// evictDead replaces the record of every member judged dead by a
// tombstone, by compare-and-swap on the version seen unchanged for a
// lease. The swap and the member's own renewal are on the same key, so
// exactly one wins: if the member renewed meanwhile, it is alive; if the
// tombstone landed, the member's next renewal fails and it never acts
// again under that session. Only evicted members' shards move without
// waiting for a release.
func (m *memberMode) evictDead(ctx context.Context) {
	cfg := m.c.cfg
	for rel, v := range m.views {
		if v.evicted && !v.foreign && v.at.Sub(v.since) >= 2*m.leaseOf(v) {
			// A tombstone everyone has had time to see: its session is
			// dead for good, so an unconditional delete is safe.
			dctx, cancel := context.WithTimeout(ctx, m.callTimeout())
			if err := cfg.Store.Delete(dctx, m.key(rel), store.Cond{}); err == nil {
				delete(m.views, rel)
			}
			cancel()
			continue
		}
		if v.evicted || v.foreign || v.session == m.session || !m.dead(v) {
			continue
		}
		// The tombstone keeps the holder's lease, so that members that
		// first see it wait as long before deleting it.
		tomb := MemberRecord{OwnerID: v.owner, Session: v.session, LastUpdated: cfg.Clock.Wall(),
			LeaseMillis: m.leaseOf(v).Milliseconds(), Nonce: rand.Text(), EvictedBy: cfg.OwnerID}
		data := tomb.encode()
		wctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		ver, err := store.PutResolved(wctx, cfg.Store, m.key(rel), data, store.IfMatch(v.version), store.ResolveOptions{Attempts: 2, MaxSize: maxRecordSize})
		cancel()
		switch {
		case err == nil:
			m.c.log.Info("evicted a dead member", "member", v.owner, "session", v.session)
			v.version, v.rec, v.recVersion, v.evicted = ver, tomb, ver, true
			m.lastChange = m.now()
		case errors.Is(err, store.ErrPreconditionFailed):
			// It renewed (or someone else evicted it): look again.
			v.since = m.now()
			m.fetch(ctx, rel, v)
		default:
			m.setErr(err)
		}
	}
}

// noteAssigned records when we first saw each shard assigned to us at its
// term: a handoff from a live member waits a lease from then at most. Only
// shards that wait for a handoff need it.
func (m *memberMode) noteAssigned(at time.Time) {
	// A new map each time: maps do not shrink, and most handoffs end
	// before the next change.
	seen := map[string]seenAt{}
	for i, id := range m.assign.ids {
		if e := m.assign.at(i); len(e.Waits) > 0 && e.Owner == m.c.cfg.OwnerID && e.Session == m.session {
			if s, ok := m.firstSeen[id]; ok && s.term == e.Term {
				seen[id] = s
			} else {
				seen[id] = seenAt{term: e.Term, at: at}
			}
		}
	}
	m.firstSeen = seen
}

// live returns the members that have not been evicted or left, owner ->
// session. Where an owner has
// several live sessions (two processes with one OwnerID), the session the
// assignment already names wins, else the one seen first; if that is not
// us, we are the duplicate and stay out.
func (m *memberMode) live() map[string]string {
	if m.incumbent == nil || m.incGen != m.assignGen {
		m.incumbent, m.incGen = map[string]string{}, m.assignGen
		for _, te := range m.assign.ents {
			if n := m.assign.names[te.name]; n.Owner != "" {
				m.incumbent[n.Owner] = n.Session
			}
		}
	}
	incumbent := m.incumbent
	type cand struct {
		session string
		since   time.Time
	}
	best := map[string]cand{}
	dup := false
	for _, v := range m.views {
		// A member judged dead but not evicted still counts: its shards
		// move only with a wait until the eviction lands. Another kind of
		// record is no member at all.
		if v.evicted || v.foreign {
			continue
		}
		if b, ok := best[v.owner]; ok {
			if v.owner == m.c.cfg.OwnerID {
				dup = true
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
	out := make(map[string]string, len(best))
	for o, c := range best {
		out[o] = c.session
	}
	// We count as live only while our own record is current.
	if m.myVersion == "" || m.renewStart.IsZero() {
		if out[m.c.cfg.OwnerID] == m.session {
			delete(out, m.c.cfg.OwnerID)
		}
	}
	m.mu.Lock()
	if dup && !m.duplicate && out[m.c.cfg.OwnerID] != m.session {
		m.c.log.Error("another live process uses this OwnerID; staying idle until it stops", "session", m.session)
		m.lastErr = ErrDuplicateOwner
	}
	m.duplicate = dup && out[m.c.cfg.OwnerID] != m.session
	m.mu.Unlock()
	return out
}

// rebalance writes a new assignment when membership or the shard set
// changed. Concurrent members compute the same result; one write wins.
func (m *memberMode) rebalance(ctx context.Context) {
	if m.assignBad {
		return
	}
	cfg := m.c.cfg
	live := m.live()
	if len(live) == 0 {
		return
	}
	// Record every eviction we know of in the assignment, and forget those
	// whose tombstones are gone.
	var evicted []Holder
	for _, v := range m.views {
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
	m.mu.Lock()
	adds, removes := slices.Clone(m.adds), slices.Clone(m.removes)
	key := balanceKey{assignGen: m.assignGen, pendingGen: m.pendGen, live: holdersKey(live, nil), evicted: holdersKey(nil, evicted)}
	m.mu.Unlock()
	if len(m.bumps) == 0 && key == m.balanced {
		// Nothing the result depends on changed since a round that
		// needed no change: skip computing it over every shard again.
		return
	}
	// The shards, sorted: the keys of the assignment written are these.
	shards := m.assign.ids
	if len(adds) > 0 || len(removes) > 0 {
		set := make(map[string]bool, m.assign.len()+len(adds))
		for _, id := range m.assign.ids {
			set[id] = true
		}
		for _, id := range adds {
			set[id] = true
		}
		for _, id := range removes {
			delete(set, id)
		}
		shards = sortedKeys(set)
	}
	// The next assignment's entries, in the order of ids: computed only
	// if the current one needs a change, over the compact form, without a
	// map of every shard.
	var ents []Entry
	ids, changed := shards, false
	if !m.assign.balanced(live, shards) {
		ents, changed = balanceEntries(m.assign.get, m.assign.len(), live, shards)
	}
	// change makes ents a new version of the assignment, if it is not one
	// already. Unchanged, the shards are the current ones.
	change := func() {
		if !changed {
			ids, ents = m.assign.ids, make([]Entry, m.assign.len())
			for i := range ents {
				ents[i] = m.assign.at(i)
			}
			changed = true
		}
	}
	if !slices.Equal(evicted, m.assign.hdr.Evicted) {
		change()
	}
	m.mu.Lock()
	ended := maps.Clone(m.ended)
	m.mu.Unlock()
	for id := range m.bumps {
		var e Entry
		var ok bool
		if changed {
			var i int
			if i, ok = slices.BinarySearch(ids, id); ok {
				e = ents[i]
			}
		} else {
			e, ok = m.assign.get(id)
		}
		if !ok || e.Owner != cfg.OwnerID || e.Session != m.session || e.Term != ended[id] {
			delete(m.bumps, id)
			continue
		}
		change()
		i, _ := slices.BinarySearch(ids, id)
		ents[i].Term++
	}
	if !changed {
		m.clearPending(adds, removes)
		m.balanced = key
		return
	}
	// Only a member that is itself live and current writes.
	if live[cfg.OwnerID] != m.session {
		return
	}
	b := newTableBuilder(ids)
	for i, id := range ids {
		b.add(id, ents[i])
	}
	ents = nil
	next := b.t
	next.hdr = Assignment{Epoch: m.assign.hdr.Epoch + 1, Evicted: evicted,
		UpdatedBy: cfg.OwnerID, LastUpdated: cfg.Clock.Wall(), Nonce: rand.Text()}
	cond := store.IfAbsent()
	if m.assignFound {
		cond = store.IfMatch(m.assignVer)
	}
	start := m.now()
	wctx, cancel := context.WithTimeout(ctx, cfg.renewDeadline())
	v, err := store.PutResolved(wctx, cfg.Store, m.key(assignmentKey), next.encode(), cond, store.ResolveOptions{Attempts: 3, MaxSize: maxRecordSize})
	cancel()
	end := m.now()
	switch {
	case err == nil:
		m.setAssign(next, v, true, false)
		m.confirmStart = start
		m.noteAssigned(end)
		m.clearPending(adds, removes)
		clear(m.bumps)
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
// RenewDeadline after the later of the two confirmations' starts... the
// earlier one, as both must hold.
func (m *memberMode) rightsDeadline() time.Time {
	if m.renewStart.IsZero() || m.confirmStart.IsZero() || m.assignBad {
		return time.Time{}
	}
	first := m.renewStart
	if m.confirmStart.Before(first) {
		first = m.confirmStart
	}
	return first.Add(m.c.cfg.renewDeadline())
}

// reconcile starts and stops shard work to match the assignment and our
// rights, and publishes the result. Its work over every shard is done only
// when the assignment changed or runs stopped; otherwise it looks at the
// shards still waiting to start.
func (m *memberMode) reconcile(ctx context.Context) {
	cfg := m.c.cfg
	now := m.now()
	deadline := m.rightsDeadline()
	live := m.live()
	rescan := m.reconciledGen != m.assignGen
	m.reconciledGen = m.assignGen
	m.mu.Lock()
	valid := !m.duplicate && now.Before(deadline)
	// Publish the deadline before any run starts, so that IsLeader and
	// Held are true as soon as OnStartedLeading runs.
	moved := m.deadline != deadline
	m.deadline = deadline
	stopped := 0
	if rescan || !valid {
		for id, r := range m.runs {
			e, ok := m.assign.get(id)
			mine := ok && e.Owner == cfg.OwnerID && e.Session == m.session && e.Term == r.term
			if !mine || !valid {
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
			if e, ok := m.assign.get(id); ok && e.Term > t {
				delete(m.ended, id)
			}
		}
		if len(m.ended) == 0 {
			m.ended = map[string]uint64{}
		}
	}
	// Every shard of ours is either running or pending, unless runs
	// stopped (the deadline passed) since pending was computed.
	if rescan || len(m.runs)+len(m.pending) != m.mine {
		m.pending, m.mine = m.pending[:0], 0
		for i, id := range m.assign.ids {
			if m.assign.isOwner(i, cfg.OwnerID, m.session) {
				m.mine++
				if m.runs[id] == nil {
					m.pending = append(m.pending, id)
				}
			}
		}
	}
	m.mu.Unlock()
	m.reconciledEpoch = m.assign.hdr.Epoch
	m.valid = valid

	started := 0
	if valid && len(m.pending) > 0 {
		var ready []string
		keep := m.pending[:0]
		handoffs := map[[2]string]*handoff{}
		m.mu.Lock()
		ended := maps.Clone(m.ended)
		m.mu.Unlock()
		for _, id := range m.pending {
			e, _ := m.assign.get(id)
			switch {
			case ended[id] == e.Term:
				// A term that ended (our rights lapsed) is never
				// resumed: the next rebalance moves the shard to a new
				// term.
				m.bumps[id] = true
				keep = append(keep, id)
			case !m.handoffDone(ctx, id, e, live, now, handoffs):
				keep = append(keep, id)
			default:
				ready = append(ready, id)
			}
		}
		requeued := len(keep)
		m.mu.Lock()
		// The checks above may have made store calls: the rights may
		// have lapsed meanwhile.
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
			e, _ := m.assign.get(id)
			m.startRunLocked(id, e.Term, deadline)
			started++
		}
		m.mu.Unlock()
		m.pending = keep
		if len(keep) > requeued {
			sort.Strings(m.pending)
		}
	}
	m.updateApplied()

	members := make([]string, 0, len(live))
	for o := range live {
		members = append(members, o)
	}
	sort.Strings(members)
	m.mu.Lock()
	if rescan || m.pubGen != m.pendGen {
		shards := m.assign.ids
		if len(m.adds) > 0 {
			shards = append(slices.Clone(m.assign.ids), m.adds...)
			sort.Strings(shards)
			shards = slices.Compact(shards)
		}
		m.pubShards, m.pubGen = shards, m.pendGen
	}
	m.members, m.epoch = members, m.assign.hdr.Epoch
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
		m.c.log.Info("shards changed", "epoch", m.assign.hdr.Epoch, "started", started, "stopped", stopped, "held", held, "waiting", len(m.pending))
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
		m.fenceTimer = cfg.Clock.AfterFunc(deadline.Sub(m.now()), m.fenceAll)
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// handoff is what one reconcile learned of an earlier owner's record.
type handoff struct {
	v       *memberView // nil: the member left
	read    bool        // its current record was read
	applied bool        // it states it applied our assignment
}

// handoffDone reports whether every earlier owner that may still act on
// the shard has stopped: its record states it applied the assignment that
// gives us the shard (or, as earlier versions wrote, released the shard),
// or it is no longer live, or its own lease (the larger of ours and the
// one its record states) has passed since we first saw the shard assigned
// to us: it saw the assignment that moved the shard before that, so its
// rights, confirmed no later than that, have lapsed. Each earlier owner's
// record is read at most once per call of reconcile (cache).
func (m *memberMode) handoffDone(ctx context.Context, id string, e Entry, live map[string]string, now time.Time, cache map[[2]string]*handoff) bool {
	first, seen := m.firstSeen[id]
	seen = seen && first.term == e.Term
	for _, h := range e.Waits {
		if h.Session == m.session || live[h.Owner] != h.Session {
			continue
		}
		k := [2]string{h.Owner, h.Session}
		st := cache[k]
		if st == nil {
			st = &handoff{v: m.views[memberKey(h.Owner, h.Session)]}
			if st.v != nil {
				st.read = st.v.recVersion == st.v.version || m.fetch(ctx, memberKey(h.Owner, h.Session), st.v)
				st.applied = st.read && st.v.rec.Applied >= m.assign.hdr.Epoch
			}
			cache[k] = st
		}
		v := st.v
		switch {
		case v == nil: // gone: left
		case seen && v.leaseKnown && now.Sub(first.at) >= m.leaseOf(v):
		case st.applied:
		case st.read && released(v.rec, id, h.Term):
		default:
			return false
		}
	}
	return true
}

// released reports whether rec, as earlier versions wrote it, releases
// shard at term.
func released(rec MemberRecord, shard string, term uint64) bool {
	t, ok := rec.Released[shard]
	return ok && t >= term
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
	if m.myVersion == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.renewDeadline())
	defer cancel()
	// Unconditional: the key is this session's alone, and whatever is
	// there (our record, or a tombstone evicting this session) may go now
	// that no shard runs. A conditional delete would add nothing, and
	// some stores refuse them (store.ErrUnsupported).
	if err := m.c.cfg.Store.Delete(ctx, m.key(memberKey(m.c.cfg.OwnerID, m.session)), store.Cond{}); err != nil {
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
