// Package fsys holds the operating system calls that filestore and its
// packed log share: flock(2) on lock files, file identity, fdatasync(2),
// preallocation and directory syncs, and the classification of their
// errors into driver kinds.
//
// Where flock is missing (Supported is false) the lock calls fail with
// ErrUnsupported; filestore refuses to open a store there.
package fsys

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// Kind classifies an error of the file system: a missing file is
// driver.NotFound, a refused permission driver.Permanent, and errnos as
// their meaning says; driver.Unknown for the rest.
func Kind(err error) driver.Kind {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return driver.NotFound
	case errors.Is(err, fs.ErrPermission):
		return driver.Permanent
	}
	return errnoKind(err)
}

// WaitLock takes the flock on fd with try (TryLock, or TryLockShared for a
// directory's lock), polled until ctx ends, and tells whether it had to
// wait. A failed flock is returned as an *os.SyscallError, the end of ctx
// as ctx.Err().
func WaitLock(ctx context.Context, fd int, try func(fd int) (bool, error)) (waited bool, err error) {
	delay := 20 * time.Microsecond
	for {
		ok, err := try(fd)
		if err != nil {
			return waited, os.NewSyscallError("flock", err)
		}
		if ok {
			return waited, nil
		}
		waited = true
		// Another process (or Store) holds it, for one write (or one
		// directory's removal).
		// Jitter keeps waiters from retrying in step.
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return true, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Millisecond)
	}
}

// SyncDir flushes dir's entries: a name made or removed in it is durable
// once it returns.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
