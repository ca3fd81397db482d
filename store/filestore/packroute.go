package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
	"github.com/tenure-io/tenure/store/filestore/internal/pack"
)

// packs are the packs a Store found, by their head's path. A key is in a
// pack when its directory or one of its parents is a pack's head; the
// head, a regular file, is found where the directory would be, and only
// then: the first time a key's path runs into a file instead of a
// directory (ENOTDIR), or when its directory is not one this Store made
// or found. A pack is never turned back into a directory, so a pack
// found stays one.
type packs struct {
	mu sync.RWMutex
	m  map[string]*pack.Log
}

// cached returns the pack that holds keys of directory dir, if this Store
// found it before.
func (s *Store) cachedPack(dir string) *pack.Log {
	s.packs.mu.RLock()
	defer s.packs.mu.RUnlock()
	if len(s.packs.m) == 0 {
		return nil
	}
	for d := dir; len(d) > len(s.root); d = filepath.Dir(d) {
		if p, ok := s.packs.m[d]; ok {
			return p
		}
	}
	return nil
}

// findPack returns the pack that holds keys of directory dir, nil if dir
// is not in one: the first of dir and its parents that exists decides.
func (s *Store) findPack(dir string) (*pack.Log, error) {
	if p := s.cachedPack(dir); p != nil {
		return p, nil
	}
	for d := dir; len(d) > len(s.root); d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			continue
		case err != nil:
			return nil, ioErr("stat", err)
		case fi.IsDir():
			return nil, nil
		case !fi.Mode().IsRegular() || !strings.HasSuffix(d, sufDir):
			return nil, driver.Errorf(driver.Permanent, "filestore: %s is neither a key's directory nor a pack", d)
		}
		var opened *pack.Log
		opened, err = pack.Open(pack.Config{Head: d, Segments: packSegDir(d), ReadOnly: s.readOnly,
			ValidKey: validKey, Gone: func() { s.forgetPack(opened) },
			SegmentMax: packSegMax, NoPrealloc: !packPrealloc, Hooks: &packHooks})
		if err != nil {
			return nil, err
		}
		s.packs.mu.Lock()
		defer s.packs.mu.Unlock()
		if s.packs.m == nil {
			s.packs.m = map[string]*pack.Log{}
		}
		p, ok := s.packs.m[d]
		if !ok {
			p = opened // else unused: it opened no file
			s.packs.m[d] = p
		}
		return p, nil
	}
	return nil, nil
}

// packFor returns the pack of the key at path when this Store knows it,
// or may find it: when path's directory is not one this Store made or
// found. Known directories cost no system call; one that became a pack
// since shows as ENOTDIR (notDir), and the caller asks findPack then.
func (s *Store) packFor(path string) (*pack.Log, error) {
	dir := filepath.Dir(path)
	if p := s.cachedPack(dir); p != nil {
		return p, nil
	}
	if s.dirs.has(dir) {
		return nil, nil
	}
	return s.findPack(dir)
}

// notDir reports an error of a path that runs into a file where a
// directory should be: a pack's head.
func notDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// Packs reports whether Pack can pack a prefix: unless the Store is
// read-only (driver.Packer).
func (s *Store) Packs() bool { return !s.readOnly }

// Pack makes prefix (ending in '/') a pack: its keys are then kept in
// segment files that writes append to, one flush per batch of writes
// instead of two per key. It reports whether prefix is a pack: true if it
// is one already, false if keys are stored under it as files (they stay
// so). It fails on a read-only store.
//
// The pack's head takes the place of the prefix's directory, which must
// be empty: processes of versions of this package without packs then fail
// to write under the prefix (its path is not a directory) instead of
// writing beside the pack.
func (s *Store) Pack(ctx context.Context, prefix string) (bool, error) {
	if err := s.beginWrite(ctx); err != nil {
		return false, err
	}
	if !strings.HasSuffix(prefix, "/") || !validKey(prefix) {
		return false, driver.Errorf(driver.InvalidArgument, "filestore: pack prefix %q: it must be a valid key ending in '/'", prefix)
	}
	c := encodeKey(prefix)
	dir := filepath.Join(append([]string{s.root}, c[:len(c)-1]...)...)
	if p, err := s.findPack(dir); p != nil || err != nil {
		return p != nil, err // a pack, or in one
	}
	// Alone on the directory's lock: no create or delete is between its
	// change and its sync there, and none starts until the head is in.
	dl, i := s.dirLockOf(dir)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.dirs[dir] > 0 {
		return false, nil // writers of this Store are in it: keys
	}
	if err := s.openDirLock(dl, i); err != nil {
		return false, err
	}
	if _, err := waitLock(ctx, dl.fd, fsys.TryLock); err != nil {
		return false, err
	}
	defer func() {
		if fsys.Unlock(dl.fd) != nil {
			_ = fsys.CloseFD(dl.fd)
			dl.fd = -1
		}
	}()
	fi, err := os.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		if !emptyDir(dir) {
			return false, nil
		}
		if err := rmdir(dir); err != nil {
			return false, ioErr("remove the directory a pack replaces", err)
		}
		s.dirs.forget(dir)
		s.dirSyncs.reopen(dir)
	case err == nil:
		p, err := s.findPack(dir) // made by another process meanwhile
		return p != nil, err
	case !errors.Is(err, fs.ErrNotExist):
		return false, ioErr("stat", err)
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return false, err
	}
	// The segments' directory first: the head is what makes it a pack.
	if err := os.Mkdir(packSegDir(dir), 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, ioErr("make pack segments directory", err)
	}
	tmp, err := s.writeTemp([]byte(pack.HeadText))
	if err != nil {
		return false, err
	}
	err = os.Link(tmp, dir)
	_ = os.Remove(tmp)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return false, ioErr("link pack head", err)
	}
	if err := fsys.SyncDir(parent); err != nil {
		return false, ioErr("sync directory", err)
	}
	found, err := s.findPack(dir)
	return found != nil, err
}

// forgetPack drops p, whose head is gone: the next operation finds what
// is at its path now. It is called under p's lock.
func (s *Store) forgetPack(p *pack.Log) {
	s.packs.mu.Lock()
	if s.packs.m[p.Head()] == p {
		delete(s.packs.m, p.Head())
	}
	s.packs.mu.Unlock()
}

// packSegDir is the segments' directory of the pack whose head is at
// head: its sibling, named with sufPack for sufDir.
func packSegDir(head string) string { return strings.TrimSuffix(head, sufDir) + sufPack }

// sufPack ends a pack's segments' directory: no key maps to it ('.' is
// always escaped in a key's path).
const sufPack = ".p"

// packSegMax is the size at which packs start a new segment, and
// packPrealloc whether they allocate a new segment's blocks at once
// (variables for tests and benchmarks); packHooks are the packs' test
// hooks.
var (
	packSegMax   int64 = pack.DefaultSegmentMax
	packPrealloc       = true
	packHooks    pack.Hooks
)

// closePacks closes the packs' files, at Close.
func (s *Store) closePacks() error {
	s.packs.mu.Lock()
	ps := make([]*pack.Log, 0, len(s.packs.m))
	for _, p := range s.packs.m {
		ps = append(ps, p)
	}
	s.packs.mu.Unlock() // a pack's lock comes first (forgetPack)
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
