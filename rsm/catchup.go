package rsm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
)

// resetReplica returns the machines to their empty state; the next
// catch-up rebuilds them from the store. A deposed leader does this: it may
// have applied entries that were never committed.
func (n *Node) resetReplica() {
	n.rep.do(func(r *replica) {
		if err := r.reset(); err != nil {
			n.log.Error("reset of the state machines failed", "err", err)
		}
	})
}

// catchUp brings the replica up to the end of the store's log, stopping at
// the first hole (rule 2: replicas apply strictly in index order, a hole
// waits), reading it under rule 8 (readLog). It returns the newest
// snapshot's end index and version. The snapshot is read whole only if it
// is ahead of the replica, and at most once per version: the snapshot
// reads after the log's chunks are listings unless it changed.
func (n *Node) catchUp(ctx context.Context) (snapEnd uint64, snapVersion string, err error) {
	start := time.Now()
	defer func() { n.m.catchUp.WithLabelValues(n.group).Observe(time.Since(start).Seconds()) }()
	end, version, snap, err := n.gs.snap.End(ctx)
	if err != nil {
		return 0, "", err
	}
	if err := n.loadSnapshotAt(ctx, end, snap); err != nil {
		return 0, "", err
	}
	const chunk = 100
	for {
		applied := n.rep.index()
		c, err := n.readLog(ctx, applied+1, 0, chunk)
		if err != nil {
			return 0, "", err
		}
		if c.snapEnd > end {
			end, version = c.snapEnd, c.version
		}
		if c.superseded {
			if err := n.loadSnapshotAt(ctx, c.snapEnd, c.snap); err != nil {
				return 0, "", err
			}
			continue
		}
		n.rep.do(func(r *replica) {
			for _, e := range c.entries {
				if e.Index != r.applied+1 {
					break
				}
				r.apply(e)
			}
			n.m.applyIndex.WithLabelValues(n.group).Set(float64(r.applied))
		})
		if len(c.entries) < chunk {
			// Read again: a heartbeat may have applied past the log's
			// end read.
			h := n.rep.index() + 1
			if err := n.checkHole(ctx, h, end); err != nil {
				return 0, "", err
			}
			return end, version, nil
		}
	}
}

// loadSnapshotAt restores the snapshot ending at end if it is ahead of the
// replica: snap if the caller read it whole, else read now. A manifest
// whose objects were collected while they were read (a newer snapshot
// replaced it) is read again.
func (n *Node) loadSnapshotAt(ctx context.Context, end uint64, snap *snapshot.Stored) error {
	for {
		applied := n.rep.index()
		if end == 0 || end <= applied {
			return nil
		}
		if snap == nil {
			var err error
			if snap, _, err = n.gs.snap.Read(ctx); err != nil {
				return err
			}
		}
		err := n.loadSnapshot(ctx, snap)
		if !errors.Is(err, snapshot.ErrMoved) {
			return err
		}
		n.log.Info("the snapshot changed while it was read; reading it again", "end", snap.EndIndex)
		snap = nil
	}
}

// readLog reads the log under rule 8 (groupStore.readLog), counting the
// reads and reporting a corrupt object.
func (n *Node) readLog(ctx context.Context, from, to uint64, limit int) (logChunk, error) {
	c, err := n.gs.readLog(ctx, from, to, limit)
	if err != nil {
		n.noteCorrupt(err)
		return c, err
	}
	n.m.logReads.WithLabelValues(n.group).Add(float64(c.read))
	return c, nil
}

// loadSnapshot restores snap if it is ahead of the replica. A manifest's
// base is read only if the replica has not reached it; then the entries of
// its segments after the replica's index are applied. The load is one job
// of the replica's goroutine, which reads the snapshot's objects itself:
// nothing is applied between the base and the segments.
func (n *Node) loadSnapshot(ctx context.Context, snap *snapshot.Stored) error {
	if snap == nil {
		return nil
	}
	start := time.Now()
	var (
		r      *Restore
		loaded bool
		err    error
	)
	if !n.rep.do(func(rep *replica) { r, loaded, err = n.loadSnapshotInto(ctx, rep, snap) }) {
		return ErrClosed
	}
	if err != nil || !loaded {
		return err
	}
	took := time.Since(start)
	n.m.snapshotLoad.WithLabelValues(n.group).Observe(took.Seconds())
	n.setSnapshot(snap.EndIndex, snap.Man.Stats())
	// A restart's time is mostly this load: what it read says why.
	if r != nil {
		n.log.Info("snapshot loaded", "end", snap.EndIndex, "base_bytes", r.Base, "segment_bytes", r.Segments, "took", took)
	} else {
		n.log.Info("snapshot loaded", "end", snap.EndIndex, "took", took)
	}
	return nil
}

// loadSnapshotInto is loadSnapshot's job, on the replica's goroutine: it
// reports whether snap was ahead of rep, and the sizes read from a
// manifest.
func (n *Node) loadSnapshotInto(ctx context.Context, rep *replica, snap *snapshot.Stored) (*Restore, bool, error) {
	if snap.EndIndex <= rep.applied {
		return nil, false, nil
	}
	if snap.Man == nil {
		return nil, true, rep.restoreStored(snap)
	}
	r := &Restore{Segments: snap.Man.SegBytes}
	if rep.applied < snap.Man.Base.Index {
		r.Base = snap.Man.Base.Bytes
	}
	n.restoring.Store(r)
	defer n.restoring.Store(nil)
	err := n.gs.snap.Load(ctx, snap, rep.applied, func(cs *snapshot.Stream) error {
		err := rep.restoreFrom(cs.Head, cs.Machine)
		if err == nil {
			if err = cs.Finish(); err != nil {
				err = errors.Join(err, rep.reset())
			}
		}
		return err
	}, func(e *rsmpb.Entry, prepared []any) error {
		rep.applyPrepared(e, prepared)
		return nil
	})
	n.m.applyIndex.WithLabelValues(n.group).Set(float64(rep.applied))
	return r, true, err
}

// checkHole is called where a catch-up found the log's end at index h
// (after a snapshot ending at snapEnd, or none). The end is a hole an
// operator made, not the log's end or a write that failed, if h is at or
// below a commit index known to this node, or if an entry after it says
// h was committed before it was written (its commit hint). With no
// snapshot and the log starting later, the snapshot is what is missing.
// Rule 12 (docs/rsm.md): a missing object is refused, never absorbed.
func (n *Node) checkHole(ctx context.Context, h, snapEnd uint64) error {
	n.mu.Lock()
	seen := n.fc.commitSeen
	n.mu.Unlock()
	missing := func(after []uint64, why string, args ...any) error {
		key := logKey(n.group, h)
		if snapEnd == 0 && h == 1 && len(after) > 0 && after[0] > 2 {
			key = n.gs.key(snapshotKey)
			why = fmt.Sprintf("the log starts at %d, and no snapshot holds the entries before it; ", after[0]) + why
		}
		return &CorruptError{Key: key, Err: fmt.Errorf("%w: "+why, append([]any{errMissing}, args...)...)}
	}
	if h <= seen {
		return missing(nil, "index %d is below the commit index %d", h, seen)
	}
	after, err := n.gs.listLog(ctx, h, 1000)
	if err != nil || len(after) == 0 {
		return err
	}
	last := after[len(after)-1]
	e, err := n.gs.readEntry(ctx, last)
	if errors.Is(err, store.ErrNotFound) {
		return nil // truncated since: the next catch-up reads the snapshot
	}
	if err != nil {
		return err
	}
	if e.Commit >= h {
		return missing(after, "index %d is missing, but entry %d says the log was committed up to %d when it was written", h, last, e.Commit)
	}
	return nil
}

// checkGroupEmpty fails if the group has objects other than
// leader_state.json: rule 12, a log or snapshot without leader_state.json
// means the group's highest term is lost.
func (n *Node) checkGroupEmpty(ctx context.Context) error {
	idx, err := n.gs.listLog(ctx, 0, 1)
	if err != nil {
		return err
	}
	snapEnd, _, _, err := n.gs.snap.End(ctx)
	if err != nil {
		return err
	}
	what := ""
	switch {
	case len(idx) > 0:
		what = fmt.Sprintf("the log holds index %d", idx[0])
	case snapEnd > 0:
		what = fmt.Sprintf("a snapshot ends at %d", snapEnd)
	default:
		return nil
	}
	// leader_state.json is created before anything else: if it is there
	// now, another node created the group since our first read.
	if _, _, err := n.gs.readLeaderState(ctx); !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return &CorruptError{Key: n.gs.key(leaderStateKey), Err: fmt.Errorf("%w, but %s: the group's highest term is lost", errMissing, what)}
}

// logEnd returns the highest log index after `after`; 0 if there is none.
func (n *Node) logEnd(ctx context.Context, after uint64) (uint64, error) {
	end := uint64(0)
	for {
		idx, err := n.gs.listLog(ctx, after, 1000)
		if err != nil {
			return 0, err
		}
		if len(idx) == 0 {
			return end, nil
		}
		end = idx[len(idx)-1]
		if len(idx) < 1000 {
			return end, nil
		}
		after = end
	}
}
