package election

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/store"
)

// Errors returned by Repair.
var (
	// ErrTermFloorTooLow: the floor is below the term the record holds, so
	// the terms handed out would go back.
	ErrTermFloorTooLow = errors.New("election: the term floor is below the lock's term")
	// ErrLockInUse: the record changed while Repair watched it: a live
	// member holds the lock and renews it.
	ErrLockInUse = errors.New("election: the lock record changed while waiting to repair it")
)

// RepairOptions tunes Repair.
type RepairOptions struct {
	// Lease is how long a record that is not released must stay unchanged
	// before Repair replaces it, so that a holder still renewing it is not
	// deposed. Pass the largest LeaderTimeout of the group; the holder's
	// own lease, when the record says it, is used if longer. Default
	// DefaultLeaderTimeout.
	Lease time.Duration
	// Clock is the time source. Default the system clock.
	Clock Clock
}

// Repair makes the lock at key usable again after its record became one
// that no member takes over (Status.RecordProblem, ErrUnreadableRecord):
// it replaces the record with a released one of term termFloor, so the
// next member to take the lock gets termFloor+1. Choose a floor at least as
// high as every term the lock ever handed out (the highest term the systems
// that check the fencing token have seen).
//
// A record that is not released is replaced only after it has stayed
// unchanged for the lease (see RepairOptions.Lease): a member that still
// renews it makes Repair return ErrLockInUse, and must be stopped first.
// Repair refuses a floor below the term it can read (ErrTermFloorTooLow),
// a floor of 0, and the largest term, which leaves no next term: a lock
// whose term reached it cannot be used again. It never replaces another
// kind of record (ErrForeignRecord): a group's leader_state.json, a
// shard-lease record, a record of a kind it does not know. An absent
// record is created released with the floor. The write is a
// compare-and-swap on the version read, so a concurrent change makes
// Repair fail rather than overwrite it.
func Repair(ctx context.Context, st *store.Store, key string, termFloor uint64, opts RepairOptions) error {
	if termFloor == 0 || termFloor == math.MaxUint64 {
		return fmt.Errorf("election: repair %s: term floor %d: must be between 1 and %d", key, termFloor, uint64(math.MaxUint64-1))
	}
	if opts.Lease < 0 {
		return fmt.Errorf("election: repair %s: lease %v: must not be negative", key, opts.Lease)
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLeaderTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	rec := Record{Term: termFloor, Released: true, Session: "repair-" + rand.Text()[:16], Nonce: newNonce(), LastUpdated: opts.Clock.Wall()}
	data, version, err := st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		_, err = store.PutResolved(ctx, st, key, rec.Encode(), store.IfAbsent(), store.ResolveOptions{})
		if err != nil {
			return fmt.Errorf("election: repair %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("election: repair %s: %w", key, err)
	}
	old, derr := DecodeRecord(data)
	if errors.Is(derr, ErrForeignRecord) {
		// Not a lock at all: replacing it would destroy what it is.
		return fmt.Errorf("election: repair %s: %w", key, derr)
	}
	lease := opts.Lease
	if derr == nil {
		if old.Term > termFloor {
			return fmt.Errorf("election: repair %s: %w: floor %d, the record holds term %d", key, ErrTermFloorTooLow, termFloor, old.Term)
		}
		lease = max(lease, leaseOf(old))
	}
	if derr != nil || !old.Released {
		t := opts.Clock.NewTimer(lease)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("election: repair %s: %w", key, ctx.Err())
		case <-t.C():
		}
		_, now, err := st.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("election: repair %s: %w: it was deleted", key, ErrLockInUse)
		case err != nil:
			return fmt.Errorf("election: repair %s: %w", key, err)
		case now != version:
			return fmt.Errorf("election: repair %s: %w (within %v): stop the member that holds it, then repair", key, ErrLockInUse, lease)
		}
	}
	rec.LastUpdated = opts.Clock.Wall()
	if _, err := store.PutResolved(ctx, st, key, rec.Encode(), store.IfMatch(version), store.ResolveOptions{}); err != nil {
		return fmt.Errorf("election: repair %s: %w", key, err)
	}
	return nil
}
