package rsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// followReq is a Follow registration handed to the loop.
type followReq struct {
	f     followerInfo
	inc   string           // the follower process's incarnation, "" from an older version
	packs bool             // its version reads a packed log; false from an older one
	reply chan followReply // buffered 1
}

type followReply struct {
	confirmed uint64
	err       error
}

// probeResult says whether the follower registered under a Follow's ID,
// at another address with another incarnation, still answers.
type probeResult struct {
	fr    followReq
	addr  string
	inc   string
	alive bool
}

// memberResult is a membership write's result.
type memberResult struct {
	fr      followReq
	drop    string // the follower dropped, for a drop (fr is then empty)
	ls      leaderState
	version string
	err     error
}

// syncResult is one Synchronize call's result.
type syncResult struct {
	id      string
	gen     uint64
	resp    *rsmpb.SynchronizeResponse
	err     error
	tooFar  bool
	readErr bool // the log could not be read; nothing was sent
}

// addFollower registers a follower with the loop: a membership change,
// written to leader_state.json by compare-and-swap, then synchronization.
// It returns the confirmed index.
func (l *leaderRun) addFollower(ctx context.Context, f followerInfo, inc string, packs bool) (uint64, error) {
	fr := followReq{f: f, inc: inc, packs: packs, reply: make(chan followReply, 1)}
	select {
	case l.follows <- fr:
	case <-l.ctx.Done():
		return 0, context.Cause(l.ctx)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case r := <-fr.reply:
		return r.confirmed, r.err
	case <-l.ctx.Done():
		return 0, context.Cause(l.ctx)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// membership is the leader state with f registered, and whether that
// changes what leader_state.json holds.
func membership(ls leaderState, f followerInfo, confirmed uint64) (leaderState, bool) {
	i := slices.IndexFunc(ls.Followers, func(x followerInfo) bool { return x.ID == f.ID })
	if i >= 0 && ls.Followers[i].Addr == f.Addr {
		return ls, false
	}
	next := ls
	next.Followers = slices.DeleteFunc(slices.Clone(ls.Followers), func(x followerInfo) bool { return x.ID == f.ID })
	next.Followers = append(next.Followers, f)
	next.CommitIndex = max(confirmed, ls.CommitIndex)
	return next, true
}

// rival is the follower registered under fr's ID that fr would replace
// although it may be another live process with that ID: its incarnation
// differs and it listens elsewhere (a restart on the same address is the
// same node: only one process holds an address). Nil if there is none.
func (l *leaderRun) rival(fr followReq) *follower {
	old := l.w.followers[fr.f.ID]
	if old == nil || old.inc == "" || fr.inc == "" || old.inc == fr.inc || old.info.Addr == fr.f.Addr {
		return nil
	}
	return old
}

// member starts the membership change of fr, or registers it at once if
// leader_state.json already lists it. A Follow that would replace a
// follower that may be another live process with the same ID waits for a
// heartbeat to it: if it answers, the Follow is refused (probed); if not
// (a restart elsewhere, or the other stopped), it replaces it.
func (l *leaderRun) member(fr followReq) {
	if old := l.rival(fr); old != nil {
		l.writingLS = true // one membership change at a time
		addr, inc := old.info.Addr, old.inc
		req := &rsmpb.SynchronizeRequest{Group: l.n.group, Term: l.term, LeaderId: l.n.host.cfg.ID, CommitIndex: l.w.confirmed}
		for _, m := range l.ls.Followers {
			req.Followers = append(req.Followers, &rsmpb.FollowerInfo{Id: m.ID, Addr: m.Addr, ApplyIndex: m.ApplyIndex})
		}
		l.goWork(func() {
			resp, err := l.call(addr, req)
			l.report(probeResult{fr: fr, addr: addr, inc: inc, alive: err == nil && resp.Status == rsmpb.Status_OK})
		})
		return
	}
	l.memberNow(fr)
}

// probed takes the answer of a follower a Follow would replace: alive, the
// Follow comes from a second process with its ID and is refused, so the
// membership does not flip between the two.
func (l *leaderRun) probed(r probeResult) {
	l.writingLS = false
	if !r.alive {
		l.memberNow(r.fr)
		return
	}
	dup := &DuplicateIDError{ID: r.fr.f.ID, Incarnation: r.inc, Addr: r.addr, Term: l.term, Follower: true}
	if l.dupLogged[r.fr.f.ID] != r.fr.inc {
		l.dupLogged[r.fr.f.ID] = r.fr.inc
		l.n.log.Error("two processes follow under one node ID; refusing the second while the first answers (node IDs must be unique: stop one of them)",
			"follower", r.fr.f.ID, "addr", r.addr, "refused_addr", r.fr.f.Addr)
	}
	r.fr.reply <- followReply{err: dup}
}

// memberNow is member without the check for another live process.
func (l *leaderRun) memberNow(fr followReq) {
	next, changed := membership(l.ls, fr.f, l.w.confirmed)
	if !changed {
		l.registered(fr)
		return
	}
	l.writingLS = true
	prev := l.lsVersion
	l.goWork(func() {
		v, err := l.writeMembers(next, prev)
		l.report(memberResult{fr: fr, ls: next, version: v, err: err})
	})
}

// writeMembers writes leader_state.json by compare-and-swap over prev. A
// worker.
func (l *leaderRun) writeMembers(next leaderState, prev string) (string, error) {
	n := l.n
	for attempt := 0; ; attempt++ {
		start := time.Now()
		v, err := n.gs.writeLeaderState(l.ctx, next, prev)
		n.m.leaderUpdate.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
		if err == nil {
			return v, nil
		}
		if errors.Is(err, store.ErrPreconditionFailed) && !store.IsAmbiguous(err) {
			// Someone else wrote leader_state.json: a new term, unless it
			// was an earlier write of ours that resolved.
			if cerr := l.confirmOnce(); cerr != nil {
				return "", cerr
			}
			_, v, rerr := n.gs.readLeaderState(l.ctx)
			if rerr != nil {
				return "", rerr
			}
			prev = v
		} else if attempt >= n.opts.Retry.MaxAttempts || l.ctx.Err() != nil {
			return "", err
		}
	}
}

// membered takes a membership write's result.
func (l *leaderRun) membered(r memberResult) {
	l.writingLS = false
	if r.drop != "" {
		l.dropped(r)
		return
	}
	if r.err != nil {
		if errors.Is(r.err, errDeposed) {
			l.depose(r.err)
		}
		r.fr.reply <- followReply{err: r.err}
		return
	}
	r.ls.Counter++
	l.ls, l.lsVersion = r.ls, r.version
	l.registered(r.fr)
}

// registered starts synchronizing a follower and answers its Follow.
func (l *leaderRun) registered(fr followReq) {
	if l.w.register(fr.f) {
		l.n.m.synchronizers.WithLabelValues(l.n.group).Inc()
	}
	l.w.followers[fr.f.ID].inc = fr.inc
	l.w.readsPacks[fr.f.ID] = fr.packs
	l.w.heard(fr.f.ID, time.Now())
	l.publish()
	fr.reply <- followReply{confirmed: l.w.confirmed}
}

// syncFollowers starts a send to every follower that is due one
// (window.syncPlan).
func (l *leaderRun) syncFollowers() {
	n, w := l.n, l.w
	now := time.Now()
	var members []*rsmpb.FollowerInfo
	for _, f := range w.followers {
		j := w.syncPlan(f, now, n.opts.HeartbeatInterval, n.opts.MaxPendingBatches, n.opts.MaxMessageSize-4096)
		if j == nil {
			continue
		}
		if members == nil {
			for _, m := range l.ls.Followers {
				ai := m.ApplyIndex
				if s := w.followers[m.ID]; s != nil {
					ai = s.applied
				}
				var meta map[string]string
				if s := w.followers[m.ID]; s != nil {
					meta = s.info.Meta
				}
				members = append(members, &rsmpb.FollowerInfo{Id: m.ID, Addr: m.Addr, ApplyIndex: ai, Meta: meta})
			}
		}
		req := &rsmpb.SynchronizeRequest{Group: n.group, Term: l.term, LeaderId: n.host.cfg.ID, CommitIndex: j.confirmed,
			Followers: members, Entries: j.entries, TooFarBehind: j.tooFar, LeaderMeta: n.metaNow()}
		addr := f.info.Addr
		l.goWork(func() { l.report(l.send(j, addr, req)) })
	}
}

// send completes req with the entries the cache missed, read from the
// store under rule 8, and sends it. A worker.
func (l *leaderRun) send(j *syncJob, addr string, req *rsmpb.SynchronizeRequest) syncResult {
	n := l.n
	res := syncResult{id: j.id, gen: j.gen, tooFar: j.tooFar}
	if j.fetchFrom > 0 {
		n.m.logCacheMiss.WithLabelValues(n.group).Inc()
		entries, tooFar, err := l.fetch(j.fetchFrom, j.fetchTo, n.opts.MaxMessageSize-4096-entriesSize(req.Entries))
		if err != nil {
			n.log.Warn("synchronizer cannot read the log", "follower", j.id, "err", err)
			res.readErr, res.err = true, err
			return res
		}
		if tooFar {
			req.TooFarBehind, res.tooFar = true, true
		} else {
			req.Entries = append(req.Entries, entries...)
		}
	}
	resp, err := l.call(addr, req)
	res.resp, res.err = resp, err
	return res
}

func entriesSize(es []*rsmpb.Entry) int {
	s := 0
	for _, e := range es {
		s += proto.Size(e)
	}
	return s
}

// fetch reads confirmed entries from..to that the cache no longer holds,
// within budget bytes, under rule 8 (Node.readLog): if a snapshot reached
// them, or they are gone, the follower is told to catch up from the
// store. It never returns an entry a snapshot read after it covers.
func (l *leaderRun) fetch(from, to uint64, budget int) (entries []*rsmpb.Entry, tooFar bool, err error) {
	c, err := l.n.readLog(l.ctx, from, to, int(to-from+1))
	if err != nil {
		return nil, false, err
	}
	if c.superseded {
		return nil, true, nil
	}
	if len(c.entries) == 0 {
		return nil, false, fmt.Errorf("confirmed entry %d is missing from the log and no snapshot covers it", from)
	}
	for _, e := range c.entries {
		size := proto.Size(e)
		if size > budget {
			if len(entries) == 0 {
				return nil, false, fmt.Errorf("entry %d of %d bytes exceeds MaxMessageSize", e.Index, size)
			}
			break
		}
		budget -= size
		entries = append(entries, e)
	}
	return entries, false, nil
}

func (l *leaderRun) call(addr string, req *rsmpb.SynchronizeRequest) (*rsmpb.SynchronizeResponse, error) {
	n := l.n
	c, err := n.host.client(l.ctx, addr, n.group)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(l.ctx, n.opts.HeartbeatInterval+n.host.cfg.ConnectTimeout)
	defer cancel()
	return c.Synchronize(cctx, req)
}

// synced takes a Synchronize result.
func (l *leaderRun) synced(r syncResult) {
	n, w := l.n, l.w
	ok := r.err == nil && r.resp.Status == rsmpb.Status_OK
	if r.err == nil && (r.resp.Status == rsmpb.Status_STALE_TERM || r.resp.Status == rsmpb.Status_NOT_LEADER) {
		// The follower knows a newer term: check ours.
		w.probe = true
	}
	var applied uint64
	if ok {
		applied = r.resp.ApplyIndex
	}
	f := w.followers[r.id]
	failures := 1
	if f != nil {
		failures = f.failures + 1
	}
	now := time.Now()
	if ok && len(r.resp.Meta) > 0 && f != nil && f.gen == r.gen {
		f.info.Meta = r.resp.Meta // the follower's, published with the next heartbeats
	}
	known, gone := w.synced(r.id, r.gen, ok, r.tooFar, applied, now.Add(n.gs.backoff(min(failures, 5))))
	if known && ok {
		w.heard(r.id, now)
	}
	if gone {
		n.m.synchronizers.WithLabelValues(n.group).Dec()
	}
	if known && ok {
		l.publish()
	}
}
