package rsm

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// A simulated node: its replica (the real one), and node.go's catch-up,
// snapshot loading and join loop re-enacted as a simulated process over the
// real groupStore (simstore_test.go). Its leadership is simleader_test.go's.

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

	fc        *followCore // the process's follower core; its join decisions
	heardTerm uint64
	heardAt   int64
	hint      int // the leader it last heard of, -1 if none
	lead      *simLeader
	client    *simClient
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

// simLS is leader_state.json.
type simLS struct {
	term   uint64
	leader int
	nonce  uint64
}

// createEntry is groupStore.createEntry: nil if e landed, the entry found
// in the slot otherwise; an answer lost is settled by reading the nonce
// back, and is unknown if the slot is empty.
func (n *simNode) createEntry(p *simProc, e *rsmpb.Entry) (*rsmpb.Entry, error) {
	_, err := p.put(n, logKeyOf(e.Index), proto.Clone(e), 0)
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

// run is the node's life: follow (catch up from the store, listen for the
// leader's heartbeats) and take over when the leader seems gone.
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
		}
		// The join decision is the node's own (followCore.join): create
		// the group, take a new term over our own record, or follow.
		step, _, _ := n.fc.join(leaderState{Term: ls.term, LeaderID: "n" + strconv.Itoa(ls.leader)}, v != nil)
		if step == joinFollow && ls.term == n.heardTerm && s.now-n.heardAt < 80 {
			n.hint = ls.leader
			continue
		}
		if step == joinFollow && ls.term != n.heardTerm && n.heardAt == 0 {
			// Give a leader we have not heard from yet one timeout.
			n.heardTerm, n.heardAt = ls.term, s.now
			continue
		}
		term := ls.term + 1
		mine := simLS{term: term, leader: n.idx, nonce: s.rng.Uint64()}
		_, _, err = p.storeOp(n, true, func() (any, int, error) {
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
			continue
		}
		s.logf("%s installed term %d", n.id, term)
		n.leadTerm(p, term)
		n.resetReplica()
		n.tentative = false
	}
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
		return
	}
	l.serving = true
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

func (f *simNode) heartbeat(term uint64, from int, es []*rsmpb.Entry) {
	if !f.alive || term < f.heardTerm {
		return
	}
	f.heardTerm, f.heardAt, f.hint = term, f.s.now, from
	if f.lead != nil || f.loading {
		return
	}
	for _, e := range es {
		if e.Index == f.rep.applied+1 {
			f.apply(proto.Clone(e).(*rsmpb.Entry))
		}
	}
}
