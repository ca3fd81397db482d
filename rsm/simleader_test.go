package rsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// A simulated leadership: leader.go's takeover, seal, loop, confirmation
// rounds, snapshot worker and truncation re-enacted in virtual time around
// the real window, each store call a simulated one.

// simLeader is one term of leadership: leaderRun.
type simLeader struct {
	n       *simNode
	term    uint64
	w       *window
	inbox   []func()
	wakeUp  func()
	deposed string
	ended   bool
	serving bool
	meta    map[*pending]*simCall
	cmdT    bool
	readT   bool
	lingerT bool
	// leaderRun's snapshot fields
	segNonce string
	sweep    bool
	// leaderRun's membership: the followers leader_state.json lists, a
	// write of it in flight, and the Follows waiting for it
	members   []string
	writingLS bool
	follows   []simFollow
}

// simFollow is a Follow waiting for the leader's loop: followReq.
type simFollow struct {
	f       *simNode
	applied uint64
	reply   func(followAnswer)
}

func (l *simLeader) post(ev func()) {
	if l.ended {
		return
	}
	l.inbox = append(l.inbox, ev)
	if w := l.wakeUp; w != nil {
		l.wakeUp = nil
		l.n.s.after(0, w)
	}
}

func (l *simLeader) depose(why string) {
	if l.deposed == "" {
		l.deposed = why
		l.n.s.logf("%s term %d deposed: %s", l.n.id, l.term, why)
	}
}

// takeover is leaderRun.takeover and seal.
func (l *simLeader) takeover(p *simProc) bool {
	n, s := l.n, l.n.s
	n.tentative = true
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if attempt > 20 {
				return false
			}
			p.sleep(s.between(2, 10))
			n.resetReplica()
		}
		snapEnd, snapVersion, err := n.catchUp(p)
		if err != nil {
			continue
		}
		if n.rep.maxTerm > l.term {
			return false
		}
		from := n.rep.applied + 1
		index, ok, retry := l.seal(p, from)
		if !ok {
			if retry {
				continue
			}
			return false
		}
		end, ver, _, err := n.snapshotEnd(p)
		if err != nil {
			continue
		}
		if supersedes(end, from) {
			s.cover.takeoverRetries++
			s.logf("%s term %d: snapshot at %d passed the takeover's read from %d; again", n.id, l.term, end, from)
			continue
		}
		if end > 0 {
			snapEnd, snapVersion = end, ver
		}
		v, _, err := p.get(n, "ls")
		if err != nil || v == nil || v.(simLS).term != l.term || v.(simLS).leader != n.idx {
			return false
		}
		l.w.next, l.w.confirmed = index+1, index
		l.w.snapEnd, l.w.snapVersion = snapEnd, snapVersion
		st := n.gs.snap.Stats(snapVersion)
		l.w.snapBase, l.w.snapSegs, l.w.snapSegN = st.Base, st.Segs, st.Count
		n.tentative = true
		n.flush(index)
		return true
	}
}

// seal writes the no-op of the term at the first free index from `from`.
func (l *simLeader) seal(p *simProc, from uint64) (index uint64, ok, retry bool) {
	n, s := l.n, l.n.s
	for index := from; ; index++ {
		seal := &rsmpb.Entry{Index: index, Term: l.term, Writer: n.id, Nonce: s.nonce(), Noop: true, Commit: index - 1}
		if n.rep.settings == nil {
			seal.Settings = proto.Clone(n.rep.local).(*rsmpb.Settings)
		}
		found, err := n.createEntry(p, seal, nil)
		if err != nil {
			return index, false, true
		}
		if found == nil {
			n.apply(seal)
			return index, true, false
		}
		valid, _ := n.apply(found)
		if valid && n.rep.maxTerm > l.term {
			s.cover.sealMetHigher++
			s.logf("%s term %d met term %d at %d before its seal", n.id, l.term, n.rep.maxTerm, index)
			return index, false, false
		}
	}
}

// tick is the idle ticker, the drop of a follower no longer reached
// (leaderRun.dropUnreachable) and the heartbeats to the registered
// followers (leaderRun.syncFollowers), with the confirmed entries the
// cache holds, the membership with each follower's apply index, and
// TooFarBehind for one whose next entry the cache no longer holds.
func (l *simLeader) tick() {
	s := l.n.s
	s.after(simHeartbeat, func() {
		if l.ended || s.stopped {
			return
		}
		l.post(func() {
			l.w.idleTick()
			l.dropUnreachable()
			var es []*rsmpb.Entry
			for i := l.w.cacheLow; i <= l.w.confirmed && i > 0; i++ {
				if e := l.w.cache[i]; e != nil {
					es = append(es, e)
				}
			}
			var members []*rsmpb.FollowerInfo
			for _, id := range l.members {
				m := &rsmpb.FollowerInfo{Id: id}
				if f := l.w.followers[id]; f != nil {
					m.ApplyIndex = f.applied
				}
				members = append(members, m)
			}
			for _, id := range slices.Sorted(maps.Keys(l.w.followers)) {
				wf := l.w.followers[id]
				f := l.n.s.nodeByID(id)
				req := &rsmpb.SynchronizeRequest{Term: l.term, LeaderId: l.n.id, CommitIndex: l.w.confirmed, Followers: members, Entries: es,
					TooFarBehind: wf.applied < l.w.confirmed && (l.w.cacheLow == 0 || wf.applied+1 < l.w.cacheLow)}
				term, from, gen, tooFar := l.term, l.n.idx, wf.gen, req.TooFarBehind
				s.send(from, f.idx, func() {
					f.onSync(req, from, func(applied uint64) {
						s.send(f.idx, from, func() { l.synced(id, gen, tooFar, applied, term) })
					})
				})
			}
		})
		l.tick()
	})
}

// synced takes a follower's answer to a heartbeat (leaderRun.synced).
func (l *simLeader) synced(id string, gen uint64, tooFar bool, applied, term uint64) {
	if l.ended || !l.n.alive || l.n.lead != l || l.term != term {
		return
	}
	if known, gone := l.w.synced(id, gen, true, tooFar, applied, time.Time{}); known && !gone {
		l.w.heard(id, l.n.s.clock())
	}
}

// member is leaderRun.member: a follower leader_state.json lists is
// registered at once; another is added to it by compare-and-swap first,
// one membership change at a time.
func (l *simLeader) member(fr simFollow) {
	if slices.Contains(l.members, fr.f.id) {
		l.registered(fr)
		return
	}
	if l.writingLS {
		l.follows = append(l.follows, fr)
		return
	}
	next := append(slices.Clone(l.members), fr.f.id)
	l.writeMembers(next, func(err error) {
		if err != nil {
			fr.reply(followAnswer{term: l.term, leader: l.n.id})
			return
		}
		l.registered(fr)
	})
}

// refuseFollows answers the Follows still waiting when the leadership
// ends or its takeover fails.
func (l *simLeader) refuseFollows() {
	for _, fr := range l.follows {
		fr.reply(followAnswer{term: l.term, leader: l.n.id})
	}
	l.follows = nil
}

// registered is leaderRun.registered: the follower is synchronized (its
// heartbeats) and its Follow answered.
func (l *simLeader) registered(fr simFollow) {
	l.w.register(followerInfo{ID: fr.f.id, ApplyIndex: fr.applied})
	l.w.heard(fr.f.id, l.n.s.clock())
	fr.reply(followAnswer{ok: true, term: l.term, leader: l.n.id})
}

// dropUnreachable is leaderRun.dropUnreachable: a follower not heard from
// for half the heartbeat timeout while another was (window.unreachable)
// is dropped from leader_state.json.
func (l *simLeader) dropUnreachable() {
	if l.writingLS {
		return
	}
	id := l.w.unreachable(l.n.s.clock(), simMaxMissed*simHeartbeat/2*time.Millisecond)
	if id == "" {
		return
	}
	next := slices.DeleteFunc(slices.Clone(l.members), func(m string) bool { return m == id })
	l.writeMembers(next, func(err error) {
		if err == nil {
			l.w.unregister(id)
			l.n.s.cover.drops++
			l.n.s.logf("%s term %d dropped %s", l.n.id, l.term, id)
		}
	})
}

// writeMembers is leaderRun.writeMembers in a worker: leader_state.json
// with the followers next, by compare-and-swap over what it reads (of this
// term, or the leader is deposed); then done in the loop, and the next
// Follow waiting.
func (l *simLeader) writeMembers(next []string, done func(error)) {
	n := l.n
	l.writingLS = true
	n.spawn(func(p *simProc) {
		err := errSimUnknown
		for attempt := 0; attempt < 5 && err != nil; attempt++ {
			v, ver, gerr := p.get(n, "ls")
			if gerr != nil {
				continue
			}
			if v == nil || v.(simLS).term != l.term || v.(simLS).leader != n.idx {
				err = fmt.Errorf("leader_state.json shows another term")
				break
			}
			want := v.(simLS)
			want.followers = strings.Join(next, " ")
			_, err = p.put(n, "ls", want, ver)
			if err == errSimUnknown {
				if v, _, rerr := p.get(n, "ls"); rerr == nil && v != nil && v.(simLS) == want {
					err = nil
				}
			}
		}
		l.post(func() {
			l.writingLS = false
			if err == nil {
				l.members = next
			} else if v := err.Error(); strings.Contains(v, "another term") {
				l.depose(v)
			}
			done(err)
			if len(l.follows) > 0 && !l.writingLS {
				fr := l.follows[0]
				l.follows = l.follows[1:]
				l.member(fr)
			}
		})
	})
}

func (l *simLeader) loop(p *simProc) {
	for {
		if l.deposed != "" {
			l.end()
			return
		}
		if len(l.inbox) == 0 {
			p.block(func(w func()) { l.wakeUp = w })
			continue
		}
		evs := l.inbox
		l.inbox = nil
		for _, ev := range evs {
			if l.deposed != "" {
				l.inbox = append(l.inbox, ev) // answered by end
				continue
			}
			ev()
		}
		if l.deposed == "" {
			l.progress()
		}
	}
}

func (l *simLeader) take(pd *pending) {
	read, started, full, tooLarge := l.w.take(pd, l.n.s.clock())
	s := l.n.s
	switch {
	case tooLarge:
		s.failf("%s term %d refused a command of %d bytes as too large", l.n.id, l.term, commandSize(pd))
		l.finish(pd, &rsmpb.StateResponse{Status: rsmpb.Status_TOO_LARGE})
	case read && full:
		l.readT = false
		l.answerReads(l.w.cutReads())
	case read && started:
		l.readT = true
		s.after(2, func() {
			l.post(func() {
				if l.readT {
					l.readT = false
					l.answerReads(l.w.cutReads())
				}
			})
		})
	case full:
		l.cmdT = false
		l.w.cutCommands()
	case started:
		l.cmdT = true
		s.after(2, func() {
			l.post(func() {
				if l.cmdT {
					l.cmdT = false
					l.w.cutCommands()
				}
			})
		})
	}
}

func (l *simLeader) answerReads(b []*pending) {
	if len(b) == 0 {
		return
	}
	answers := make([]*rsmpb.StateResponse, len(b))
	for i := range b {
		out, _ := l.n.mach.Query(nil)
		answers[i] = &rsmpb.StateResponse{Status: rsmpb.Status_OK, Result: out}
	}
	l.w.wait(waiter{batch: b, answers: answers})
}

func (l *simLeader) progress() {
	n, s, w := l.n, l.n.s, l.w
	cmds := len(w.cmds)
	cut, wake := w.cutIfRoom(s.clock())
	if !cut && cmds > 0 && len(w.ready) == 0 && len(w.writes) < w.depth {
		s.cover.lingered++
	}
	if !wake.IsZero() && !l.lingerT {
		// leaderRun's linger timer: progress again when it fires.
		l.lingerT = true
		s.after(max(1, wake.Sub(s.clock()).Milliseconds()), func() {
			l.post(func() { l.lingerT = false })
		})
	}
	for wr := w.nextWrite(); wr != nil; wr = w.nextWrite() {
		wr.entry.Writer, wr.entry.Nonce = n.id, s.nonce()
		e := wr.entry
		start := s.now
		n.spawn(func(p *simProc) {
			found, err := n.createEntry(p, e, func() { l.post(func() { l.w.visible(e.Index) }) })
			took := time.Duration(s.now-start) * time.Millisecond
			l.post(func() { l.wrote(e.Index, found, err, took) })
		})
	}
	if b := w.readsIfRoom(); b != nil {
		l.readT = false
		l.answerReads(b)
	}
	if r := w.startRound(); r != nil {
		id := r.id
		n.spawn(func(p *simProc) {
			var err error
			for {
				v, _, gerr := p.get(n, "ls")
				if gerr != nil {
					p.sleep(s.between(1, 5))
					continue
				}
				if v == nil || v.(simLS).term != l.term || v.(simLS).leader != n.idx {
					err = fmt.Errorf("leader_state.json shows another term")
				}
				break
			}
			l.post(func() { l.roundDone(id, err) })
		})
	}
	if w.quietBaseDue() {
		w.calm = false
		snap, err := n.rep.capture()
		if err != nil {
			s.failf("snapshot: %v", err)
			return
		}
		w.hold(snap)
		s.cover.quietBases++
	}
	if j := w.snapshotToWrite(); j != nil {
		n.spawn(func(p *simProc) { l.snapshot(p, j) })
	}
}

func (l *simLeader) wrote(index uint64, found *rsmpb.Entry, err error, took time.Duration) {
	l.w.wrote(index, found, err, took)
	for wr := l.w.settle(); wr != nil; wr = l.w.settle() {
		if !l.settled(wr) {
			return
		}
	}
}

// settled is leaderRun.settled.
func (l *simLeader) settled(wr *write) bool {
	n, s, w := l.n, l.n.s, l.w
	switch w.outcome(wr) {
	case unsettled:
		for _, pd := range wr.batch {
			l.finish(pd, &rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME})
		}
		l.depose(fmt.Sprintf("write of %d unsettled", wr.entry.Index))
		return false
	case overtaken:
		for _, pd := range wr.batch {
			l.finish(pd, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED})
		}
		l.depose(fmt.Sprintf("index %d holds term %d", wr.entry.Index, wr.found.Term))
		return false
	case skipped:
		s.cover.skipped++
		n.apply(wr.found)
		w.cacheEntry(wr.found)
		for _, pd := range wr.batch {
			l.finish(pd, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED})
		}
		return true
	}
	_, results := n.apply(wr.entry)
	if wt, now := w.waitLanded(wr, results, s.clock()); now {
		s.cover.earlyRounds++
		l.release(wt)
		l.snapshotIfDue()
	} else if wr.visible && len(w.waiting) == 0 {
		s.cover.earlyRounds++ // joined a round in flight
	}
	return true
}

func (l *simLeader) roundDone(id uint64, err error) {
	l.w.roundDone(id, err)
	rounds, rerr := l.w.released(l.n.s.clock())
	for _, r := range rounds {
		for _, wt := range r.ws {
			l.release(wt)
		}
	}
	if rerr != nil {
		l.depose(rerr.Error())
		return
	}
	if len(rounds) > 0 {
		l.snapshotIfDue()
	}
}

// snapshotIfDue is leaderRun.maybeSnapshot.
func (l *simLeader) snapshotIfDue() {
	if l.w.snapshotDue() {
		if !l.w.wantsBase() {
			l.w.holdSegment()
			return
		}
		snap, err := l.n.rep.capture()
		if err != nil {
			l.n.s.failf("snapshot: %v", err)
			return
		}
		l.w.hold(snap)
	}
}

func (l *simLeader) release(wt waiter) {
	if wt.entry == nil {
		for i, pd := range wt.batch {
			l.finish(pd, wt.answers[i])
		}
		return
	}
	l.w.confirm(wt)
	l.n.flush(l.w.confirmed)
	for i, pd := range wt.batch {
		r := wt.results[i]
		l.finish(pd, &rsmpb.StateResponse{Status: r.status, Result: r.data, Index: wt.entry.Index})
	}
}

// snapshot is leaderRun.snapshot: snapshot.Store.Write over the
// simulated store (a base in parts, or segments, then the manifest by
// compare-and-swap, then the collection of what it no longer references),
// its result, then the truncation of what it covers.
func (l *simLeader) snapshot(p *simProc, j *snapshot.Job) {
	n, s := l.n, l.n.s
	rebase := j.Base != nil && l.w.snapSegs > 0
	out, err := n.gs.snap.Write(simCtx(p), j, snapshot.Writer{ID: n.id, Term: l.term, Nonce: l.segNonce})
	st := out.Stats()
	l.post(func() {
		// On error too: a newer snapshot found is not written over again.
		l.w.snapshotWritten(out.End, out.Version, st)
		if err != nil {
			l.w.snapBusy = false
		}
	})
	if err != nil {
		l.sweep = true
		s.logf("%s term %d: snapshot to %d not written: %v", n.id, l.term, j.End, err)
		return
	}
	switch {
	case j.Base == nil:
		s.cover.segments++
	case rebase:
		s.cover.rebases++
	}
	dropped, swept, gcErr := n.gs.snap.Collect(simCtx(p), out.Prev, out.Man, l.term, l.sweep || j.Base != nil)
	l.sweep = gcErr != nil
	s.cover.dropped += dropped
	s.cover.swept += swept
	s.logf("%s term %d wrote snapshot to %d (base %v; deleted %d, swept %d)", n.id, l.term, out.End, j.Base != nil, dropped, swept)
	l.truncate(p, out.End)
	l.post(func() { l.w.snapBusy = false })
}

func (l *simLeader) truncate(p *simProc, to uint64) {
	n, s := l.n, l.n.s
	idx, err := p.listLog(n)
	if err != nil {
		return
	}
	for _, i := range idx {
		if i > to || l.ended {
			break
		}
		if n.s.chance(0.02) {
			return // interrupted: the next leader finishes it
		}
		_ = p.del(n, logKeyOf(i))
	}
	s.logf("%s term %d truncated to %d", n.id, l.term, to)
}

// end answers every outstanding request (rule 11) and checks none is left.
func (l *simLeader) end() {
	for _, a := range l.w.drain() {
		l.finish(a.p, &rsmpb.StateResponse{Status: a.status, Message: a.msg})
	}
	l.ended = true
	l.refuseFollows()
	for _, ev := range l.inbox {
		ev() // requests not taken are answered by enqueue, now ended
	}
	l.inbox = nil
	if len(l.meta) > 0 {
		l.n.s.failf("rule 11: %s ended term %d with %d requests unanswered", l.n.id, l.term, len(l.meta))
	}
}

func (l *simLeader) finish(pd *pending, r *rsmpb.StateResponse) {
	if pd.finished {
		return
	}
	pd.finished = true
	c := l.meta[pd]
	delete(l.meta, pd)
	if c == nil {
		return
	}
	if r.Status == rsmpb.Status_OK && c.cmdID != 0 {
		if _, ok := l.n.s.ackedAt[c.cmdID]; !ok {
			l.n.s.ackedAt[c.cmdID] = l.n.s.now
		}
	}
	c.answer(l.n.idx, r)
}

// enqueue is a request reaching this leader.
func (l *simLeader) enqueue(c *simCall) {
	pd := &pending{req: c.req}
	if l.ended || !l.serving || l.deposed != "" {
		c.answer(l.n.idx, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
		return
	}
	l.post(func() {
		if l.ended || l.deposed != "" {
			c.answer(l.n.idx, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_COMMITTED})
			return
		}
		l.meta[pd] = c
		l.take(pd)
	})
}
