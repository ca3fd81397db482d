package driver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ScratchPrefix is where tenure writes the scratch keys with which it finds
// out what a store enforces (store.Probe, DeleteCheck). Each is removed
// again by whoever wrote it.
const ScratchPrefix = ".tenure-probe/"

// DeleteCheck finds out, once, whether the service behind a driver enforces
// the condition of a conditional delete, for drivers whose service may not
// (S3-compatible servers, Cloud Storage emulators): some delete on a stale
// version, or answer a conditional delete of a missing key with success.
// Such a driver calls Check before each conditional delete and sends it
// only if Check returns nil.
//
// The check writes a scratch key under ScratchPrefix, swaps it, deletes it
// on its first (stale) version, deletes a key that does not exist on its
// current version, and removes the scratch key: five requests, once. Both
// deletes must be refused. If either succeeds, every later Check returns an
// error of kind Unsupported naming the store, and the driver refuses its
// conditional deletes without sending them. A check that fails on its own
// (the store unreachable, ctx ended) settles nothing and is run again by the
// next Check.
//
// Emulating the condition instead (a compare-and-swap to a tombstone, then
// an unconditional delete) is not atomic: a create-if-absent that lands
// over the tombstone between the two steps would be deleted by the second,
// an acknowledged write lost; and tombstones kept for good would be values
// to every reader that does not know them.
//
// The zero DeleteCheck is ready to use. It is safe for concurrent use;
// concurrent callers wait for one check.
type DeleteCheck struct {
	mu   sync.Mutex
	busy chan struct{} // closed when the check under way ends; nil if none is
	done bool
	err  error // the settled answer: nil, or an error of kind Unsupported
}

// Settle records the answer without checking: nil for a service known to
// enforce the condition, or an error of kind Unsupported. Later Checks
// return it. Tests of a driver's requests against a fake server that only
// records them use it.
func (c *DeleteCheck) Settle(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done, c.err = true, err
}

// deleteCheckCleanupTries bounds the attempts to remove the scratch key.
const deleteCheckCleanupTries = 3

// Check returns nil if d's service enforces the condition of a conditional
// delete, an error of kind Unsupported naming the store (name, such as
// "the S3 server at https://host (bucket b)") if it ignores it, or the
// error that stopped the check. deleteIfMatch sends a conditional delete to
// the service as it is, without calling Check (d.Delete would call it
// again); d's Put, unconditional Delete and ErrorKind serve the rest.
func (c *DeleteCheck) Check(ctx context.Context, d Store, name string, deleteIfMatch func(ctx context.Context, key string, cond Cond) error) error {
	for {
		c.mu.Lock()
		if c.done {
			err := c.err
			c.mu.Unlock()
			return err
		}
		if c.busy == nil {
			busy := make(chan struct{})
			c.busy = busy
			c.mu.Unlock()
			err, settled := checkDeletes(ctx, d, name, deleteIfMatch)
			c.mu.Lock()
			if settled {
				c.done, c.err = true, err
			}
			c.busy = nil
			close(busy)
			c.mu.Unlock()
			return err
		}
		busy := c.busy
		c.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// checkDeletes runs the check; settled is false when the check itself
// failed and found out nothing.
func checkDeletes(ctx context.Context, d Store, name string, deleteIfMatch func(ctx context.Context, key string, cond Cond) error) (err error, settled bool) {
	if err := ctx.Err(); err != nil {
		return err, false
	}
	record := func(step string) []byte {
		return []byte(fmt.Sprintf(`{"check":"conditional delete","step":%q,"nonce":%q}`, step, rand.Text()))
	}
	failed := func(step string, err error) error {
		return fmt.Errorf("checking whether %s enforces conditional deletes: %s: %w", name, step, err)
	}
	key := ScratchPrefix + "delete-" + rand.Text()
	v1, err := d.Put(ctx, key, record("create"), Cond{Kind: IfAbsent})
	if err != nil {
		// An ambiguous create may have landed.
		return errors.Join(failed("create a scratch key", err), removeScratch(ctx, d, key)), false
	}
	v2, err := d.Put(ctx, key, record("swap"), Cond{Kind: IfMatch, Version: v1})
	if err != nil {
		return errors.Join(failed("swap the scratch key", err), removeScratch(ctx, d, key)), false
	}
	var ignored []string
	err = deleteIfMatch(ctx, key, Cond{Kind: IfMatch, Version: v1})
	switch {
	case err == nil:
		ignored = append(ignored, "a delete on a stale version succeeded")
	case Classify(d, err) != PreconditionFailed:
		return errors.Join(failed("delete on a stale version", err), removeScratch(ctx, d, key)), false
	}
	missing := ScratchPrefix + "delete-missing-" + rand.Text()
	err = deleteIfMatch(ctx, missing, Cond{Kind: IfMatch, Version: v2})
	switch {
	case err == nil:
		ignored = append(ignored, "a delete of a missing key succeeded")
	case Classify(d, err) != PreconditionFailed:
		return errors.Join(failed("delete of a missing key", err), removeScratch(ctx, d, key)), false
	}
	if err := removeScratch(ctx, d, key); err != nil {
		return err, false
	}
	if len(ignored) > 0 {
		return Errorf(Unsupported, "%s ignores the condition of a conditional delete (%s), so conditional deletes are refused on it, "+
			"and nothing was deleted: delete without a condition, or use a store that enforces it", name, strings.Join(ignored, "; ")), true
	}
	return nil, true
}

// removeScratch deletes key unconditionally, a few times if it must, on
// contexts of its own: ctx may have ended.
func removeScratch(ctx context.Context, d Store, key string) error {
	base := context.WithoutCancel(ctx)
	var err error
	for try := 0; try < deleteCheckCleanupTries; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 100 * time.Millisecond) // back off
		}
		c, cancel := context.WithTimeout(base, 10*time.Second)
		err = d.Delete(c, key, Cond{})
		cancel()
		if err == nil {
			return nil
		}
		if k := Classify(d, err); k == Permanent || k == InvalidArgument {
			break
		}
	}
	return fmt.Errorf("could not remove the scratch key %q (delete it by hand): %w", key, err)
}
