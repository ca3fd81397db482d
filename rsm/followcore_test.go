package rsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// The follower core's decisions, without a store, a network or a clock.

func heartbeatOf(term uint64, leader string, commit uint64, followers ...followerInfo) *rsmpb.SynchronizeRequest {
	req := &rsmpb.SynchronizeRequest{Term: term, LeaderId: leader, CommitIndex: commit}
	for _, f := range followers {
		req.Followers = append(req.Followers, &rsmpb.FollowerInfo{Id: f.ID, Addr: f.Addr, ApplyIndex: f.ApplyIndex})
	}
	return req
}

// TestFollowCoreJoin: what a pass of the join loop does with the
// leader_state.json it read.
func TestFollowCoreJoin(t *testing.T) {
	other := "0123456789abcdef"
	for _, tc := range []struct {
		name    string
		first   *leaderState // the first record read, if any before ls
		tooFar  bool         // the leader said the node is too far behind
		ls      leaderState
		found   bool
		want    joinStep
		catchUp bool
	}{
		{name: "no record: create the group", found: false, want: joinCreate},
		{name: "another leader: follow", ls: leaderState{Term: 3, LeaderID: "b"}, found: true, want: joinFollow},
		{name: "another leader, too far behind: catch up, then follow", tooFar: true, ls: leaderState{Term: 3, LeaderID: "b"}, found: true, want: joinFollow, catchUp: true},
		{name: "this node led before a restart: take a new term", ls: leaderState{Term: 3, LeaderID: "a", Incarnation: other}, found: true, want: joinLead},
		{name: "this node's own record: take a new term", first: &leaderState{Term: 2, LeaderID: "b"}, ls: leaderState{Term: 3, LeaderID: "a", Incarnation: "mine"}, found: true, want: joinLead},
		{name: "the previous version's record under this ID", first: &leaderState{Term: 2, LeaderID: "b"}, ls: leaderState{Term: 3, LeaderID: "a"}, found: true, want: joinLead},
		{name: "another process wrote as this node since it started", first: &leaderState{Term: 2, LeaderID: "b"}, ls: leaderState{Term: 3, LeaderID: "a", Incarnation: other}, found: true, want: joinDuplicate},
		{name: "a missing record after one was read: create, if the group is empty", first: &leaderState{Term: 2, LeaderID: "b"}, found: false, want: joinCreate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFollowCore("a", "mine", 4)
			if tc.first != nil {
				f.join(*tc.first, true)
			}
			f.tooFar = tc.tooFar
			step, catchUp, dup := f.join(tc.ls, tc.found)
			if step != tc.want || catchUp != tc.catchUp {
				t.Fatalf("join: step %d catch up %v, want %d %v", step, catchUp, tc.want, tc.catchUp)
			}
			if (dup != nil) != (step == joinDuplicate) {
				t.Fatalf("join: duplicate %v with step %d", dup, step)
			}
			if dup != nil && (dup.Incarnation != other || dup.Term != tc.ls.Term || !errors.Is(dup, ErrDuplicateID)) {
				t.Fatalf("duplicate %+v does not name the other process", dup)
			}
			if f.tooFar && step == joinFollow {
				t.Fatal("the catch-up was not consumed")
			}
			// A catch-up is asked once per word of the leader.
			if step == joinFollow {
				if _, again, _ := f.join(tc.ls, true); again {
					t.Fatal("a second pass catches up again")
				}
			}
		})
	}
}

// TestFollowCoreFollowed: the answers to Follow. A named leader that
// answers but does not lead is given MaxMissedHeartbeats refusals (a
// heartbeat interval each) before the node looks for signs and attempts.
func TestFollowCoreFollowed(t *testing.T) {
	ls := leaderState{Term: 5, LeaderID: "b", LeaderAddr: "b:1"}
	notLeader := &NotLeaderError{Leader: "b", Term: 5}
	for _, tc := range []struct {
		name string
		errs []error
		want []followStep
	}{
		{"registered", []error{nil}, []followStep{followJoined}},
		{"a duplicate follows under this ID", []error{&DuplicateIDError{ID: "a", Follower: true}}, []followStep{followDuplicate}},
		{"a newer leader exists", []error{&NotLeaderError{Term: 6}}, []followStep{followReread}},
		{"unreachable", []error{errors.New("connection refused")}, []followStep{followCheck}},
		{"wrapped refusal", []error{fmt.Errorf("follow: %w", notLeader)}, []followStep{followWait}},
		{"refused as many times as heartbeats are missed",
			[]error{notLeader, notLeader, notLeader, notLeader, notLeader},
			[]followStep{followWait, followWait, followWait, followCheck, followWait}},
		{"a registration restores the patience",
			[]error{notLeader, notLeader, notLeader, nil, notLeader, notLeader, notLeader, notLeader},
			[]followStep{followWait, followWait, followWait, followJoined, followWait, followWait, followWait, followCheck}},
		{"a newer term or an unreachable leader does not count",
			[]error{notLeader, &NotLeaderError{Term: 9}, notLeader, errors.New("timeout"), notLeader, notLeader},
			[]followStep{followWait, followReread, followWait, followCheck, followWait, followCheck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFollowCore("a", "mine", 4)
			for i, err := range tc.errs {
				if got := f.followed(ls, err); got != tc.want[i] {
					t.Fatalf("answer %d (%v): step %d, want %d", i, err, got, tc.want[i])
				}
			}
		})
	}
	f := newFollowCore("a", "mine", 4)
	if f.followed(ls, nil); f.following != 5 {
		t.Fatalf("following term %d after registering with the leader of 5", f.following)
	}
}

// TestFollowCorePatienceExhaustive: over every sequence of seven answers,
// the node never waits more than MaxMissedHeartbeats-1 times in
// a row on a leader that answers but does not lead, and every wait is
// for such a refusal.
func TestFollowCorePatienceExhaustive(t *testing.T) {
	ls := leaderState{Term: 5, LeaderID: "b"}
	answers := []error{nil, &NotLeaderError{Term: 5}, &NotLeaderError{Term: 6}, errors.New("unreachable"), &DuplicateIDError{}}
	const length, patience = 7, 3
	seq := make([]int, length)
	for {
		f := newFollowCore("a", "mine", patience)
		waits := 0
		for _, a := range seq {
			step := f.followed(ls, answers[a])
			if step == followWait {
				if a != 1 {
					t.Fatalf("%v: waited on answer %v", seq, answers[a])
				}
				waits++
			} else if a == 1 || step == followJoined {
				waits = 0
			}
			if waits >= patience {
				t.Fatalf("%v: %d waits in a row", seq, waits)
			}
		}
		i := 0
		for ; i < length; i++ {
			if seq[i]++; seq[i] < len(answers) {
				break
			}
			seq[i] = 0
		}
		if i == length {
			return
		}
	}
}

// TestFollowCoreHeartbeat: what a heartbeat tells the node that watches
// its leader, and what it records.
func TestFollowCoreHeartbeat(t *testing.T) {
	f := newFollowCore("a", "mine", 4)
	f.followed(leaderState{Term: 3, LeaderID: "b"}, nil)
	f.heard(heartbeatOf(3, "b", 10, followerInfo{ID: "a", ApplyIndex: 9}, followerInfo{ID: "c", ApplyIndex: 10}))
	if step, term := f.heartbeat(true); step != watchOn || term != 3 {
		t.Fatalf("an ordinary heartbeat: step %d term %d", step, term)
	}
	if f.listed != 3 || f.reached != 3 || f.commitSeen != 10 || f.term != 3 || f.leaderID != "b" || len(f.peers) != 2 {
		t.Fatalf("recorded %+v", f)
	}
	if step, _ := f.heartbeat(false); step != watchRejoin {
		t.Fatal("a node that no longer follows (it leads now) keeps watching")
	}
	leaving := heartbeatOf(3, "b", 8)
	leaving.Leaving = true
	f.heard(leaving)
	if step, term := f.heartbeat(true); step != watchLeaving || term != 3 {
		t.Fatalf("a leaving leader: step %d term %d", step, term)
	}
	if step, _ := f.heartbeat(true); step != watchOn {
		t.Fatal("a leader's leaving is acted on twice")
	}
	if f.commitSeen != 10 || len(f.peers) != 0 || f.listed != 3 {
		t.Fatalf("after a heartbeat listing none: %+v (the commit index never decreases; a term's listing stays)", f)
	}
	far := heartbeatOf(3, "b", 10)
	far.TooFarBehind = true
	f.heard(far)
	if step, _ := f.heartbeat(true); step != watchRejoin {
		t.Fatal("a node too far behind keeps watching")
	}
	if step, catchUp, _ := f.join(leaderState{Term: 3, LeaderID: "b"}, true); step != joinFollow || !catchUp {
		t.Fatal("the join after it does not catch up")
	}
	if !f.stale(2) || f.stale(3) || f.stale(4) {
		t.Fatal("stale terms")
	}
}

// TestFollowCoreObserve: a record or an answer of a lower term does not
// replace the leader known; every commit index raises the one known.
func TestFollowCoreObserve(t *testing.T) {
	f := newFollowCore("a", "mine", 4)
	if !f.observe(leaderState{Term: 4, LeaderID: "b", LeaderAddr: "b:1", CommitIndex: 7}) {
		t.Fatal("a first record not taken")
	}
	if f.observe(leaderState{Term: 3, LeaderID: "c", LeaderAddr: "c:1", CommitIndex: 9}) {
		t.Fatal("a lower term taken")
	}
	if f.term != 4 || f.leaderID != "b" || f.leaderAddr != "b:1" || f.commitSeen != 9 {
		t.Fatalf("after a lower term: %+v", f)
	}
	if !f.observe(leaderState{Term: 4, LeaderID: "b", LeaderAddr: "b:2"}) || f.leaderAddr != "b:2" || f.commitSeen != 9 {
		t.Fatalf("the same term at a new address: %+v", f)
	}
	if f.watchFrom(5) != 9 || f.watchFrom(12) != 12 {
		t.Fatal("the log is watched from below an index known committed")
	}
}

// TestFollowCoreJudgeExhaustive checks judge over every record of terms
// 0-3 with up to three followers, and every listed and reached term 0-3,
// against docs/rsm.md ("Availability"): (a) the leader of a term whose
// heartbeats listed the node no longer lists it; (b) a leader of a term
// above every term the node reached lists followers and not the node,
// never for a node that reached no term; no sign for a record naming the
// node; a record of another term is read again.
func TestFollowCoreJudgeExhaustive(t *testing.T) {
	ids := []string{"me", "b", "c"}
	seen := map[int]int{}
	for term := uint64(0); term <= 3; term++ {
		for lsTerm := uint64(0); lsTerm <= 3; lsTerm++ {
			for _, leader := range []string{"me", "b", "x"} {
				for mask := range 1 << len(ids) {
					var fs []followerInfo
					for i, id := range ids {
						if mask&(1<<i) != 0 {
							fs = append(fs, followerInfo{ID: id})
						}
					}
					ls := leaderState{Term: lsTerm, LeaderID: leader, Followers: fs}
					named := leader == "me" || mask&1 != 0
					for listed := uint64(0); listed <= 3; listed++ {
						for reached := uint64(0); reached <= 3; reached++ {
							f := newFollowCore("me", "mine", 4)
							f.listed, f.reached = listed, reached
							got := f.judge(ls, term)
							want := signNone
							switch {
							case lsTerm != term:
								want = signMoved
							case named:
							case listed == lsTerm:
								want = signDropped
							case reached > 0 && lsTerm > reached && len(fs) > 0:
								want = signNewer
							}
							if got != want {
								t.Fatalf("judge(%+v, %d) listed %d reached %d: %d, want %d", ls, term, listed, reached, got, want)
							}
							seen[got]++
						}
					}
				}
			}
		}
	}
	for _, s := range []int{signNone, signDropped, signNewer, signMoved} {
		if seen[s] == 0 {
			t.Errorf("sign %d never given", s)
		}
	}
}

// TestFollowCoreRank: followers more up to date than the node attempt
// before it, ties by ID; the leader given up on and the node itself do
// not count.
func TestFollowCoreRank(t *testing.T) {
	f := newFollowCore("c", "mine", 4)
	f.heard(heartbeatOf(2, "l", 0,
		followerInfo{ID: "l", ApplyIndex: 50}, // the leader, if it lists itself
		followerInfo{ID: "c", ApplyIndex: 10},
		followerInfo{ID: "a", ApplyIndex: 10}, // a tie, a lower ID
		followerInfo{ID: "d", ApplyIndex: 10}, // a tie, a higher ID
		followerInfo{ID: "e", ApplyIndex: 11}, // ahead at 10, a tie at 11 (a higher ID)
		followerInfo{ID: "b", ApplyIndex: 9}))
	for _, tc := range []struct {
		mine uint64
		want int
	}{{10, 2}, {11, 0}, {12, 0}, {9, 4}, {0, 4}} {
		if got := f.rank(tc.mine); got != tc.want {
			t.Errorf("rank at %d: %d, want %d", tc.mine, got, tc.want)
		}
	}
	if got := rankDelay(3, 250); got != 750 {
		t.Errorf("rankDelay(3, 250) = %d", got)
	}
}

// TestFollowCoreRanksDistinctExhaustive: every follower of one heartbeat,
// ranking itself by its own apply index, gets a distinct rank from 0 up,
// whatever the apply indexes (ties included): no two wait the same time.
func TestFollowCoreRanksDistinctExhaustive(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	applied := make([]uint64, len(ids))
	for {
		var fs []followerInfo
		for i, id := range ids {
			fs = append(fs, followerInfo{ID: id, ApplyIndex: applied[i]})
		}
		var ranks []int
		for i, id := range ids {
			f := newFollowCore(id, "mine", 4)
			f.heard(heartbeatOf(1, "l", 0, fs...))
			ranks = append(ranks, f.rank(applied[i]))
		}
		slices.Sort(ranks)
		for i, r := range ranks {
			if r != i {
				t.Fatalf("apply indexes %v: ranks %v", applied, ranks)
			}
		}
		i := 0
		for ; i < len(applied); i++ {
			if applied[i]++; applied[i] < 3 {
				break
			}
			applied[i] = 0
		}
		if i == len(applied) {
			return
		}
	}
}

// TestFollowCoreDuplicateReported: a process using the node's ID is
// reported once, and again only when another one appears.
func TestFollowCoreDuplicateReported(t *testing.T) {
	f := newFollowCore("a", "mine", 4)
	one, two := &DuplicateIDError{Incarnation: "1"}, &DuplicateIDError{Incarnation: "2"}
	for i, tc := range []struct {
		dup   *DuplicateIDError
		first bool
	}{{one, true}, {one, false}, {two, true}, {one, true}} {
		if got := f.reportDuplicate(tc.dup); got != tc.first {
			t.Errorf("report %d: first %v, want %v", i, got, tc.first)
		}
	}
}
