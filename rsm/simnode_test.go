package rsm

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// A simulated node: its replica and its follower core (the real ones), and
// node.go's catch-up, snapshot loading, join loop, Follow, watch of the
// leader, signs and attempt re-enacted as a simulated process over the
// real groupStore (simstore_test.go), every decision the core's. Its
// leadership is simleader_test.go's.

// simNode is one node: its replica, its client, its leadership.
type simNode struct {
	s        *sim
	id       string
	idx      int
	observer bool // follows the store only, with a different session bound
	local    int  // its MaxDedupClients

	alive    bool
	procs    []*simProc
	rep      *replica
	gs       *groupStore
	mach     *simCounter
	storeCut bool

	specMax   uint64 // highest valid term, kept by the simulation (rule 1)
	tentative bool   // applies are recorded only once confirmed (a leader's)
	loading   bool   // a snapshot is being loaded (Node.loadSnapshot is one job of the replica's goroutine)
	buf       []simRec

	fc           *followCore // the process's follower core: every follower decision is its
	heardPending bool        // a heartbeat came since the watch last looked (Node.heard)
	watchWake    func()      // wakes the watch, blocked for a heartbeat
	hint         int         // the leader it last heard of, -1 if none
	lead         *simLeader
	client       *simClient
}

func (s *sim) newNode(idx int, observer bool) *simNode {
	n := &simNode{s: s, id: "n" + strconv.Itoa(idx), idx: idx, observer: observer, local: s.cfg.maxSessions, hint: -1}
	n.gs = n.groupStore()
	if observer {
		n.id = "obs"
		n.local = s.cfg.maxSessions + 1
	}
	return n
}

func (n *simNode) spawn(f func(p *simProc)) *simProc {
	p := n.s.spawn(f)
	n.procs = append(n.procs, p)
	return p
}

func (n *simNode) resetReplica() {
	n.mach = newSimCounter()
	rep, err := newReplica(map[string]StateMachine{simMachine: n.mach}, n.local)
	if err != nil {
		panic(err)
	}
	rep.mutation = n.s.mutate
	n.rep = rep
	n.buf = nil
	n.specMax = 0
}

func (n *simNode) record(r simRec) {
	if n.tentative {
		n.buf = append(n.buf, r)
		return
	}
	n.s.check(n.id, r)
}

// flush checks the tentative applies up to index, now confirmed.
func (n *simNode) flush(index uint64) {
	i := 0
	for ; i < len(n.buf) && n.buf[i].index <= index; i++ {
		n.s.check(n.id, n.buf[i])
	}
	n.buf = n.buf[i:]
}

// apply applies e (at applied+1) and records it.
func (n *simNode) apply(e *rsmpb.Entry) (bool, []result) {
	n.mach.applied = nil
	valid, res := n.rep.apply(e)
	// Rule 1 as docs/rsm.md states it, kept apart from the replica's.
	if want := e.Term >= n.specMax; valid != want {
		n.s.failf("rule 1: %s took entry %d of term %d as valid=%v after valid terms up to %d", n.id, e.Index, e.Term, valid, n.specMax)
	} else if want {
		n.specMax = e.Term
	}
	n.record(simRec{index: e.Index, nonce: string(e.Nonce), count: n.mach.count, ids: slices.Clone(n.mach.applied)})
	return valid, res
}

// loadSnapshot is Node.loadSnapshot: snap restored if it is ahead; a
// manifest's base only if the replica has not reached it, then its
// segments' entries after the replica's index, through apply.
func (n *simNode) loadSnapshot(p *simProc, snap *snapshot.Stored) error {
	if snap == nil || snap.EndIndex <= n.rep.applied {
		return nil
	}
	if snap.Man == nil {
		if err := n.rep.restoreStored(snap); err != nil {
			n.s.failf("%s: restore: %v", n.id, err)
			return nil
		}
		n.specMax = snap.MaxTerm
		n.record(simRec{index: snap.EndIndex, count: n.mach.count})
		return nil
	}
	// Node.loadSnapshot is one job of the replica's goroutine: nothing
	// else applies while the objects are read.
	n.loading = true
	defer func() { n.loading = false }()
	return n.gs.snap.Load(simCtx(p), snap, n.rep.applied, func(cs *snapshot.Stream) error {
		err := n.rep.restoreFrom(cs.Head, cs.Machine)
		if err == nil {
			if err = cs.Finish(); err != nil {
				err = errors.Join(err, n.rep.reset())
			}
		}
		if err != nil {
			// A part unreadable or gone: the replica is back at 0 and
			// the caller reads the snapshot again.
			n.specMax = 0
			return err
		}
		n.specMax = cs.Head.MaxTerm
		n.record(simRec{index: cs.Head.EndIndex, count: n.mach.count})
		return nil
	}, func(e *rsmpb.Entry, _ []any) error {
		n.apply(e)
		return nil
	})
}

func cloneEntry(v any) *rsmpb.Entry {
	if v == nil {
		return nil
	}
	return proto.Clone(v.(*rsmpb.Entry)).(*rsmpb.Entry)
}

func logKeyOf(i uint64) string { return "log/" + strconv.FormatUint(i, 10) }

// loadSnapshotAt is Node.loadSnapshotAt: the snapshot ending at end
// restored if it is ahead, snap if it was read whole, else read now.
func (n *simNode) loadSnapshotAt(p *simProc, end uint64, snap *snapshot.Stored) error {
	for {
		if end == 0 || end <= n.rep.applied {
			return nil
		}
		if snap == nil {
			var err error
			if snap, _, err = n.gs.snap.Read(simCtx(p)); err != nil {
				return err
			}
		}
		err := n.loadSnapshot(p, snap)
		if !errors.Is(err, snapshot.ErrMoved) {
			return err
		}
		n.s.cover.snapMoved++
		n.s.logf("%s: the snapshot changed while it was read; again", n.id)
		snap = nil
	}
}

// snapshotEnd is snapshot.Store.End over the simulated store.
func (n *simNode) snapshotEnd(p *simProc) (uint64, string, *snapshot.Stored, error) {
	return n.gs.snap.End(simCtx(p))
}

// readLog is groupStore.readLog over the simulated store: rule 8.
func (n *simNode) readLog(p *simProc, from uint64, limit int) (logChunk, error) {
	return n.gs.readLog(simCtx(p), from, 0, limit)
}

// catchUp is Node.catchUp: the snapshot, then the log in chunks under
// rule 8, up to the first hole.
func (n *simNode) catchUp(p *simProc) (snapEnd uint64, snapVersion string, err error) {
	end, version, snap, err := n.snapshotEnd(p)
	if err != nil {
		return 0, "", err
	}
	if err := n.loadSnapshotAt(p, end, snap); err != nil {
		return 0, "", err
	}
	const chunk = 4
	for {
		c, err := n.readLog(p, n.rep.applied+1, chunk)
		if err != nil {
			return 0, "", err
		}
		if c.snapEnd > end {
			end, version = c.snapEnd, c.version
		}
		if c.superseded {
			n.s.cover.catchUpSupersede++
			if err := n.loadSnapshotAt(p, c.snapEnd, c.snap); err != nil {
				return 0, "", err
			}
			continue
		}
		for _, e := range c.entries {
			if e.Index != n.rep.applied+1 {
				break
			}
			n.apply(e)
		}
		if len(c.entries) < chunk {
			return end, version, nil
		}
	}
}

// simLS is leader_state.json: its term, its leader, a nonce that tells a
// write of ours from another, and the followers registered with its
// leader (their IDs, space-separated), as leaderState.Followers.
type simLS struct {
	term      uint64
	leader    int
	nonce     uint64
	followers string
}

// state is ls as the follower core reads it.
func (ls simLS) state() leaderState {
	st := leaderState{Term: ls.term, LeaderID: "n" + strconv.Itoa(ls.leader)}
	for _, id := range strings.Fields(ls.followers) {
		st.Followers = append(st.Followers, followerInfo{ID: id})
	}
	return st
}

// createEntry is groupStore.createEntry: nil if e landed, the entry found
// in the slot otherwise; an answer lost is settled by reading the nonce
// back, and is unknown if the slot is empty.
// shown, if not nil, is told when the store shows the entry (putShown).
func (n *simNode) createEntry(p *simProc, e *rsmpb.Entry, shown func()) (*rsmpb.Entry, error) {
	_, err := p.putShown(n, logKeyOf(e.Index), proto.Clone(e), 0, shown)
	if err == nil {
		return nil, nil
	}
	if err != errSimExists && err != errSimUnknown {
		return nil, err
	}
	v, _, rerr := p.get(n, logKeyOf(e.Index))
	switch {
	case rerr != nil:
		return nil, rerr
	case v == nil && err == errSimExists:
		return nil, nil // as groupStore.createEntry: emptied since
	case v == nil:
		return nil, errSimUnknown
	}
	other := cloneEntry(v)
	if string(other.Nonce) == string(e.Nonce) {
		return nil, nil
	}
	return other, nil
}

func (s *sim) nonce() []byte {
	return binary.BigEndian.AppendUint64(nil, s.rng.Uint64()|1)
}

// The follower's timing in ticks: HeartbeatInterval (the leader's tick),
// MaxMissedHeartbeats (the core's patience) and LeadershipDelay.
const (
	simHeartbeat       = 20
	simMaxMissed       = 4
	simLeadershipDelay = 10
	simFollowTimeout   = 100 // a Follow unanswered this long failed (ConnectTimeout)
)

// run is Node.run and joinOnce: the node catches up from the store (the
// simulation's followers learn from the store what heartbeats do not
// carry), reads leader_state.json and does what its follower core decides
// (followCore.join, followed): lead, or follow the leader it names, then
// watch it, or look for signs and attempt.
func (n *simNode) run(p *simProc) {
	s := n.s
	for {
		p.sleep(s.between(5, 25))
		if _, _, err := n.catchUp(p); err != nil {
			continue
		}
		if n.observer {
			continue
		}
		v, ver, err := p.get(n, "ls")
		if err != nil {
			continue
		}
		var ls simLS
		if v != nil {
			ls = v.(simLS)
			n.fc.observe(ls.state())
		}
		step, _, dup := n.fc.join(ls.state(), v != nil)
		switch step {
		case joinDuplicate:
			s.failf("%s took a record of its own for another process's: %v", n.id, dup)
			return
		case joinCreate, joinLead:
			n.takeTerm(p, ls, ver)
			continue
		}
		err = n.follow(p, ls)
		switch n.fc.followed(ls.state(), err) {
		case followDuplicate:
			s.failf("%s refused as a duplicate: %v", n.id, err)
			return
		case followReread:
			continue
		case followWait:
			s.cover.followWaits++
			p.sleep(s.between(simHeartbeat*4/5, simHeartbeat*6/5))
			continue
		case followCheck:
			s.logf("%s cannot follow the leader of term %d: %v", n.id, ls.term, err)
			n.checkAndAttempt(p, ls.term)
			continue
		}
		s.cover.follows++
		n.hint = ls.leader
		n.watchLeader(p)
	}
}

// followAnswer is a FollowResponse: registered, or refused by a node that
// knows the leader of term.
type followAnswer struct {
	ok     bool
	down   bool // the connection was refused
	term   uint64
	leader string
}

// follow is Node.follow: Follow to the leader ls names, retried a few
// times (reading leader_state.json before each retry), over the network.
func (n *simNode) follow(p *simProc, ls simLS) error {
	s := n.s
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			p.sleep(s.between(5, simHeartbeat))
			if v, _, gerr := p.get(n, "ls"); gerr == nil && v != nil && v.(simLS).term != ls.term {
				cur := v.(simLS)
				n.fc.observe(cur.state())
				return &NotLeaderError{Leader: cur.state().LeaderID, Term: cur.term}
			}
		}
		var ans *followAnswer
		to, term, applied := s.nodes[ls.leader], ls.term, n.rep.applied
		p.block(func(wake func()) {
			s.send(n.idx, to.idx, func() {
				to.onFollow(n, term, applied, func(a followAnswer) {
					s.send(to.idx, n.idx, func() {
						if ans == nil {
							ans = &a
							wake()
						}
					})
				})
			})
			s.after(simFollowTimeout, wake)
		})
		if ans == nil {
			ans = &followAnswer{} // timed out: a later answer is dropped
			err = errSimUnknown
			continue
		}
		if ans.ok {
			return nil
		}
		if ans.down {
			err = errSimUnavailable
			continue
		}
		n.fc.observe(leaderState{Term: ans.term, LeaderID: ans.leader})
		return &NotLeaderError{Leader: ans.leader, Term: ans.term}
	}
	return err
}

// onFollow is handleFollow on node n: a leader of term registers f
// (leaderRun.member), once its takeover is done if it is still taking
// over; any other node refuses, naming the leader it knows; a node down
// refuses the connection.
func (n *simNode) onFollow(f *simNode, term, applied uint64, reply func(followAnswer)) {
	if !n.alive {
		reply(followAnswer{down: true})
		return
	}
	l := n.lead
	if l == nil || l.ended || l.deposed != "" || l.term != term {
		reply(followAnswer{term: n.fc.term, leader: n.fc.leaderID})
		return
	}
	fr := simFollow{f: f, applied: applied, reply: reply}
	if !l.serving {
		l.follows = append(l.follows, fr)
		return
	}
	l.post(func() { l.member(fr) })
}

// watchLeader is Node.watchLeader: on each heartbeat the core says keep
// watching, join again or attempt at once; after MaxMissedHeartbeats
// heartbeat intervals without one, the node looks for signs and attempts.
func (n *simNode) watchLeader(p *simProc) {
	s := n.s
	limit := int64(simMaxMissed * simHeartbeat)
	deadline := s.now + limit
	for {
		if n.heardPending {
			n.heardPending = false
			step, term := n.fc.heartbeat(true)
			switch step {
			case watchLeaving:
				n.attempt(p, term)
				return
			case watchRejoin:
				s.cover.rejoins++
				return
			}
			deadline = s.now + limit
			continue
		}
		if s.now >= deadline {
			s.logf("%s missed the heartbeats of term %d", n.id, n.fc.following)
			n.checkAndAttempt(p, n.fc.following)
			return
		}
		p.block(func(w func()) {
			n.watchWake = w
			s.after(deadline-s.now, w)
		})
		n.watchWake = nil
	}
}

// logEnd is Node.logEnd: the highest log index stored after after, 0 if
// none.
func (n *simNode) logEnd(p *simProc, after uint64) (uint64, error) {
	idx, err := p.listLog(n)
	if err != nil || len(idx) == 0 || idx[len(idx)-1] <= after {
		return 0, err
	}
	return idx[len(idx)-1], nil
}

// checkAndAttempt is Node.checkAndAttempt for the leader of term given
// up on: list the log's end, wait half the heartbeat timeout, read
// leader_state.json for signs (signed), list the log again (it grew: the
// leader still commits), else attempt.
func (n *simNode) checkAndAttempt(p *simProc, term uint64) {
	s := n.s
	from := n.fc.watchFrom(n.rep.applied)
	end, err := n.logEnd(p, from)
	if err != nil {
		return
	}
	p.sleep(simMaxMissed * simHeartbeat / 2)
	v, _, err := p.get(n, "ls")
	if err != nil || v == nil {
		return
	}
	if n.signed(v.(simLS), term) {
		return
	}
	now, err := n.logEnd(p, max(from, end))
	if err != nil {
		return
	}
	if now > end {
		s.cover.grew++
		return
	}
	n.attempt(p, term)
}

// signed is Node.signed: the core's judgement of ls for a node that gave
// up on the leader of term.
func (n *simNode) signed(ls simLS, term uint64) bool {
	switch n.fc.judge(ls.state(), term) {
	case signMoved:
		n.fc.observe(ls.state())
		return true
	case signDropped:
		n.s.cover.signDropped++
		n.s.logf("%s: the leader of term %d dropped it; not attempting", n.id, ls.term)
		return true
	case signNewer:
		n.s.cover.signNewer++
		n.s.logf("%s: term %d lists others; not attempting", n.id, ls.term)
		return true
	}
	return false
}

// attempt is Node.attempt: wait the rank's delay (the core's rank, and
// rankDelay) with jitter, read leader_state.json, look for signs once
// more and attempt over the version read.
func (n *simNode) attempt(p *simProc, term uint64) {
	s := n.s
	rank := n.fc.rank(n.rep.applied)
	if rank > 0 {
		s.cover.ranked++
	}
	d := rankDelay(rank, simLeadershipDelay*time.Millisecond) / time.Millisecond
	p.sleep(int64(d) + s.between(0, simLeadershipDelay/2))
	v, ver, err := p.get(n, "ls")
	if err != nil || v == nil {
		return
	}
	if n.signed(v.(simLS), term) {
		return
	}
	s.logf("%s attempts over term %d (rank %d)", n.id, v.(simLS).term, rank)
	n.takeTerm(p, v.(simLS), ver)
}

// takeTerm is Node.lead: leader_state.json of the next term by
// compare-and-swap over the version read (0: create the group), then the
// leadership.
func (n *simNode) takeTerm(p *simProc, prev simLS, ver int) {
	s := n.s
	term := prev.term + 1
	mine := simLS{term: term, leader: n.idx, nonce: s.rng.Uint64()}
	_, _, err := p.storeOp(n, true, func() (any, int, error) {
		o, ok := s.st.objs["ls"]
		if (ver == 0 && ok) || (ver != 0 && (!ok || o.ver != ver)) {
			return nil, 0, errSimExists
		}
		s.st.ver++
		s.st.objs["ls"] = simObject{v: mine, ver: s.st.ver}
		s.installAt[term] = s.now
		return nil, s.st.ver, nil
	})
	if err == errSimUnknown {
		if v, _, rerr := p.get(n, "ls"); rerr == nil && v != nil && v.(simLS) == mine {
			err = nil
		}
	}
	if err != nil {
		return
	}
	s.logf("%s installed term %d", n.id, term)
	n.fc.observe(mine.state())
	n.fc.led(term)
	n.leadTerm(p, term)
	n.resetReplica()
	n.tentative = false
}

func (n *simNode) leadTerm(p *simProc, term uint64) {
	s := n.s
	l := &simLeader{n: n, term: term, meta: map[*pending]*simCall{}, segNonce: hex.EncodeToString(s.nonce()), sweep: true,
		w: newWindow(term, Options{PipelineDepth: s.cfg.depth, BatchMinCount: s.cfg.minBatch, LogCacheSize: 16, SnapshotThreshold: s.cfg.snapEvery, MaxMessageSize: DefaultMaxMessageSize})}
	l.w.mutation = s.mutate
	n.lead = l
	defer func() { n.lead = nil }()
	if !l.takeover(p) {
		l.ended = true
		l.refuseFollows()
		return
	}
	l.serving = true
	s.servedAt = s.now
	if len(l.follows) > 0 {
		// Follows that came during the takeover wait for the loop.
		fr := l.follows[0]
		l.follows = l.follows[1:]
		l.post(func() { l.member(fr) })
	}
	s.logf("%s leads term %d from %d", n.id, term, l.w.confirmed)
	// Claim 2: every command acknowledged before this term was installed
	// is in the state this leader serves from.
	for id, at := range s.ackedAt {
		if at < s.installAt[term] && !n.mach.ids[id] {
			s.failf("durability: command %d acknowledged at %d is not in the state of %s, leader of term %d installed at %d", id, at, n.id, term, s.installAt[term])
		}
	}
	if l.w.snapEnd > 0 {
		end := l.w.snapEnd
		n.spawn(func(p *simProc) { l.truncate(p, end) })
	}
	l.tick()
	l.loop(p)
}

// onSync is handleSynchronize on follower f: a heartbeat of the leader of
// req.Term (the simulation's leaders are those leader_state.json named),
// refused if its term is stale or f leads; otherwise the core takes it
// (followCore.heard), the watch is woken, the entries it carries are
// applied in order, and the leader hears f's apply index back.
func (f *simNode) onSync(req *rsmpb.SynchronizeRequest, from int, ack func(applied uint64)) {
	if !f.alive || f.fc.stale(req.Term) || f.lead != nil {
		return
	}
	f.fc.heard(req)
	f.hint = from
	f.heardPending = true
	if w := f.watchWake; w != nil {
		f.watchWake = nil
		f.s.after(0, w)
	}
	if !f.loading {
		for _, e := range req.Entries {
			if e.Index == f.rep.applied+1 {
				f.apply(proto.Clone(e).(*rsmpb.Entry))
			}
		}
	}
	ack(f.rep.applied)
}
