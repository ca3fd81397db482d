package rsm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// takeover loads the log, writes the seal and confirms the term. Only after
// it returns nil does the leader serve (rule 3, takeover: docs/rsm.md; a
// seal counts only if a snapshot read after it still ends below it, and a
// read of leader_state.json after it still shows our term). Every attempt after the first
// starts from an empty replica: what a failed attempt applied (entries a
// snapshot has since covered, a seal on an emptied slot) must not leak
// into the next.
func (l *leaderRun) takeover() error {
	n := l.n
	for attempt := 0; ; attempt++ {
		if err := l.ctx.Err(); err != nil {
			return context.Cause(l.ctx)
		}
		if attempt > 0 {
			if err := sleepCtx(l.ctx, n.gs.backoff(min(attempt, 4))); err != nil {
				return context.Cause(l.ctx)
			}
			n.resetReplica()
		}
		snapEnd, snapVersion, err := n.catchUp(l.ctx)
		if err != nil {
			// A corrupt or missing object is refused: no seal over it,
			// requests fail with it, and the attempt is retried in case
			// the object is repaired.
			n.recordProblem(err)
			n.log.Warn("takeover: catch-up failed", "term", l.term, "err", err)
			continue
		}
		var maxTerm, applied uint64
		n.rep.do(func(r *replica) { maxTerm, applied = r.maxTerm, r.applied })
		if maxTerm > l.term {
			return fmt.Errorf("%w: the log holds term %d, above ours (%d)", errDeposed, maxTerm, l.term)
		}
		// The seal: a no-op of our term at the first index not yet written.
		from := applied + 1
		index, err := l.seal(from)
		if err != nil {
			if errors.Is(err, errDeposed) {
				return err
			}
			// A store that reports its own data damaged (a missing pack
			// segment) is refused as a corrupt object is.
			n.recordProblem(err)
			n.log.Warn("takeover: seal write failed", "index", index, "err", err)
			continue
		}
		// Slots taken before the seal were read from the store, and the
		// seal itself may have landed on a slot a truncation emptied: rule
		// 8 over everything from `from` on.
		end, version, _, err := n.gs.snap.End(l.ctx)
		if err != nil {
			n.noteCorrupt(err)
			continue
		}
		if supersedes(end, from) {
			n.log.Info("takeover: a snapshot moved past what was read; taking over again from it", "seal", index, "snapshot_end", end)
			continue
		}
		if end > 0 {
			snapEnd, snapVersion = end, version
		}
		if err := l.confirmOnce(); err != nil {
			return err
		}
		l.w.next, l.w.confirmed = index+1, index
		l.w.snapEnd, l.w.snapVersion = snapEnd, snapVersion
		st := n.gs.snap.Stats(snapVersion)
		l.w.snapBase, l.w.snapSegs, l.w.snapSegN = st.Base, st.Segs, st.Count
		l.confirmed.Store(index)
		n.log.Info("leading", "term", l.term, "seal", index)
		return nil
	}
}

// seal writes a no-op of our term at the first index from `from` not yet
// written, applying what it finds in the slots before it (rule 3). It
// returns the seal's index. The seal fills a hole left by a pipelined
// stale write rather than skipping it, and counts only if it is itself
// valid: a running highest valid term above ours deposes us before it.
func (l *leaderRun) seal(from uint64) (uint64, error) {
	n := l.n
	for index := from; ; index++ {
		// Everything before the seal is committed: every later leader
		// applies it (rule 3).
		seal := &rsmpb.Entry{Index: index, Term: l.term, Writer: n.host.cfg.ID, Nonce: record.NewNonce(), Noop: true, Commit: index - 1, Group: n.group,
			Settings: n.sealSettings()} // a new group's settings (session.go)
		found, err := n.gs.createEntry(l.ctx, seal)
		if err != nil {
			return index, err // unknown: read the log again from the top
		}
		if found == nil {
			n.rep.do(func(r *replica) { r.apply(seal) })
			return index, nil
		}
		var valid bool
		var maxTerm uint64
		n.rep.do(func(r *replica) {
			valid, _ = r.apply(found)
			maxTerm = r.maxTerm
		})
		if valid && maxTerm > l.term {
			return index, fmt.Errorf("%w: met term %d at index %d before our seal", errDeposed, maxTerm, index)
		}
	}
}

// confirmOnce reads leader_state.json and fails unless it still shows our term.
func (l *leaderRun) confirmOnce() error {
	n := l.n
	start := time.Now()
	ls, _, err := n.gs.readLeaderState(l.ctx)
	n.m.leaderCheck.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
	n.m.confirmReads.WithLabelValues(n.group).Inc()
	if err != nil {
		n.noteCorrupt(err)
		return err
	}
	if ls.Term != l.term || ls.LeaderID != n.host.cfg.ID {
		n.observeLeader(ls)
		return fmt.Errorf("%w: leader_state.json shows term %d of %s", errDeposed, ls.Term, ls.LeaderID)
	}
	return nil
}
