package main

import (
	"errors"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/opsserver"
)

// electionView is the readiness of an election member (tenure elect and
// tenure run): ready while it leads, or follows a leader it knows.
func electionView(el *election.Elector) func(opsserver.Status) opsserver.Status {
	return func(s opsserver.Status) opsserver.Status {
		return electionStatusView(el.Status(), el.RecordProblem())(s)
	}
}

// electionStatusView is electionView of one status and record problem.
func electionStatusView(es election.Status, problem error) func(opsserver.Status) opsserver.Status {
	return func(s opsserver.Status) opsserver.Status {
		s.Election = &es
		s.Term = es.Term
		switch {
		case es.Leader:
			s.Role, s.Leader = "leader", es.ServerID
		default:
			s.Role = "follower"
			if !es.Released {
				s.Leader = es.LeaderID
			}
		}
		switch {
		case es.DuplicateServerID:
			s.Ready, s.Reason = false, "another process takes part in this election with the same --id"
		case s.Role == "leader":
		case errors.Is(problem, election.ErrForeignRecord):
			// Not a lock at all: no repair replaces it.
			s.Ready, s.Reason = false, "the lock's key holds another kind of record, never taken over or written: "+es.RecordProblem+" (give the lock a key of its own)"
		case es.RecordProblem != "":
			// No member can take the lock over until it is repaired:
			// whoever it names, the group has no leader it can follow.
			s.Ready, s.Reason = false, "the lock cannot be taken over: "+es.RecordProblem+" (an operator runs tenure lock repair --term-floor N LOCK_URL)"
		case es.LeaderNotLeading:
			// The record still names it, but it said it does not lead:
			// no one leads until its lease lapses or it is released.
			s.Ready, s.Reason = false, "no leader: "+s.Leader+" answered that it does not lead; a member takes the lock when its lease lapses"
		case s.Leader == "":
			s.Ready, s.Reason = false, "no leader known"
		case s.Leader == es.ServerID:
			// The record names this member, which does not lead: a
			// lease it lost, not yet taken by anyone.
			s.Ready, s.Reason = false, "no leader known (the lock names this member, whose lease lapsed)"
		}
		return s
	}
}
