package lease

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// A simulation of member cores in virtual time: each member's round does
// what the loop (member.go) does, against a map for a store, with no
// goroutines and no failures of the store. It records every interval in
// which a member had the right to act on a shard, and the work of its runs
// until it returned, and checks the protocol's invariants at each store
// write and at the end.

var simT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	simLease   = 15 * time.Second
	simPeriod  = 5 * time.Second
	simPrefix  = "sim/"
	simSlow    = 7 * time.Second  // how long a slow member's work takes to return
	simPause   = 30 * time.Second // how long a paused member sleeps
	simHorizon = 150 * time.Second
	simQuiet   = 40 * time.Second // the last stretch, in which nothing may change
)

// fate is what happens to a member at its fate time.
type fate int

const (
	fateLive  fate = iota // runs to the end
	fateSlow              // runs to the end; its work returns simSlow after a stop
	fateCrash             // stops dead: no more rounds, no leave
	fateLeave             // stops gracefully: its runs stop, its record goes
	fatePause             // sleeps simPause, then resumes (evicted meanwhile)
	fateBlind             // for simPause its listings fail; its renewals land
	fateLossy             // for simPause its renewals land, but it is told they failed
	numFates
)

func (f fate) String() string {
	return [...]string{"live", "slow", "crash", "leave", "pause", "blind", "lossy"}[f]
}

type simObj struct {
	data []byte
	ver  string
}

// grant is one term of one shard led by one member session.
type grant struct {
	shard, owner, session string
	term                  uint64
	start, end            time.Time // the rights: start to the deadline or the stop
	workEnd               time.Time // when the work returned; zero while it runs
	stopped               bool
}

type simRun struct {
	g        *grant
	returnAt time.Time
}

type simMember struct {
	id          string
	core        *memberCore
	fate        fate
	joinAt      time.Time
	fateAt      time.Time
	wakeAt      time.Time
	gone        bool
	resumeAt    time.Time // paused until
	faultyUntil time.Time // blind or lossy until
	adds        []string
	pendGen     uint64
	runs        map[string]*simRun
	finishing   []*simRun
	ended       map[string]uint64
	dup         bool
	deadline    time.Time
	gets        int // store reads, for the cost check
}

type sim struct {
	t       *testing.T
	name    string
	now     time.Time
	objs    map[string]simObj
	nver    int
	members []*simMember
	grants  []*grant
	// lastOwn is when each member key was last written by its own session.
	lastOwn      map[string]time.Time
	assignWrites []time.Time
	rng          *rand.Rand
	failed       bool
	steps        int
	// handoffs counts starts that waited for a live member's release;
	// evictions, the tombstones written.
	handoffs, evictions int
}

func (s *sim) errorf(format string, args ...any) {
	s.t.Helper()
	if !s.failed {
		s.t.Errorf("%s at %v: %s", s.name, s.now.Sub(simT0), fmt.Sprintf(format, args...))
	}
	s.failed = true
}

func (s *sim) list() []store.Item {
	keys := sortedKeys(s.objs)
	items := make([]store.Item, len(keys))
	for i, k := range keys {
		items[i] = store.Item{Key: k, Version: s.objs[k].ver}
	}
	return items
}

func (s *sim) get(key string) ([]byte, string, error) {
	o, ok := s.objs[key]
	if !ok {
		return nil, "", store.ErrNotFound
	}
	return o.data, o.ver, nil
}

// put writes data at key on cond; rec is the member record data encodes,
// or nil for the assignment.
func (s *sim) put(key string, rec *MemberRecord, data []byte, cond store.Cond) (string, error) {
	o, ok := s.objs[key]
	switch cond.Kind {
	case driver.IfAbsent:
		if ok {
			return "", store.ErrPreconditionFailed
		}
	case driver.IfMatch:
		if !ok || o.ver != cond.Version {
			return "", store.ErrPreconditionFailed
		}
	}
	s.check(key, o.data, ok, rec, data)
	s.nver++
	v := fmt.Sprintf("v%d", s.nver)
	s.objs[key] = simObj{data, v}
	return v, nil
}

// check verifies a write that is about to land.
func (s *sim) check(key string, old []byte, found bool, rec *MemberRecord, data []byte) {
	rel := strings.TrimPrefix(key, simPrefix)
	if rec == nil {
		s.assignWrites = append(s.assignWrites, s.now)
		prev := Assignment{}
		if found {
			prev, _ = DecodeAssignment(old)
		}
		next, err := DecodeAssignment(data)
		if err != nil {
			s.errorf("an assignment that does not decode: %v", err)
			return
		}
		s.checkMoves(prev, next)
		return
	}
	if rec.EvictedBy == "" {
		s.lastOwn[rel] = s.now
		return
	}
	// An eviction: the member's lease has passed since its last renewal,
	// and every right it had has lapsed.
	s.evictions++
	if d := s.now.Sub(s.lastOwn[rel]); d < simLease {
		s.errorf("%s evicted %v after its last renewal; its lease is %v", rel, d, simLease)
	}
	for _, g := range s.grants {
		if g.session == rec.Session && g.end.After(s.now) {
			s.errorf("%s evicted while it may act on %s (term %d) until %v", rel, g.shard, g.term, g.end.Sub(simT0))
		}
	}
}

// checkMoves verifies that a shard taken from a session without waiting
// for it is taken from a member that left or was evicted, and that terms
// grow when a shard changes hands.
func (s *sim) checkMoves(prev, next Assignment) {
	for id, e := range next.Shards {
		p, ok := prev.Shards[id]
		if !ok || p.Owner == "" || p.Session == e.Session {
			continue
		}
		if e.Term <= p.Term {
			s.errorf("shard %s moved from %s to %s at term %d after term %d", id, p.Session, e.Session, e.Term, p.Term)
		}
		if slices.ContainsFunc(e.Waits, func(h Holder) bool { return h.Session == p.Session }) {
			continue
		}
		o, found := s.objs[simPrefix+memberKey(p.Owner, p.Session)]
		if !found {
			continue // left
		}
		if rec, err := DecodeMemberRecord(o.data); err != nil || rec.EvictedBy == "" {
			s.errorf("shard %s taken from live session %s (%s) without a wait", id, p.Session, p.Owner)
		}
	}
}

func (s *sim) del(key string) { delete(s.objs, key) }

// newSim makes a group of members with fates, joining a second apart;
// with twin, a second process with the first one's OwnerID joins when the
// fates strike.
func newSim(t *testing.T, name string, seed uint64, fates []fate, twin bool, shards []string, fateAt time.Duration) *sim {
	s := &sim{t: t, name: name, now: simT0, objs: map[string]simObj{}, lastOwn: map[string]time.Time{},
		rng: rand.New(rand.NewPCG(seed, 1))}
	timing := memberTiming{lease: simLease, renewDeadline: simLease * 2 / 3, renewPeriod: simPeriod,
		jitter: func(d time.Duration) time.Duration {
			return time.Duration(float64(d) * (0.8 + 0.4*s.rng.Float64()))
		}}
	for i, f := range fates {
		id := string(rune('a' + i))
		m := &simMember{id: id, core: newMemberCore(timing, simPrefix, id, id+"-1"), fate: f,
			joinAt: simT0.Add(time.Duration(i) * time.Second), adds: slices.Clone(shards), pendGen: 1,
			runs: map[string]*simRun{}, ended: map[string]uint64{}}
		m.wakeAt, m.fateAt = m.joinAt, m.joinAt.Add(fateAt)
		if f == fateLive {
			m.fateAt = time.Time{}
		}
		s.members = append(s.members, m)
	}
	if twin {
		m := &simMember{id: "a", core: newMemberCore(timing, simPrefix, "a", "a-twin"),
			joinAt: simT0.Add(fateAt), adds: slices.Clone(shards), pendGen: 1,
			runs: map[string]*simRun{}, ended: map[string]uint64{}}
		m.wakeAt = m.joinAt
		s.members = append(s.members, m)
	}
	return s
}

// step does what is due for m at s.now.
func (s *sim) step(m *simMember) {
	m.finishing = slices.DeleteFunc(m.finishing, func(r *simRun) bool {
		if s.now.Before(r.returnAt) {
			return false
		}
		r.g.workEnd = r.returnAt
		m.wakeAt = s.now // the loop is poked when work returns
		return true
	})
	if m.gone {
		return
	}
	if !m.fateAt.IsZero() && !s.now.Before(m.fateAt) {
		m.fateAt = time.Time{}
		switch m.fate {
		case fateCrash:
			m.gone = true
			for _, r := range m.runs {
				r.g.workEnd = s.now // the process is gone, and its work with it
			}
			return
		case fateLeave:
			for _, r := range m.runs {
				s.stopRun(m, r)
			}
			if m.core.myVersion != "" {
				s.del(simPrefix + m.core.ownKey())
			}
			m.gone = true
			return
		case fatePause:
			m.resumeAt = s.now.Add(simPause)
			m.wakeAt = m.resumeAt
			return
		case fateBlind, fateLossy:
			m.faultyUntil = s.now.Add(simPause)
		}
	}
	if !m.resumeAt.IsZero() {
		if s.now.Before(m.resumeAt) {
			return
		}
		m.resumeAt = time.Time{}
		m.wakeAt = s.now
	}
	if s.now.Before(m.wakeAt) {
		return
	}
	// The fence: runs stop at the deadline even if the loop is late.
	if !s.now.Before(m.deadline) {
		for _, r := range m.runs {
			s.stopRun(m, r)
		}
	}
	s.round(m)
	m.wakeAt = s.now.Add(m.core.pause(s.now))
}

func (s *sim) stopRun(m *simMember, r *simRun) {
	delete(m.runs, r.g.shard)
	m.ended[r.g.shard] = r.g.term
	if s.now.Before(r.g.end) {
		r.g.end = s.now
	}
	r.g.stopped = true
	r.returnAt = s.now
	if m.fate == fateSlow {
		r.returnAt = s.now.Add(simSlow)
	}
	if r.returnAt.After(s.now) {
		m.finishing = append(m.finishing, r)
	} else {
		r.g.workEnd = s.now
	}
}

// round is the loop's tick for m at s.now, every store call instant.
func (s *sim) round(m *simMember) {
	c, now := m.core, s.now
	c.updateApplied(len(m.finishing) == 0)
	renewed := true
	if c.renewDue(now) {
		renewed = s.renew(m)
	}
	if m.fate == fateBlind && now.Before(m.faultyUntil) {
		c.retrySoon = true
		c.lapsed(now, renewed)
		s.reconcile(m)
		return
	}
	reads, assignVer := c.observeList(s.list(), now)
	for _, rel := range reads {
		s.fetch(m, rel)
	}
	if c.listedAssignment(assignVer, now, now) {
		m.gets++
		data, v, err := s.get(simPrefix + assignmentKey)
		if _, err := c.assignmentRead(now, now, data, v, err); err != nil {
			s.errorf("%s: reading the assignment: %v", m.id, err)
		}
	}
	for _, e := range c.evictions() {
		if e.delete {
			s.del(simPrefix + e.rel)
			c.tombDeleted(e.rel)
			continue
		}
		e.tomb.Nonce = fmt.Sprint(s.rng.Uint64())
		if v, err := s.put(simPrefix+e.rel, &e.tomb, e.tomb.encode(), store.IfMatch(e.version)); err == nil {
			c.evicted(e, v, now)
		} else {
			c.evictRefused(e, now)
			s.fetch(m, e.rel)
		}
	}
	s.rebalance(m)
	c.lapsed(now, renewed)
	s.reconcile(m)
}

func (s *sim) renew(m *simMember) bool {
	c := m.core
	if c.needRead {
		m.gets++
		data, v, err := s.get(simPrefix + c.ownKey())
		switch c.readOwn(s.now, data, v, err) {
		case ownAbandon:
			for _, r := range m.runs {
				s.stopRun(m, r)
			}
			clear(m.ended)
			c.abandon(fmt.Sprintf("%s-%d", m.id, s.rng.Uint64()))
		case ownFailed:
			return false
		}
	}
	rec, cond := c.renewal(s.now)
	rec.Nonce = fmt.Sprint(s.rng.Uint64())
	v, err := s.put(simPrefix+c.ownKey(), &rec, rec.encode(), cond)
	if err == nil && m.fate == fateLossy && s.now.Before(m.faultyUntil) {
		err = errors.New("the answer was lost")
	}
	if err != nil {
		c.renewFailed(rec, s.now)
		return false
	}
	c.renewed(rec, s.now, v)
	return true
}

func (s *sim) fetch(m *simMember, rel string) bool {
	m.gets++
	data, v, err := s.get(simPrefix + rel)
	ok, _, _ := m.core.fetched(rel, data, v, err)
	return ok
}

func (s *sim) live(m *simMember) map[string]string {
	live, dup := m.core.live()
	m.dup = dup
	return live
}

func (s *sim) rebalance(m *simMember) {
	c := m.core
	if c.assignBad {
		return
	}
	live := s.live(m)
	if len(live) == 0 {
		return
	}
	in := balanceInput{live: live, adds: m.adds, pendingGen: m.pendGen,
		ended: func() map[string]uint64 { return m.ended }}
	next, cond, inAssignment := c.rebalance(in)
	if inAssignment && len(m.adds) > 0 {
		m.adds, m.pendGen = nil, m.pendGen+1
	}
	if next == nil {
		return
	}
	next.hdr.Nonce = fmt.Sprint(s.rng.Uint64())
	if v, err := s.put(simPrefix+assignmentKey, nil, next.encode(), cond); err == nil {
		c.assignWritten(next, v, s.now, s.now)
		if len(m.adds) > 0 {
			m.adds, m.pendGen = nil, m.pendGen+1
		}
	}
}

func (s *sim) reconcile(m *simMember) {
	c, now := m.core, s.now
	deadline := c.rightsDeadline()
	live := s.live(m)
	rescan := c.beginReconcile()
	valid := !m.dup && now.Before(deadline)
	if m.deadline != deadline {
		for _, r := range m.runs {
			r.g.end = deadline
		}
	}
	m.deadline = deadline
	if rescan || !valid {
		for id, r := range m.runs {
			if !valid || !c.mineAt(id, r.g.term) {
				s.stopRun(m, r)
			}
		}
	}
	if rescan {
		for id, t := range m.ended {
			if c.superseded(id, t) {
				delete(m.ended, id)
			}
		}
	}
	c.countPending(rescan, len(m.runs), func(id string) bool { return m.runs[id] != nil })
	c.reconciled(valid)
	if valid && len(c.pending) > 0 {
		scan := c.scanHandoffs(now, live, m.ended)
		for {
			rel, done := scan.next()
			if done {
				break
			}
			scan.read(s.fetch(m, rel))
		}
		keep := scan.keep
		requeued := len(keep)
		for _, id := range scan.ready {
			if slices.ContainsFunc(m.finishing, func(r *simRun) bool { return r.g.shard == id }) {
				keep = append(keep, id)
				continue
			}
			e, _ := c.assign.get(id)
			if slices.ContainsFunc(e.Waits, func(h Holder) bool { return live[h.Owner] == h.Session }) {
				s.handoffs++
			}
			s.start(m, id, e.Term, deadline)
		}
		c.setPending(keep, requeued)
	}
	c.updateApplied(len(m.finishing) == 0)
}

// start grants m a shard, checking that no other session may still act on
// it, nor has work of it that has not returned.
func (s *sim) start(m *simMember, id string, term uint64, deadline time.Time) {
	g := &grant{shard: id, owner: m.id, session: m.core.session, term: term, start: s.now, end: deadline}
	for _, o := range s.grants {
		if o.shard != id {
			continue
		}
		if o.end.After(s.now) {
			s.errorf("%s starts %s at term %d while %s (%s) may act on it at term %d until %v",
				m.id, id, term, o.owner, o.session, o.term, o.end.Sub(simT0))
		}
		if o.term >= term {
			s.errorf("%s starts %s at term %d after term %d", m.id, id, term, o.term)
		}
		if o.workEnd.IsZero() && !s.paused(o.owner) {
			s.errorf("%s starts %s at term %d while the work of %s at term %d has not returned", m.id, id, term, o.owner, o.term)
		}
	}
	s.grants = append(s.grants, g)
	m.runs[id] = &simRun{g: g}
}

// paused reports whether owner was ever paused: its work may outlive its
// rights (it acts once, at most, before it notices).
func (s *sim) paused(owner string) bool {
	for _, m := range s.members {
		if m.id == owner {
			return m.fate == fatePause
		}
	}
	return false
}

// converged checks the end state: the members still running agree on one
// assignment that gives every shard to exactly one of them, none above its
// share, each shard led; nothing changed during the quiet stretch; and
// each of them spent one list a round and no reads. Of two processes with
// one OwnerID, the duplicate leads nothing.
func (s *sim) converged(shards []string, quietFrom map[*simMember]int) {
	var up []*simMember
	owners := map[string]bool{}
	for _, m := range s.members {
		if !m.gone {
			up = append(up, m)
			owners[m.id] = true
		}
	}
	if len(up) == 0 {
		return
	}
	if n := len(s.assignWrites); n > 0 && s.assignWrites[n-1].After(simT0.Add(simHorizon-simQuiet)) {
		s.errorf("the assignment was written at %v, during the quiet stretch", s.assignWrites[n-1].Sub(simT0))
	}
	share := (len(shards) + len(owners) - 1) / len(owners)
	held := map[string]int{}
	for _, m := range up {
		if m.core.assign.hdr.Epoch != up[0].core.assign.hdr.Epoch {
			s.errorf("%s is at epoch %d, %s at %d", m.id, m.core.assign.hdr.Epoch, up[0].id, up[0].core.assign.hdr.Epoch)
		}
		if len(m.runs) > share {
			s.errorf("%s leads %d shards; the share is %d", m.id, len(m.runs), share)
		}
		for id := range m.runs {
			held[id]++
		}
		if m.dup && len(m.runs) > 0 {
			s.errorf("%s (%s), a duplicate, leads %d shards", m.id, m.core.session, len(m.runs))
		}
		if m.gets != quietFrom[m] {
			s.errorf("%s read %d records during the quiet stretch", m.id, m.gets-quietFrom[m])
		}
	}
	for _, id := range shards {
		if held[id] != 1 {
			s.errorf("shard %s is led by %d members at the end", id, held[id])
		}
	}
}

func TestMemberCoreSimulation(t *testing.T) {
	cases, grants, handoffs, evictions, writes := 0, 0, 0, 0, 0
	for n := 1; n <= 3; n++ {
		for ns := 1; ns <= 3; ns++ {
			shards := []string{"s1", "s2", "s3"}[:ns]
			fates := make([]fate, n)
			for combo := 0; combo < pow(int(numFates), n); combo++ {
				for i, k := 0, combo; i < n; i, k = i+1, k/int(numFates) {
					fates[i] = fate(k % int(numFates))
				}
				// Fates strike while the group forms (the last joins at
				// n-1 s), in the middle of its handoffs, or once stable.
				// A second process with the first member's OwnerID joins
				// smaller groups when the fates strike.
				twins := []bool{false, true}
				if n == 3 {
					twins = twins[:1]
				}
				for _, twin := range twins {
					for _, at := range []time.Duration{1500 * time.Millisecond, 20 * time.Second} {
						if n == 3 && (combo*2+int(at/time.Second))%simEvery != 0 {
							continue
						}
						cases++
						name := fmt.Sprintf("members=%v twin=%v shards=%d fate-after=%v", fates, twin, ns, at)
						s := newSim(t, name, uint64(cases), fates, twin, shards, at)
						s.runTo(simT0.Add(simHorizon - simQuiet))
						quiet := map[*simMember]int{}
						for _, m := range s.members {
							quiet[m] = m.gets
						}
						s.runTo(simT0.Add(simHorizon))
						if !s.failed {
							s.converged(shards, quiet)
						}
						grants += len(s.grants)
						handoffs += s.handoffs
						evictions += s.evictions
						writes += len(s.assignWrites)
					}
				}
			}
		}
	}
	t.Logf("%d simulations: %d terms led, %d after a handoff from a live member, %d evictions, %d assignments written",
		cases, grants, handoffs, evictions, writes)
}

// runTo plays the simulation until at.
func (s *sim) runTo(at time.Time) {
	end := at
	for !s.failed {
		next := end
		for _, m := range s.members {
			for _, t := range []time.Time{m.wakeAt, m.fateAt} {
				if !t.IsZero() && t.Before(next) && !m.gone {
					next = t
				}
			}
			for _, r := range m.finishing {
				if r.returnAt.Before(next) {
					next = r.returnAt
				}
			}
		}
		if !next.Before(end) {
			return
		}
		if next.Before(s.now) {
			s.errorf("time went back to %v", next.Sub(simT0))
			return
		}
		if s.steps++; s.steps > 100000 {
			s.errorf("%d steps: the simulation does not advance", s.steps)
			return
		}
		s.now = next
		for _, m := range s.members {
			s.step(m)
		}
	}
}

func pow(b, e int) int {
	r := 1
	for range e {
		r *= b
	}
	return r
}
