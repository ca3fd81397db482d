package rsm

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
)

// ErrHistoryTruncated: the group has a snapshot, so the beginning of its
// log may be deleted (rule 7), and with it the commands applied before
// the snapshot's end: Replay has no whole history to give.
var ErrHistoryTruncated = errors.New("rsm: the group's log was truncated by a snapshot")

// Replay applies the log of group, as st holds it, to machines, which
// must be in their empty state and named as the group's: every entry
// from index 1 up to the first index the log does not hold, under the
// rules every replica applies entries by (validity, rule 1; sessions,
// rule 9). Each machine's Apply is therefore called with exactly the
// commands the group applied to it, in the order it applied them: a
// deposed leader's late entries and a retried command's second copy are
// skipped as every node skips them. Replay reads the log as a node
// catching up does, but joins no group and writes nothing; it is for
// tools and tests that check a group's whole history, so the group must
// never have written a snapshot (SnapshotThreshold above the number of
// entries): otherwise it fails with ErrHistoryTruncated. It returns the
// last index applied; entries written while it reads may or may not be
// among them.
func Replay(ctx context.Context, st *store.Store, group string, machines map[string]StateMachine) (uint64, error) {
	o := Options{}.withDefaults()
	rep, err := newReplica(machines, o.MaxDedupClients)
	if err != nil {
		return 0, err
	}
	gs := newGroupStore(st, group, o.Retry, o.StoreTimeout, snapshot.Options{})
	const chunk = 100
	for {
		c, err := gs.readLog(ctx, rep.applied+1, 0, chunk)
		if err != nil {
			return rep.applied, err
		}
		if c.snapEnd > 0 {
			return rep.applied, fmt.Errorf("%w: replaying group %q, a snapshot ends at index %d", ErrHistoryTruncated, group, c.snapEnd)
		}
		for _, e := range c.entries {
			rep.apply(e)
		}
		if len(c.entries) < chunk {
			return rep.applied, nil
		}
	}
}
