package rsm

import (
	"errors"
	"slices"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// followCore is the follower side of a node's protocol: what the node
// knows of its group's leader and members, and the decisions of joining,
// following, watching the leader and attempting leadership (docs/rsm.md,
// "Availability"). As window is to the leader's loop, its methods are the
// decisions and do no I/O, start no goroutine and read no clock: the node
// (node.go) reads leader_state.json and the log, calls the leader and
// waits; it hands what it learned to these methods and does what they
// decide. It is not safe for concurrent use: the node holds it under its
// mu.
type followCore struct {
	me          string // this node's ID
	incarnation string // this process's, in the leader_state.json it writes
	patience    int    // MaxMissedHeartbeats: refusals in a row borne from a named leader

	term       uint64 // the highest term seen
	leaderID   string // the leader of term, as last seen
	leaderAddr string
	commitSeen uint64         // the highest commit index known: leader_state.json, the leader's heartbeats
	following  uint64         // the term of the leader followed
	listed     uint64         // a term whose leader's heartbeats listed this node as a follower
	reached    uint64         // the highest term this node led or heard the leader's heartbeats of
	peers      []followerInfo // the group's followers, from heartbeats
	tooFar     bool           // the leader said this node must catch up from the store
	leaderGone bool           // the leader said it is leaving
	refusals   int            // Follow refusals in a row from a node not (yet) leading

	// firstTerm is the term of the first leader_state.json read (0:
	// none): a record naming this node's ID with another incarnation at a
	// higher term was written by another process after this one started.
	readFirst   bool
	firstTerm   uint64
	dupReported string // the other incarnation last reported

	mutation mutation // zero but in the simulator's mutation check
}

func newFollowCore(me, incarnation string, maxMissed int) *followCore {
	return &followCore{me: me, incarnation: incarnation, patience: maxMissed}
}

// observe records a leader seen in the store or an answer. It reports
// whether ls's term is now the one known (not behind it).
func (f *followCore) observe(ls leaderState) bool {
	f.commitSeen = max(f.commitSeen, ls.CommitIndex)
	if ls.Term < f.term {
		return false
	}
	f.term, f.leaderID, f.leaderAddr = ls.Term, ls.LeaderID, ls.LeaderAddr
	return true
}

// joinStep is what a pass of the join loop does after reading
// leader_state.json.
type joinStep int

const (
	joinCreate    joinStep = iota // there is none: create the group, if nothing else is stored
	joinLead                      // it names this node (a restart, a step-down): take a new term
	joinDuplicate                 // it names this node's ID, written by another process since this one started
	joinFollow                    // it names another leader: follow it
)

// join decides a pass of the join loop from leader_state.json: ls, or
// none (found false). catchUp says the leader told this node it is too
// far behind to be sent entries: it catches up from the store first. dup
// is the other process for joinDuplicate.
func (f *followCore) join(ls leaderState, found bool) (step joinStep, catchUp bool, dup *DuplicateIDError) {
	if !found {
		f.noteFirst(0)
		return joinCreate, false, nil
	}
	f.noteFirst(ls.Term)
	if ls.LeaderID == f.me {
		if dup := f.duplicate(ls); dup != nil {
			return joinDuplicate, false, dup
		}
		return joinLead, false, nil
	}
	catchUp, f.tooFar = f.tooFar, false
	return joinFollow, catchUp, nil
}

// noteFirst records the term of the first leader_state.json read.
func (f *followCore) noteFirst(term uint64) {
	if !f.readFirst {
		f.readFirst, f.firstTerm = true, term
	}
}

// duplicate returns the other process if ls was written under this node's
// ID by another incarnation since this node started. A record written
// before (a restart: its writer is gone) is not one, nor one without an
// incarnation (the previous version's).
func (f *followCore) duplicate(ls leaderState) *DuplicateIDError {
	if ls.LeaderID != f.me || ls.Incarnation == "" || ls.Incarnation == f.incarnation || ls.Term <= f.firstTerm {
		return nil
	}
	return &DuplicateIDError{ID: ls.LeaderID, Incarnation: ls.Incarnation, Addr: ls.LeaderAddr, Term: ls.Term}
}

// reportDuplicate notes that dup was reported, and says whether it is the
// first report of that process (logged at ERROR once).
func (f *followCore) reportDuplicate(dup *DuplicateIDError) (first bool) {
	first = f.dupReported != dup.Incarnation
	f.dupReported = dup.Incarnation
	return first
}

// followStep is what the node does after asking the leader named in
// leader_state.json to take it as a follower.
type followStep int

const (
	followJoined    followStep = iota // registered: the node follows it
	followDuplicate                   // refused: another live process follows under this node's ID
	followReread                      // a newer leader exists: read leader_state.json again
	followWait                        // it answers but does not lead (yet): wait a heartbeat interval, then read again
	followCheck                       // it cannot be followed: look for signs that it lives, then attempt (checkAndAttempt)
)

// followed decides from the answer to this node's Follow to the leader of
// ls (err nil: registered).
func (f *followCore) followed(ls leaderState, err error) followStep {
	if err == nil {
		f.refusals = 0
		f.following = ls.Term
		return followJoined
	}
	var dup *DuplicateIDError
	if errors.As(err, &dup) {
		return followDuplicate
	}
	var nl *NotLeaderError
	if !errors.As(err, &nl) {
		if f.mutation == mutateFollowFailureWaits {
			return followWait
		}
		return followCheck
	}
	if nl.Term > ls.Term {
		return followReread
	}
	// The named leader answers but does not lead (yet: it may be taking
	// over, or restarting). It is alive: give it as long as a leader gets
	// before its followers give up on it.
	f.refusals++
	if f.refusals < f.patience {
		return followWait
	}
	f.refusals = 0
	return followCheck
}

// stale reports whether term is behind the highest term known.
func (f *followCore) stale(term uint64) bool { return term < f.term }

// heard takes a heartbeat of the leader of req.Term, which the store names
// (Node.fromLeader), on a node that does not lead.
func (f *followCore) heard(req *rsmpb.SynchronizeRequest) {
	f.term, f.leaderID = req.Term, req.LeaderId
	f.reached = max(f.reached, req.Term)
	f.commitSeen = max(f.commitSeen, req.CommitIndex)
	if req.TooFarBehind {
		f.tooFar = true
	}
	if req.Leaving {
		f.leaderGone = true
	}
	f.peers = f.peers[:0]
	for _, p := range req.Followers {
		f.peers = append(f.peers, followerInfo{ID: p.Id, Addr: p.Addr, ApplyIndex: p.ApplyIndex, Meta: p.Meta})
		if p.Id == f.me {
			f.listed = req.Term
		}
	}
}

// watchStep is what a follower watching its leader does on a heartbeat.
type watchStep int

const (
	watchOn      watchStep = iota // keep watching
	watchRejoin                   // leave the watch for the join loop: catch up, or the node leads now
	watchLeaving                  // the leader said it is leaving: attempt at once (attempt)
)

// heartbeat decides a watch on a heartbeat; follower says the node still
// has the follower role. term is the term the node follows.
func (f *followCore) heartbeat(follower bool) (step watchStep, term uint64) {
	gone := f.leaderGone
	f.leaderGone = false
	switch {
	case gone:
		return watchLeaving, f.following
	case f.tooFar || !follower:
		return watchRejoin, f.following
	}
	return watchOn, f.following
}

// The signs in leader_state.json that a node is cut off from a live leader.
const (
	signNone    = iota
	signDropped // the leader of a term whose heartbeats listed the node dropped it
	signNewer   // a leader of a term the node never reached lists others
	signMoved   // it is not the record of the term given up on: read it again
)

// judge reads leader_state.json (ls), read by a node that gave up on the
// leader of term, for the signs that the node must not attempt:
// signMoved if ls is of another term, else cutOffSign's. Neither is a
// rule of safety: each decides only whether the node tries.
func (f *followCore) judge(ls leaderState, term uint64) int {
	if (ls.Term != term) != (f.mutation == mutateJudgeSameTermMoved) {
		return signMoved
	}
	if f.mutation == mutateCutOffIgnoresFollowers {
		ls.Followers = nil
	}
	return cutOffSign(ls, f.me, f.listed, f.reached)
}

// cutOffSign reads ls for node me, which was last listed by the heartbeats
// of term listed and led or heard heartbeats of terms up to reached.
// ls.Followers are the followers that registered with the leader of
// ls.Term (they reached it), less those it dropped because it could no
// longer reach them while it reached another (leaderRun.dropUnreachable):
//
//   - signDropped: the leader of a term whose heartbeats listed me no
//     longer lists it.
//   - signNewer: the leader of a term above any me reached lists
//     followers, and not me: it took over and others reached it while me
//     was cut off from them (a leader cut from its peers, deposed while
//     idle, would otherwise take the leadership back from the leader it
//     cannot reach). A node that reached no term yet (just started) is not
//     judged by it: it may be the last one alive.
func cutOffSign(ls leaderState, me string, listed, reached uint64) int {
	if ls.LeaderID == me || slices.ContainsFunc(ls.Followers, func(f followerInfo) bool { return f.ID == me }) {
		return signNone
	}
	switch {
	case listed == ls.Term:
		return signDropped
	case reached > 0 && ls.Term > reached && len(ls.Followers) > 0:
		return signNewer
	}
	return signNone
}

// watchFrom is the index after which the node lists the log's end before
// and after its wait (the sign that a leader still commits): past what it
// applied (mine) and every index it knows committed.
func (f *followCore) watchFrom(mine uint64) uint64 { return max(mine, f.commitSeen) }

// rank counts the group's followers more up to date than this node, whose
// replica has applied mine (ties by ID): they attempt before it.
func (f *followCore) rank(mine uint64) int {
	r := 0
	for _, p := range f.peers {
		if p.ID == f.me || p.ID == f.leaderID {
			continue
		}
		if p.ApplyIndex > mine || (p.ApplyIndex == mine && p.ID < f.me) {
			r++
		}
	}
	return r
}

// rankDelay is how long a node of rank waits before it reads
// leader_state.json for its attempt, less the jitter the node adds.
func rankDelay(rank int, leadershipDelay time.Duration) time.Duration {
	return time.Duration(rank) * leadershipDelay
}

// led records that this node took term (it wrote leader_state.json).
func (f *followCore) led(term uint64) { f.reached = max(f.reached, term) }
