package rsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
)

// groupStore reads and writes one group's objects. Every write is
// conditional; ambiguous writes are settled by reading back their nonce.
type groupStore struct {
	st      *store.Store
	group   string
	retry   RetryOptions
	timeout time.Duration // per store call; 0 means none
	now     func() time.Time

	// snap is the group's snapshot: the snapshot object, its manifest and
	// the objects it references.
	snap *snapshot.Store

	// logPacked is whether the store keeps the log packed, as packLog
	// last found.
	logPacked atomic.Bool

	// lastLeaderState is the last leader_state.json decoded, with its
	// bytes: a leader's confirmation reads find the same bytes round after
	// round, so only a change is decoded again.
	lastLeaderState atomic.Pointer[decodedLeaderState]

	// named is the leader of the highest term read or written in
	// leader_state.json: a Synchronize is taken only from it.
	named namedLeader
}

// newGroupStore returns the store of group in st, with its snapshot's
// store, whose options o gives (its store calls, log reads and bounds
// are this store's).
func newGroupStore(st *store.Store, group string, retry RetryOptions, timeout time.Duration, o snapshot.Options) *groupStore {
	g := &groupStore{st: st, group: group, retry: retry, timeout: timeout, now: time.Now}
	o.Do, o.Resolve, o.ReadLog, o.EntryMax = g.do, g.resolve, g.readConfirmed, entryMax
	g.snap = snapshot.New(st, group, o)
	return g
}

// decodedLeaderState is leader_state.json's bytes and what they decode to.
type decodedLeaderState struct {
	data []byte
	ls   leaderState
}

// resolve returns the options of a write settled by reading back a key
// that holds at most max bytes.
func (g *groupStore) resolve(owns func([]byte) bool, max int64) store.ResolveOptions {
	return store.ResolveOptions{Attempts: g.retry.MaxAttempts, Backoff: g.backoff, Owns: owns, AttemptTimeout: g.timeout, MaxSize: max}
}

func (g *groupStore) key(name string) string { return g.group + "/" + name }

func (g *groupStore) backoff(n int) time.Duration {
	d := g.retry.BaseDelay << (n - 1)
	if d > g.retry.MaxDelay || d <= 0 {
		d = g.retry.MaxDelay
	}
	return store.Jitter(d, 0.2)
}

// do runs a store call with S2C's retries: retryable errors are retried up
// to MaxAttempts with exponential backoff, throttling adds ThrottleDelay.
func (g *groupStore) do(ctx context.Context, call func(ctx context.Context) error) error {
	var err error
	for n := 0; n < g.retry.MaxAttempts; n++ {
		if n > 0 {
			d := g.backoff(n)
			if errors.Is(err, store.ErrThrottled) {
				d += g.retry.ThrottleDelay
			}
			if serr := sleepCtx(ctx, d); serr != nil {
				return err
			}
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if g.timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, g.timeout)
		}
		err = call(actx)
		cancel()
		if err == nil || !store.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// readLeaderState reads leader_state.json within leaderStateMax bytes.
// Rule 12 (docs/rsm.md): one that does not decode, fails its checksum or
// names another group or another kind of record is refused, a
// *CorruptError naming it; never taken over or written over.
func (g *groupStore) readLeaderState(ctx context.Context) (ls leaderState, version string, err error) {
	var data []byte
	key := g.key(leaderStateKey)
	err = g.do(ctx, func(ctx context.Context) error {
		var e error
		data, version, e = g.st.GetLimited(ctx, key, leaderStateMax)
		return e
	})
	if err != nil {
		return leaderState{}, "", record.TooLarge(err, key, "leader_state.json", leaderStateMax)
	}
	// The read above is the confirmation (every round reads the store);
	// only decoding identical bytes again is skipped. A cached decode was
	// valid and of this group, so it needs no check.
	if last := g.lastLeaderState.Load(); last != nil && bytes.Equal(last.data, data) {
		ls = last.ls
		ls.Followers = slices.Clone(ls.Followers)
		g.named.note(ls)
		return ls, version, nil
	}
	ls, err = decodeLeaderState(data)
	if err == nil && ls.Group != "" && ls.Group != g.group {
		err = fmt.Errorf("it belongs to group %q", ls.Group)
	}
	if err != nil {
		return leaderState{}, "", &CorruptError{Key: g.key(leaderStateKey), Err: err}
	}
	kept := ls
	kept.Followers = slices.Clone(ls.Followers) // the caller may change its copy
	g.lastLeaderState.Store(&decodedLeaderState{data: data, ls: kept})
	g.named.note(ls)
	return ls, version, nil
}

// writeLeaderState writes ls if the current version is prev ("" for
// absent), settling ambiguous outcomes. ErrPreconditionFailed means another
// write won.
func (g *groupStore) writeLeaderState(ctx context.Context, ls leaderState, prev string) (string, error) {
	ls.Group = g.group
	data := encodeLeaderState(ls, g.now())
	key := g.key(leaderStateKey)
	if len(data) > leaderStateMax {
		return "", record.RefuseWrite(key, fmt.Sprintf("leader_state.json listing %d followers", len(ls.Followers)), len(data), leaderStateMax)
	}
	cond := store.IfAbsent()
	if prev != "" {
		cond = store.IfMatch(prev)
	}
	v, err := store.PutResolved(ctx, g.st, key, data, cond, g.resolve(nil, leaderStateMax))
	if err == nil {
		g.named.note(ls)
	}
	return v, err
}

// readEntry returns the entry at index; store.ErrNotFound if absent.
// Rule 12 and bounded reads (docs/rsm.md): an entry larger than entryMax,
// corrupt, of another kind or of another group is refused, a
// *CorruptError naming it, and never applied.
func (g *groupStore) readEntry(ctx context.Context, index uint64) (*rsmpb.Entry, error) {
	var data []byte
	key := logKey(g.group, index)
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		data, _, e = g.st.GetLimited(ctx, key, int64(entryMax))
		return e
	})
	if err != nil {
		return nil, record.TooLarge(err, key, "log entry", int64(entryMax))
	}
	e, err := record.DecodeEntry(data, index)
	if err == nil && e.Group != "" && e.Group != g.group {
		err = fmt.Errorf("it belongs to group %q", e.Group)
	}
	if err != nil {
		return nil, &CorruptError{Key: key, Err: err}
	}
	return e, nil
}

// createEntry writes e at its index if the slot is empty. It returns nil if
// e landed, or the entry found in the slot when another writer was first
// (found may be nil if the slot was emptied since: truncated). An error
// means the outcome is unknown.
func (g *groupStore) createEntry(ctx context.Context, e *rsmpb.Entry) (found *rsmpb.Entry, err error) {
	data, err := record.EncodeEntry(e)
	if err != nil {
		return nil, err
	}
	key := logKey(g.group, e.Index)
	if len(data) > entryMax {
		return nil, record.RefuseWrite(key, "log entry", len(data), entryMax)
	}
	_, err = store.PutResolved(ctx, g.st, key, data, store.IfAbsent(), g.resolve(func(stored []byte) bool {
		o, derr := record.DecodeEntry(stored, e.Index)
		return derr == nil && bytes.Equal(o.Nonce, e.Nonce)
	}, int64(entryMax)))
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, store.ErrPreconditionFailed) || store.IsAmbiguous(err) {
		return nil, err
	}
	other, rerr := g.readEntry(ctx, e.Index)
	switch {
	case errors.Is(rerr, store.ErrNotFound):
		return nil, nil
	case rerr != nil:
		return nil, rerr
	case bytes.Equal(other.Nonce, e.Nonce):
		return nil, nil
	}
	return other, nil
}

// logChunk is one read of the log under rule 8 (groupStore.readLog).
type logChunk struct {
	entries    []*rsmpb.Entry // contiguous from the first index asked for; nil if superseded
	read       int            // entries read from the store, kept or not
	snapEnd    uint64         // the snapshot's end index, read after the entries; 0 for none
	version    string
	snap       *snapshot.Stored // the snapshot, if it was read whole: it was new to this store
	superseded bool             // the snapshot reached an index asked for: load it instead
}

// supersedes is rule 8's test: a snapshot read after log entries from
// `from` on ends at or past from, so what was read may include a stale
// writer's late create on a slot the snapshot's truncation emptied. What
// was read is discarded and the snapshot loaded instead.
func supersedes(snapEnd, from uint64) bool {
	return snapEnd > 0 && snapEnd >= from
}

// readConfirmed returns the entries from..to, every one of them confirmed,
// read under rule 8 (readLog): those of a segment the leader's cache no
// longer holds (snapshot.Options.ReadLog).
func (g *groupStore) readConfirmed(ctx context.Context, from, to uint64) ([]*rsmpb.Entry, error) {
	c, err := g.readLog(ctx, from, to, int(to-from+1))
	if err != nil {
		return nil, err
	}
	if c.superseded {
		return nil, fmt.Errorf("a snapshot ending at %d was written meanwhile", c.snapEnd)
	}
	if uint64(len(c.entries)) != to-from+1 {
		return nil, fmt.Errorf("confirmed entry %d is missing from the log", from+uint64(len(c.entries)))
	}
	return c.entries, nil
}

// readLog is rule 8 of docs/rsm.md, the one way entries are read from the
// log (catch-up, takeover, follower synchronization): entries from `from`
// up to `to` (0: no bound), at most limit, stopping at the first missing
// index; then the snapshot's end index, after them (snapshotEnd). If the
// snapshot has reached `from` the entries are dropped and the chunk says
// so.
func (g *groupStore) readLog(ctx context.Context, from, to uint64, limit int) (logChunk, error) {
	var c logChunk
	for i := from; (to == 0 || i <= to) && len(c.entries) < limit; i++ {
		e, err := g.readEntry(ctx, i)
		if errors.Is(err, store.ErrNotFound) {
			break // the end, a hole, or truncated under us: the snapshot read below tells
		}
		if err != nil {
			return logChunk{}, err
		}
		c.entries = append(c.entries, e)
	}
	c.read = len(c.entries)
	end, version, snap, err := g.snap.End(ctx)
	if err != nil {
		return logChunk{}, err
	}
	c.snapEnd, c.version, c.snap = end, version, snap
	if supersedes(end, from) {
		c.entries, c.superseded = nil, true
	}
	return c, nil
}

// packLog asks the store to keep the log's entries together
// (store.Store.Pack): on file:// they are then appended to segment files,
// one flush per entry where a file each costs two. The store packs an
// empty log only, so a group whose log is stored as files keeps it so
// until a truncation empties it; whether the log is packed is the store's
// state, the same for every node.
func (g *groupStore) packLog(ctx context.Context) (bool, error) {
	var packed bool
	err := g.do(ctx, func(ctx context.Context) error {
		var e error
		packed, e = g.st.Pack(ctx, g.group+"/"+logDir)
		return e
	})
	g.logPacked.Store(packed)
	return packed, err
}

// listLog returns the indexes present in the log after index `after`, in
// order, up to limit (0: all).
func (g *groupStore) listLog(ctx context.Context, after uint64, limit int) ([]uint64, error) {
	prefix := g.group + "/" + logDir
	start := ""
	if after > 0 {
		start = logKey(g.group, after)
	}
	var out []uint64
	for {
		page := 1000
		if limit > 0 && limit-len(out) < page {
			page = limit - len(out)
		}
		var keys []string
		err := g.do(ctx, func(ctx context.Context) error {
			var e error
			keys, e = g.st.ListKeys(ctx, prefix, start, page)
			return e
		})
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if i, ok := parseLogKey(g.group, k); ok {
				out = append(out, i)
			}
		}
		if len(keys) < page || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		start = keys[len(keys)-1]
	}
}

// deleteEntry removes a log object; absent is fine.
func (g *groupStore) deleteEntry(ctx context.Context, index uint64) error {
	err := g.do(ctx, func(ctx context.Context) error {
		return g.st.Delete(ctx, logKey(g.group, index), store.Cond{})
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
