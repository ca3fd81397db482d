package rsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
)

// Node is this host's member of one group. It is safe for concurrent use.
//
// Its run goroutine joins the group, follows, catches up and leads: it
// does the store reads and the calls, and followCore (fc) decides what
// comes next (followcore.go). The replica, the state machines and the
// index applied, is another goroutine's (replicaOwner, replicaowner.go):
// the run goroutine, the leader's loop, the Synchronize handler and
// Status send it what to apply or read. Its client (client.go) submits the
// node's requests under its session; RPC handlers (handlers.go) take the
// leader's heartbeats and others' requests; catch-up and snapshot loading
// are catchup.go.
type Node struct {
	host   *Host
	group  string
	opts   Options
	gs     *groupStore
	log    *slog.Logger
	m      *metrics
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// gone is closed once Leave's work is done: the node's goroutines
	// have ended, its followers were told and the host forgot it.
	gone chan struct{}

	// rep owns the replica: applies, reads, snapshots and restores
	// happen on its goroutine, strictly one at a time.
	rep *replicaOwner
	// machines are the state machines by name, to check a request's
	// machine; only rep's goroutine calls them.
	machines map[string]StateMachine
	// restoring is the snapshot rep's goroutine is loading (nil: none),
	// readable while it loads.
	restoring atomic.Pointer[Restore]

	// client is the node's client session and its stream to the leader.
	client *client
	// calls are the handlers of calls to the leader (call.go).
	calls calls
	// meta is what this node publishes to its group (SetMeta).
	meta atomic.Pointer[map[string]string]

	mu    sync.Mutex
	state State
	role  Role
	// fc is the follower side's state and decisions (followcore.go): the
	// leader and term known, heartbeats, refusals, signs and rank.
	fc        *followCore
	leader    *leaderRun
	joined    chan struct{} // closed while Joined
	heard     chan struct{} // a heartbeat from the leader
	joiningAt time.Time     // when the node last entered JOINING
	snapIndex uint64
	snapStats snapshot.Stats // the sizes of the snapshot ending at snapIndex
	left      bool
	refusal   error // why the node refused to join, if it did
	// problem is a corrupt or missing object, or another process using
	// this node's ID, that stops the node from leading or serving; refused
	// is closed while it is set.
	problem error
	refused chan struct{}

	// incarnation names this Node in the leader_state.json it writes.
	incarnation string
	// leaderMeta is what the leader publishes, from its last heartbeat.
	leaderMeta map[string]string
}

func newNode(h *Host, group string, machines map[string]StateMachine, opts Options) (*Node, error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(machines) == 0 {
		return nil, errors.New("rsm: no state machines given")
	}
	for name, m := range machines {
		if name == "" || m == nil {
			return nil, fmt.Errorf("rsm: machine %q: empty name or nil machine", name)
		}
	}
	opts = opts.withDefaults()
	rep, err := newReplica(machines, opts.MaxDedupClients)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		host: h, group: group, opts: opts, machines: machines, m: h.m, ctx: ctx, cancel: cancel,
		log: h.log.With("group", group, "node", h.cfg.ID),
		gs: newGroupStore(h.st, group, opts.Retry, opts.StoreTimeout,
			snapshot.Options{Par: 8, Borrow: borrowsAll(machines), Prep: preparers(machines), PrepareFrom: prepareFrom}),
		joined:  make(chan struct{}),
		heard:   make(chan struct{}, 1),
		refused: make(chan struct{}),
		gone:    make(chan struct{}),

		incarnation: newNonceHex(),
	}
	n.client = &client{n: n, slots: make(chan struct{}, n.opts.MaxConcurrentRequests)}
	n.fc = newFollowCore(h.cfg.ID, n.incarnation, opts.MaxMissedHeartbeats)
	rep.onRefuse = n.refuse
	n.rep = startReplica(rep)
	return n, nil
}

func (n *Node) start() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.run()
	}()
}

// Term is Status().Term, the group's term as this node knows it, without
// the rest of Status: a front end puts it in every answer.
func (n *Node) Term() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fc.term
}

// Status reports the node's view of its group.
func (n *Node) Status() Status {
	n.mu.Lock()
	s := Status{Group: n.group, ID: n.host.cfg.ID, State: n.state.String(), Role: n.role.String(), Term: n.fc.term,
		PeerAuth: n.host.mode.String(), LeaderID: n.fc.leaderID, LeaderAddr: n.fc.leaderAddr, SnapshotIndex: n.snapIndex,
		SnapshotBaseBytes: n.snapStats.Base, SnapshotSegmentBytes: n.snapStats.Segs, SnapshotSegments: n.snapStats.Count}
	l := n.leader
	var members []MemberStatus
	if l == nil && n.fc.leaderID != "" && n.fc.leaderID != s.ID {
		members = append(members, MemberStatus{ID: n.fc.leaderID, Addr: n.fc.leaderAddr, Leader: true, Meta: n.leaderMeta})
		for _, p := range n.fc.peers {
			m := MemberStatus{ID: p.ID, Addr: p.Addr, Meta: p.Meta}
			if p.ID == s.ID {
				m.Meta = n.metaNow()
			}
			members = append(members, m)
		}
	}
	n.mu.Unlock()
	if l != nil {
		s.Followers = l.followerStatus()
		members = append(members, MemberStatus{ID: s.ID, Addr: n.host.cfg.Addr, Leader: true, Meta: n.metaNow()})
		for _, f := range s.Followers {
			members = append(members, MemberStatus{ID: f.ID, Addr: f.Addr, Meta: f.Meta})
		}
	}
	s.Members = members
	n.mu.Lock()
	if n.problem != nil {
		s.Problem = n.problem.Error()
	}
	n.mu.Unlock()
	s.ApplyIndex = n.rep.index()
	return s
}

// maxMeta bounds what a node publishes (SetMeta), keys and values.
const maxMeta = 4 << 10

// SetMeta sets what this node publishes about itself to its group (the
// etcd front end's client URLs): the leader learns it from the node's
// answers to its heartbeats and lists it with the node in every
// heartbeat, so every node's Status.Members shows it, a heartbeat or two
// after it is set, and again after a leader change. It is kept in
// memory only, never written to the store. At most 4 KiB of keys and
// values; nil clears it.
func (n *Node) SetMeta(meta map[string]string) error {
	size := 0
	for k, v := range meta {
		size += len(k) + len(v)
	}
	if size > maxMeta {
		return fmt.Errorf("rsm: node meta of %d bytes, at most %d", size, maxMeta)
	}
	m := maps.Clone(meta)
	n.meta.Store(&m)
	return nil
}

// metaNow is what this node publishes (SetMeta); nil if nothing.
func (n *Node) metaNow() map[string]string {
	if m := n.meta.Load(); m != nil {
		return *m
	}
	return nil
}

// Restore is a snapshot load in progress (Node.Restoring): the stored
// sizes of what it reads.
type Restore struct {
	// Base is the base's bytes, the whole state at an index, restored
	// first; 0 when the replica is already past that index.
	Base uint64
	// Segments is the bytes of the log segments whose entries are then
	// applied, in order. An entry may overwrite or delete state, so the
	// state after the load may be anything from empty to about
	// Base+Segments in size.
	Segments uint64
}

// Size is the bytes the load reads.
func (r Restore) Size() uint64 { return r.Base + r.Segments }

// Restoring returns the snapshot this node is loading from the store, and
// the zero Restore while it loads none. Unlike Status it never waits for
// the load: a process can size its memory policy by it while the state
// grows (tenure kv serve collects less often meanwhile).
func (n *Node) Restoring() Restore {
	if r := n.restoring.Load(); r != nil {
		return *r
	}
	return Restore{}
}

func (n *Node) setState(st State, role Role) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setStateLocked(st, role)
}

func (n *Node) setStateLocked(st State, role Role) {
	if st == Joined && n.problem != nil {
		// Whatever was refused has been repaired.
		if kind, _ := problemOf(n.group, n.problem); kind != "" {
			n.m.refused.WithLabelValues(n.group, kind).Set(0)
		}
		n.log.Info("the problem that stopped this node is gone", "problem", n.problem)
		n.problem = nil
		n.refused = make(chan struct{})
	}
	if st == Joined && n.state != Joined {
		close(n.joined)
		n.m.join.WithLabelValues(n.group).Observe(time.Since(n.joiningAt).Seconds())
	}
	if st == Joining && n.state == Joined {
		n.joined = make(chan struct{})
	}
	if st == Joining && (n.state == Joined || n.joiningAt.IsZero()) {
		n.joiningAt = time.Now()
	}
	n.state, n.role = st, role
	v := 0.0
	if st == Joined {
		v = float64(role)
	}
	n.m.role.WithLabelValues(n.group).Set(v)
}

// setSnapshot records the snapshot this node loaded or wrote, ending at
// end, of the sizes st, unless it knows of one ending later.
func (n *Node) setSnapshot(end uint64, st snapshot.Stats) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if end <= n.snapIndex {
		return
	}
	n.snapIndex, n.snapStats = end, st
	n.m.snapBase.WithLabelValues(n.group).Set(float64(st.Base))
	n.m.snapSegs.WithLabelValues(n.group).Set(float64(st.Segs))
}

// observeLeader records a leader seen in the store or an RPC.
func (n *Node) observeLeader(ls leaderState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fc.observe(ls) {
		n.m.term.WithLabelValues(n.group).Set(float64(ls.Term))
	}
}

// run is the node's lifecycle: JOINING (discover, catch up, follow or lead)
// then JOINED until the leader is lost, then JOINING again.
func (n *Node) run() {
	attempt := 0
	published := false
	for n.ctx.Err() == nil {
		start := time.Now()
		n.setState(Joining, NoRole)
		var err error
		if !published {
			// Peers accept this node only once its key is in the store.
			err = n.publishKey(n.ctx)
			published = err == nil
		}
		if err == nil {
			err = n.joinOnce()
		}
		if n.ctx.Err() != nil {
			return
		}
		if time.Since(start) > n.opts.HeartbeatInterval {
			attempt = 0 // it was joined a while: start the backoff afresh
		}
		if err != nil {
			attempt++
			n.recordProblem(err)
			n.log.Info("join attempt failed", "err", err)
			if sleepCtx(n.ctx, n.gs.backoff(min(attempt, 5))) != nil {
				return
			}
		}
	}
}

// joinOnce makes one pass of the join loop and returns when the node must
// join again. What it does is followCore's decision (join, followed); it
// does the reads, the waits and the calls.
func (n *Node) joinOnce() error {
	ls, version, err := n.gs.readLeaderState(n.ctx)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if found {
		n.observeLeader(ls)
	}
	n.mu.Lock()
	step, catchUp, dup := n.fc.join(ls, found)
	n.mu.Unlock()
	switch step {
	case joinCreate:
		// The first node creates the group, unless the group has a log or
		// a snapshot: then leader_state.json was lost, and with it the
		// highest term used, so no new term can be chosen safely.
		if err := n.checkGroupEmpty(n.ctx); err != nil {
			return err
		}
		return n.lead(leaderState{}, "")
	case joinDuplicate:
		return n.refuseDuplicate(dup, ls, version)
	case joinLead:
		// We led before a restart or a step-down: take a new term.
		return n.lead(ls, version)
	}
	if catchUp {
		if _, _, err := n.catchUp(n.ctx); err != nil {
			return err
		}
	}
	err = n.follow(ls)
	if err == nil {
		n.client.leaderAt(ls.LeaderAddr) // requests still waiting on a former leader are retried
	}
	n.mu.Lock()
	fstep := n.fc.followed(ls, err)
	if fstep == followJoined {
		n.setStateLocked(Joined, Follower)
	}
	n.mu.Unlock()
	if fstep != followJoined && fstep != followDuplicate {
		n.log.Info("cannot follow the leader", "leader", ls.LeaderID, "addr", ls.LeaderAddr, "err", err)
	}
	switch fstep {
	case followDuplicate:
		var dup *DuplicateIDError
		errors.As(err, &dup)
		return n.refusedAsDuplicate(dup)
	case followReread:
		return nil // a newer leader exists; read leader_state.json again
	case followWait:
		_ = sleepCtx(n.ctx, store.Jitter(n.opts.HeartbeatInterval, 0.2))
		return nil
	case followCheck:
		return n.checkAndAttempt(ls.Term)
	}
	n.log.Info("following", "leader", ls.LeaderID, "term", ls.Term)
	return n.watchLeader()
}

// refuseDuplicate is called when leader_state.json (ls, version) names this
// node's ID with another process that wrote it since this node started.
// Taking a new term over it would depose that process, which would then
// take one over ours, and so on: the node reports it (ERROR once per other
// process, Status, the refused gauge, requests) and does not lead while
// the other lives, that is while it answers at its address as this ID or
// writes to the group. One that does neither for half the heartbeat
// timeout has stopped (or is cut off from us and the log), and the node
// takes over as from a leader that stopped.
func (n *Node) refuseDuplicate(dup *DuplicateIDError, ls leaderState, version string) error {
	n.mu.Lock()
	first := n.fc.reportDuplicate(dup)
	n.mu.Unlock()
	if first {
		n.log.Error("another process uses this node's ID: it wrote leader_state.json under this ID after this node started; not leading while it lives (node IDs must be unique: stop one of them)",
			"other_incarnation", dup.Incarnation, "other_addr", dup.Addr, "term", dup.Term, "incarnation", n.incarnation)
	}
	n.setProblem(dup)
	if n.host.answersAs(n.ctx, ls.LeaderAddr, n.group) {
		return dup
	}
	w, err := n.watchLog()
	if err != nil || w == nil {
		return err
	}
	cur, v, err := n.gs.readLeaderState(n.ctx)
	if err != nil {
		return err
	}
	if v != version {
		n.observeLeader(cur)
		return nil // it changed: look again
	}
	grew, _, err := w.grew()
	if err != nil {
		return err
	}
	if grew {
		return dup
	}
	n.log.Warn("the other process using this node's ID neither answers nor writes: taking leadership", "other_incarnation", dup.Incarnation, "term", ls.Term)
	return n.lead(cur, v)
}

// refusedAsDuplicate is called when the leader refused this node's Follow
// because another live process follows under its ID. The node reports it
// like a duplicate leader (ERROR once per other process, Status, the
// refused gauge, requests) and asks again at the pace of the heartbeat
// timeout: once the other stops answering the leader, it joins.
func (n *Node) refusedAsDuplicate(dup *DuplicateIDError) error {
	n.mu.Lock()
	first := n.fc.reportDuplicate(dup)
	n.mu.Unlock()
	if first {
		n.log.Error("another process uses this node's ID: it follows the leader, which refuses this node while it answers (node IDs must be unique: stop one of them)",
			"other_incarnation", dup.Incarnation, "other_addr", dup.Addr, "term", dup.Term, "incarnation", n.incarnation)
	}
	n.setProblem(dup)
	_ = sleepCtx(n.ctx, store.Jitter(time.Duration(n.opts.MaxMissedHeartbeats)*n.opts.HeartbeatInterval, 0.2))
	return dup
}

// watchLeader returns when MaxMissedHeartbeats heartbeats were missed, or
// the follower must catch up.
func (n *Node) watchLeader() error {
	limit := time.Duration(n.opts.MaxMissedHeartbeats) * n.opts.HeartbeatInterval
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return nil
		case <-n.heard:
			n.mu.Lock()
			step, term := n.fc.heartbeat(n.role == Follower)
			n.mu.Unlock()
			switch step {
			case watchLeaving:
				n.log.Info("the leader is leaving; checking the store")
				n.setState(Joining, NoRole) // requests wait for the next leader
				n.client.dropForwarder()
				return n.attempt(term)
			case watchRejoin:
				return nil
			}
			t.Reset(limit)
		case <-t.C:
			n.mu.Lock()
			term := n.fc.following
			n.mu.Unlock()
			n.log.Warn("missed heartbeats from the leader", "missed", n.opts.MaxMissedHeartbeats)
			// Requests forwarded to it may never be answered: they are
			// failed now and retried under their sequence numbers, which
			// the group deduplicates. Until the node follows again, new
			// requests wait (waitJoined) rather than go to the same leader.
			n.setState(Joining, NoRole)
			n.client.dropForwarder()
			return n.checkAndAttempt(term)
		}
	}
}

// checkAndAttempt is called when the leader of term stopped answering.
// Before attempting, it looks for signs in the store that the leader lives
// and the node is the one cut off:
//
//   - leader_state.json shows the node cut off (signed): the leader of term
//     dropped it, or a leader of a term it never reached lists others.
//   - The log grows while it waits: the leader still commits, so the
//     others reach it.
//
// Otherwise it attempts (attempt). Only when leadership is tried depends on
// this; who wins is the store's compare-and-swap (docs/rsm.md,
// "Availability").
func (n *Node) checkAndAttempt(term uint64) error {
	w, err := n.watchLog()
	if err != nil || w == nil {
		return err
	}
	ls, _, err := n.gs.readLeaderState(n.ctx)
	if err != nil {
		return err
	}
	if n.signed(ls, term) {
		return nil
	}
	grew, now, err := w.grew()
	if err != nil {
		return err
	}
	if grew {
		n.log.Warn("the leader still commits: this node is cut off from it; not attempting leadership", "leader", ls.LeaderID, "term", term, "log_end", now)
		return nil
	}
	return n.attempt(term)
}

// logWatch is the log's end seen before a wait, for the sign that a
// leader still commits.
type logWatch struct {
	n         *Node
	from, end uint64
}

// watchLog notes the log's end, then waits half the heartbeat timeout. It
// returns nil (and no error) if the node is closing.
func (n *Node) watchLog() (*logWatch, error) {
	from := n.rep.index()
	n.mu.Lock()
	from = n.fc.watchFrom(from)
	n.mu.Unlock()
	end, err := n.logEnd(n.ctx, from)
	if err != nil {
		return nil, err
	}
	if sleepCtx(n.ctx, time.Duration(n.opts.MaxMissedHeartbeats)*n.opts.HeartbeatInterval/2) != nil {
		return nil, nil
	}
	return &logWatch{n: n, from: from, end: end}, nil
}

// grew reports whether the log grew during the wait, and its end now.
func (w *logWatch) grew() (bool, uint64, error) {
	now, err := w.n.logEnd(w.n.ctx, max(w.from, w.end))
	if err != nil {
		return false, 0, err
	}
	return now > w.end, now, nil
}

// signed reports whether leader_state.json (ls), read by a node that gave
// up on the leader of term, tells it not to attempt (followCore.judge): it
// is of another term (read it again), or it shows that the leader lives
// and reaches other followers (cutOffSign), so that the node is the one
// cut off.
func (n *Node) signed(ls leaderState, term uint64) bool {
	n.mu.Lock()
	sign, reached := n.fc.judge(ls, term), n.fc.reached
	n.mu.Unlock()
	switch sign {
	case signMoved:
		n.observeLeader(ls)
		return true
	case signDropped:
		n.log.Warn("the leader dropped this node from the group's membership: it lives and reaches the others, so this node is cut off from it; not attempting leadership", "leader", ls.LeaderID, "term", ls.Term)
		return true
	case signNewer:
		n.log.Warn("a newer leader reaches other followers and not this node: this node is cut off from it; not attempting leadership", "leader", ls.LeaderID, "term", ls.Term, "followers", len(ls.Followers), "reached_term", reached)
		return true
	}
	return false
}

// attempt is S2C's LeaderState check: if leader_state.json still names the
// leader of the term we gave up on, wait for our rank and attempt
// leadership over the version we read.
func (n *Node) attempt(term uint64) error {
	mine := n.rep.index()
	n.mu.Lock()
	rank := n.fc.rank(mine)
	n.mu.Unlock()
	delay := rankDelay(rank, n.opts.LeadershipDelay) + store.Jitter(n.opts.LeadershipDelay/4, 1)
	if sleepCtx(n.ctx, delay) != nil {
		return nil
	}
	ls, version, err := n.gs.readLeaderState(n.ctx)
	if err != nil {
		return err
	}
	// The leader of term may have listed its followers while we waited.
	if n.signed(ls, term) {
		return nil
	}
	return n.lead(ls, version)
}

// askPacked asks the store to pack the log (groupStore.packLog), and
// reports whether it is a pack; a failure is logged, and the log taken for
// unpacked.
func (n *Node) askPacked() bool {
	packed, err := n.gs.packLog(n.ctx)
	if err != nil && n.ctx.Err() == nil {
		n.log.Warn("could not ask the store to pack the log; it is stored as before", "err", err)
	}
	return packed
}

// lead attempts leadership over prev (version "" creates the group), then
// takes over and serves until deposed.
func (n *Node) lead(prev leaderState, version string) error {
	start := time.Now()
	applied := n.rep.index()
	// The commit index never decreases: a node that restarted empty
	// knows less than the group did.
	ls := leaderState{Term: prev.Term + 1, LeaderID: n.host.cfg.ID, LeaderAddr: n.host.cfg.Addr, Incarnation: n.incarnation,
		LeaderKey: n.host.key, CommitIndex: max(applied, prev.CommitIndex), Counter: prev.Counter}
	v, err := n.gs.writeLeaderState(n.ctx, ls, version)
	n.m.leaderUpdate.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
	if errors.Is(err, store.ErrPreconditionFailed) && !store.IsAmbiguous(err) {
		return nil // another node won; read it and follow
	}
	if err != nil {
		return err
	}
	ls.Counter++
	n.observeLeader(ls)
	n.mu.Lock()
	n.fc.led(ls.Term)
	n.mu.Unlock()
	// A new group's log is packed at once: no node of a version without
	// packs has read it. An existing group's is moved into a pack only as
	// window.packNext decides, even if empty: a member may run a version
	// without packs.
	if version == "" {
		n.askPacked()
	}
	l := newLeaderRun(n, ls.Term, ls, v)
	// The nodes of the term before (its leader and followers) may run a
	// version without packs: the log stays as it is until each has told
	// this leader its version, or is taken for gone (window.packNext).
	var prevIDs []string
	if prev.LeaderID != "" && prev.LeaderID != n.host.cfg.ID {
		prevIDs = append(prevIDs, prev.LeaderID)
	}
	for _, f := range prev.Followers {
		if f.ID != n.host.cfg.ID {
			prevIDs = append(prevIDs, f.ID)
		}
	}
	l.w.expectVersions(prevIDs, time.Now())
	n.mu.Lock()
	n.leader = l
	n.mu.Unlock()
	defer func() {
		l.depose(nil)
		n.mu.Lock()
		n.leader = nil
		n.mu.Unlock()
	}()
	if err := l.takeover(); err != nil {
		n.log.Info("takeover failed", "term", ls.Term, "err", err)
		n.resetReplica()
		return nil
	}
	if version != "" && n.gs.st.Packs() {
		// The log holds the seal now, so the store packs nothing: it only
		// says whether the log is a pack already. The window is still this
		// goroutine's until serve.
		l.w.unpacked = !n.askPacked()
	}
	n.m.leaderAttempt.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
	n.setState(Joined, Leader)
	err = l.serve()
	n.setState(Joining, NoRole)
	n.log.Info("leadership ended", "term", ls.Term, "cause", err)
	if errors.Is(err, errStoreLost) || errors.Is(err, ErrCorrupt) {
		// Heartbeats stopped with the loop; telling the followers lets
		// one that reaches the store take over without waiting for them,
		// or report the corrupt leader_state.json at once.
		n.tellLeaving(n.ctx, l)
	}
	// What we applied may include entries that were never confirmed.
	n.resetReplica()
	return nil
}

// follow registers with the leader named in ls.
func (n *Node) follow(ls leaderState) error {
	applied := n.rep.index()
	var resp *rsmpb.FollowResponse
	var err error
	for attempt := 0; attempt < n.opts.Retry.MaxAttempts; attempt++ {
		if attempt > 0 {
			// Bounded by a heartbeat interval: a leader back after a
			// partition is followed again without waiting out the
			// store's retry delays.
			if sleepCtx(n.ctx, min(n.gs.backoff(attempt), n.opts.HeartbeatInterval)) != nil {
				return n.ctx.Err()
			}
			// The leader may have moved (a restart on a new address):
			// one read tells, before dialing the old address again.
			if cur, _, err := n.gs.readLeaderState(n.ctx); err == nil && cur.Term != ls.Term {
				n.observeLeader(cur)
				return &NotLeaderError{Leader: cur.LeaderID, Addr: cur.LeaderAddr, Term: cur.Term}
			}
		}
		resp, err = n.host.follow(n.ctx, ls.LeaderAddr, &rsmpb.FollowRequest{
			Group: n.group, NodeId: n.host.cfg.ID, Addr: n.host.cfg.Addr, ApplyIndex: applied, Term: ls.Term, Incarnation: n.incarnation, ReadsPacks: !n.host.noPacks})
		if err == nil {
			break
		}
	}
	n.m.follows.WithLabelValues(n.group, outcome(err, resp)).Inc()
	if err != nil {
		return err
	}
	if resp.Status == rsmpb.Status_DUPLICATE_ID {
		return &DuplicateIDError{ID: n.host.cfg.ID, Incarnation: resp.OtherIncarnation, Addr: resp.OtherAddr, Term: resp.Term, Follower: true}
	}
	if resp.Status != rsmpb.Status_OK {
		n.observeLeader(leaderState{Term: resp.Term, LeaderID: resp.LeaderId, LeaderAddr: resp.LeaderAddr})
		return &NotLeaderError{Leader: resp.LeaderId, Addr: resp.LeaderAddr, Term: resp.Term}
	}
	return nil
}

func outcome(err error, resp interface{ GetStatus() rsmpb.Status }) string {
	if err != nil {
		return "error"
	}
	return resp.GetStatus().String()
}

// Leave stops the node; a leader steps down so another may take over at
// once. It waits for the node's goroutines, or returns ctx's error first;
// the node stops all the same, and a later Leave (or the host's Close)
// waits for it again.
func (n *Node) Leave(ctx context.Context) error {
	n.mu.Lock()
	first := !n.left
	n.left = true
	l := n.leader
	n.mu.Unlock()
	if first {
		if l != nil {
			l.depose(errors.New("rsm: leaving"))
		}
		n.cancel()
		// Waited for through gone, by every Leave and by Host.Close.
		go n.finishLeave(l)
	}
	select {
	case <-n.gone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finishLeave waits for the node's goroutines, then closes its stream to
// the leader, tells the followers of l (its leadership, if any) that it
// ended, and removes the node from its host; gone is closed last.
func (n *Node) finishLeave(l *leaderRun) {
	defer close(n.gone)
	n.wg.Wait()
	n.rep.close()
	n.client.close()
	if l != nil {
		// Let the followers take over without waiting for missed
		// heartbeats.
		n.tellLeaving(context.Background(), l)
		n.log.Info("left the group as leader", "term", l.term)
	}
	n.host.removeGroup(n)
}

// tellLeaving tells l's followers that its leadership ended, so they check
// the store at once. Best effort: they fall back to the heartbeat timeout.
func (n *Node) tellLeaving(ctx context.Context, l *leaderRun) {
	followers := l.followerStatus()
	var wg sync.WaitGroup
	for _, f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := n.host.client(cctx, f.Addr, n.group)
			if err == nil {
				_, err = c.Synchronize(cctx, &rsmpb.SynchronizeRequest{Group: n.group, Term: l.term, LeaderId: n.host.cfg.ID, Leaving: true})
			}
			if err != nil {
				n.log.Debug("could not tell a follower we leave", "follower", f.ID, "err", err)
			}
		}()
	}
	wg.Wait()
}

// RequestTimeout is the node's Options.RequestTimeout: the bound on one
// Command or Read whose ctx has no deadline. A front end bounds its own
// waits by it too.
func (n *Node) RequestTimeout() time.Duration { return n.opts.RequestTimeout }

// Command submits a command to the group's leader and returns the result of
// applying it, exactly once even if the node retries through leader changes.
func (n *Node) Command(ctx context.Context, machine string, command []byte) ([]byte, error) {
	return n.client.submit(ctx, rsmpb.RequestType_COMMAND, machine, command)
}

// Read answers query on the leader's state, linearizably: the answer
// reflects every command acknowledged before Read was called.
func (n *Node) Read(ctx context.Context, machine string, query []byte) ([]byte, error) {
	return n.client.submit(ctx, rsmpb.RequestType_READ, machine, query)
}

// route says where a request goes now: to l, this node's leadership, or
// to the leader at addr; neither while no leader is known.
func (n *Node) route() (l *leaderRun, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leader != nil && n.role == Leader {
		return n.leader, ""
	}
	if n.fc.leaderID == n.host.cfg.ID {
		return nil, ""
	}
	return nil, n.fc.leaderAddr
}

func (n *Node) waitJoined(ctx context.Context) error {
	n.mu.Lock()
	ch, refused := n.joined, n.refused
	n.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-refused:
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.problem == nil {
			return nil // repaired meanwhile: try again
		}
		return n.problem
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return ErrClosed
	}
}
