package rsm

import (
	"sync"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// maybeSnapshot starts a snapshot when one is due: a segment of the
// entries confirmed since the stored snapshot, or a new base when the
// segments have grown (window.wantsBase). A base is captured here and
// written once every index it covers is confirmed
// (window.snapshotToWrite); on the replica's goroutine only the capture
// runs (constant time for a machine that implements Capturer), the
// serialization runs in the snapshot's worker.
func (l *leaderRun) maybeSnapshot() {
	if !l.w.snapshotDue() {
		return
	}
	if !l.w.wantsBase() {
		l.w.holdSegment()
		return
	}
	l.holdBase()
}

// snapshotNow takes a snapshot of every confirmed index (packNext): a
// segment, or a base where the stored snapshot calls for one.
func (l *leaderRun) snapshotNow() {
	if !l.w.wantsBase() {
		l.w.holdSegmentTo(l.w.confirmed)
		return
	}
	if !l.holdBase() {
		l.w.packDone(false, time.Now()) // not again at once
	}
}

// holdBase captures the state as a base, written once confirmed; it
// reports whether the capture succeeded.
func (l *leaderRun) holdBase() bool {
	n := l.n
	var snap *snapshot.Captured
	var err error
	n.rep.do(func(r *replica) { snap, err = r.capture() })
	if err != nil {
		n.log.Error("snapshot failed", "err", err)
		return false
	}
	l.w.hold(snap)
	return true
}

// snapshot writes j over the stored snapshot, then truncates the log it
// covers (rule 7, docs/rsm.md: the snapshot object only moves forward, by
// compare-and-swap, and the log is deleted only up to a stored snapshot's
// end). A worker.
func (l *leaderRun) snapshot(j *snapshot.Job) {
	n := l.n
	start := time.Now()
	out, err := n.gs.snap.Write(l.ctx, j, snapshot.Writer{ID: n.host.cfg.ID, Term: l.term, Nonce: l.segNonce})
	n.m.snapshotUpload.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
	if err == nil {
		n.setSnapshot(out.End, out.Stats())
	}
	if err != nil {
		// It may have left objects behind. Set before the report: once
		// the loop has it, the next snapshot's worker may start.
		l.sweep = true
	}
	l.report(snapshotResult{end: out.End, version: out.Version, stats: out.Stats(), err: err})
	if err != nil {
		return
	}
	dropped, swept, gcErr := n.gs.snap.Collect(l.ctx, out.Prev, out.Man, l.term, l.sweep || j.Base != nil)
	l.sweep = gcErr != nil
	if gcErr != nil && l.ctx.Err() == nil {
		n.log.Warn("snapshot: deleting objects no longer referenced failed; the next snapshot retries", "err", gcErr)
	}
	n.log.Debug("snapshot written", "start", j.From, "end", out.End, "base", j.Base != nil, "deleted", dropped+swept)
	l.truncate(j.PrevEnd+1, out.End)
	l.report(truncated{})
}

// truncate deletes the log entries a snapshot covers (rule 7: only after
// the snapshot that covers them is stored; a stale writer's create on a
// slot emptied here is never acknowledged, rule 5(b), nor read, rule 8).
// An interrupted truncation is finished by the next leader (serve).
func (l *leaderRun) truncate(from, to uint64) {
	n := l.n
	start := time.Now()
	defer func() { n.m.logTruncate.WithLabelValues(n.group).Observe(time.Since(start).Seconds()) }()
	// List from the start of the log, not from `from`: what an earlier
	// truncation left behind goes too. One page is enough for this
	// snapshot's entries plus some leftovers; the rest go next time.
	idx, err := n.gs.listLog(l.ctx, 0, int(min(to-from+1, 10000))+64)
	if err != nil {
		if l.ctx.Err() == nil {
			n.log.Warn("truncation: list failed", "err", err)
		}
		return
	}
	// Deletes are independent: a few at a time, so truncation keeps up
	// with the log on a slow store. A packed log (file://) takes the
	// deletes waiting together in one write: all at once, they cost a
	// sync or two rather than one per eight, each of which a log write
	// would wait behind.
	workers := 8
	if n.gs.logPacked.Load() {
		workers = packedDeleteWorkers
	}
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := n.gs.deleteEntry(l.ctx, i); err != nil && l.ctx.Err() == nil {
					n.log.Warn("truncation: delete failed; the next truncation retries", "index", i, "err", err)
				}
			}
		}()
	}
	for _, i := range idx {
		if i > to {
			break
		}
		select {
		case work <- i:
		case <-l.ctx.Done():
		}
		if l.ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
}
