package filestore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
)

// dirLocks keep a key directory from being removed (pruneDirs) while a
// create or a delete in it runs, from before its change until the
// directory's sync after it: the directory where the change is made is
// then the one synced, in this process and in any other. Writers share a
// directory's lock; removing it takes the lock alone, without waiting for
// long. Directories share locks by hash, like keys (stripe), with lock
// files of their own (.locks/dNN), under flock(2): shared by the writers
// of a process while any of them holds it.
type dirLock struct {
	mu    sync.Mutex
	users int            // writers holding it in this process; under mu
	dirs  map[string]int // of users, by their directory; under mu
	fd    int            // the lock file, opened on first use; under mu
}

// dirLockOf is the lock of the key directory dir.
func (s *Store) dirLockOf(dir string) (*dirLock, int) {
	i := stripeOf(dir[len(s.root):])
	return &s.dirLocks[i], int(i)
}

// openDirLock opens the lock file of dl, stripe i, if it is not open;
// under dl.mu.
func (s *Store) openDirLock(dl *dirLock, i int) error {
	if dl.fd >= 0 {
		return nil
	}
	fd, err := fsys.OpenLockFile(filepath.Join(s.locks, fmt.Sprintf("d%02x", i)))
	if err != nil {
		return ioErr("open lock file", err)
	}
	dl.fd = fd
	return nil
}

// shareDir holds dir's lock for a writer of a key in it until release. A
// removal holds it alone only for a rmdir(2), so waiting is short; it is
// polled, so that a cancelled ctx abandons it.
func (s *Store) shareDir(ctx context.Context, dir string) (release func(), err error) {
	dl, i := s.dirLockOf(dir)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.users == 0 {
		if err := s.openDirLock(dl, i); err != nil {
			return nil, err
		}
		if _, err := waitLock(ctx, dl.fd, fsys.TryLockShared); err != nil {
			return nil, err
		}
	}
	dl.users++
	if dl.dirs == nil {
		dl.dirs = map[string]int{}
	}
	dl.dirs[dir]++
	return func() {
		dl.mu.Lock()
		defer dl.mu.Unlock()
		if dl.dirs[dir]--; dl.dirs[dir] == 0 {
			delete(dl.dirs, dir)
		}
		if dl.users--; dl.users == 0 && (fsys.Unlock(dl.fd) != nil || s.closed.Load()) {
			_ = fsys.CloseFD(dl.fd) // closing surely drops the lock
			dl.fd = -1
		}
	}, nil
}

// removeDir removes dir if it is empty and no writer holds its lock, here
// or in another process. A writer of dir in this process leaves it to that
// one (a create fills it; a delete removes it when done); for others
// (another process's, or writers of another directory of the same lock)
// it waits a little while dir is empty, until ctx ends. It reports
// whether dir was removed.
func (s *Store) removeDir(ctx context.Context, dir string) bool {
	dl, i := s.dirLockOf(dir)
	for try := 0; ; try++ {
		removed, busy := s.tryRemoveDir(dl, i, dir)
		if !busy || try == removeDirTries || !emptyDir(dir) {
			return removed
		}
		t := time.NewTimer(time.Millisecond/2 + rand.N(time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// emptyDir reports whether dir is a directory with nothing in it.
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}

// removeDirTries bounds the waits of removeDir for a busy lock.
const removeDirTries = 10

// tryRemoveDir is one attempt of removeDir: busy says a writer of another
// directory, or of another process, held the lock.
func (s *Store) tryRemoveDir(dl *dirLock, i int, dir string) (removed, busy bool) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.dirs[dir] > 0 {
		return false, false
	}
	if dl.users > 0 {
		return false, true
	}
	if s.openDirLock(dl, i) != nil {
		return false, false
	}
	ok, err := fsys.TryLock(dl.fd)
	if err != nil || !ok {
		return false, err == nil
	}
	removed = rmdir(dir) == nil
	if fsys.Unlock(dl.fd) != nil {
		_ = fsys.CloseFD(dl.fd)
		dl.fd = -1
	}
	return removed, false
}

// closeDirLocks closes the directory lock files no writer holds, at
// Close; the last writer of one closes it.
func (s *Store) closeDirLocks() error {
	var first error
	for i := range s.dirLocks {
		dl := &s.dirLocks[i]
		dl.mu.Lock()
		if dl.fd >= 0 && dl.users == 0 {
			if err := fsys.CloseFD(dl.fd); err != nil && first == nil {
				first = err
			}
			dl.fd = -1
		}
		dl.mu.Unlock()
	}
	return first
}
