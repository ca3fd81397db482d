package filestore

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
	"github.com/tenure-io/tenure/store/filestore/internal/pack"
)

func init() {
	store.Register("file", func(ctx context.Context, u *url.URL, o store.OpenOptions) (driver.Store, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir, err := dirFromURL(u)
		if err != nil {
			return nil, err
		}
		open := New
		if o.ReadOnly {
			open = NewReadOnly
		}
		s, err := open(dir)
		if err != nil {
			return nil, err // not s: a nil *Store in a driver.Store is not nil
		}
		return s, nil
	})
}

const (
	tmpDirName  = ".tmp"
	lockDirName = ".locks"
	// numStripes and stripeOf's hash are part of the on-disk format, like
	// the key encoding: processes that map a key to different lock files
	// would not exclude each other.
	numStripes = 256
	// staleTemp is how old a temp file must be before New removes it.
	// Younger ones may belong to a write in flight in another process.
	staleTemp = time.Minute
)

// dirFromURL accepts file:///abs/dir, file://localhost/abs/dir and
// file://./rel/dir (the host "." or ".." starts a relative path).
func dirFromURL(u *url.URL) (string, error) {
	const want = "want file:///absolute/dir or file://./relative/dir"
	bad := func(format string, args ...any) error {
		return driver.Errorf(driver.InvalidArgument, "filestore: %s: %s; %s", u.Redacted(), fmt.Sprintf(format, args...), want)
	}
	switch {
	case u.Opaque != "":
		return "", bad("a relative path needs \"//.\" after \"file:\"")
	case u.User != nil:
		return "", bad("user information is not allowed")
	case u.RawQuery != "" || u.ForceQuery:
		return "", bad("the file store takes no query parameters")
	case u.Fragment != "":
		return "", bad("a fragment is not allowed")
	}
	switch u.Host {
	case "", "localhost":
		if u.Path == "" {
			return "", bad("no directory")
		}
		return u.Path, nil
	case ".", "..":
		return u.Host + u.Path, nil
	}
	return "", bad("host %q: the file store is local to this machine (a relative path starts with ./)", u.Host)
}

// Store is a driver that keeps each key in a file under one directory. It is
// safe for concurrent use by multiple goroutines, and by multiple processes
// (and multiple Stores in one process) on the same directory of a local file
// system.
type Store struct {
	root     string // absolute
	tmp      string
	locks    string
	readOnly bool
	closed   atomic.Bool

	stripes  [numStripes]stripe
	dirLocks [numStripes]dirLock
	dirSyncs dirSyncs
	known    knownFiles
	dirs     knownDirs
	// tmpfile is whether creates write an unnamed file (O_TMPFILE) in the
	// key's directory; cleared for good once the file system refuses one.
	tmpfile atomic.Bool
	// viaProc is whether unnamed files are linked through /proc, once
	// linking the descriptor itself was refused.
	viaProc atomic.Bool
	spares  spares
	packs   packs
}

// stripe is one of the locks that serialise the writes of a key. Keys share
// stripes by hash, so the number of open lock files is bounded.
type stripe struct {
	// mu is a mutex that can be abandoned when ctx ends: a goroutine holds
	// it while its token sits in the channel. It also guards fd.
	mu chan struct{}
	// fd is the lock file, opened on first use; flock on it excludes
	// other processes and other Stores of this process (flock locks belong
	// to the open file description, not to the process).
	fd int
}

var (
	_ driver.Store     = (*Store)(nil)
	_ driver.Limits    = (*Store)(nil)
	_ driver.Reader    = (*Store)(nil)
	_ driver.KeyLister = (*Store)(nil)
)

// New opens the store in dir, creating the directory if it is missing. It
// fails if dir is not a directory or cannot be written. It removes temp files
// left by writers that crashed over a minute ago.
func New(dir string) (*Store, error) {
	if !supported {
		return nil, driver.Errorf(driver.Permanent, "filestore: not supported on %s: it needs flock(2)", runtime.GOOS)
	}
	if dir == "" {
		return nil, driver.Errorf(driver.InvalidArgument, "filestore: empty directory name")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, driver.Errorf(driver.InvalidArgument, "filestore: directory %q: %w", dir, err)
	}
	if err := ensureDir(root, "the store's directory", true); err != nil {
		return nil, err
	}
	s := &Store{root: root, tmp: filepath.Join(root, tmpDirName), locks: filepath.Join(root, lockDirName)}
	s.initLocks()
	if err := ensureDir(s.tmp, "where filestore writes temp files", false); err != nil {
		return nil, err
	}
	if err := ensureDir(s.locks, "where filestore keeps lock files", false); err != nil {
		return nil, err
	}
	if err := s.probeWritable(); err != nil {
		return nil, err
	}
	s.tmpfile.Store(s.probeTmpfile())
	s.removeStaleTemps()
	return s, nil
}

// NewReadOnly opens the store in dir for reading only: it creates and writes
// nothing (not the directory, nor its lock or temp directories), so it works
// on a directory the process cannot write. It fails with a Permanent error
// that matches fs.ErrNotExist when dir does not exist. Put and Delete fail
// with an InvalidArgument error matching store.ErrReadOnly.
func NewReadOnly(dir string) (*Store, error) {
	if dir == "" {
		return nil, driver.Errorf(driver.InvalidArgument, "filestore: empty directory name")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, driver.Errorf(driver.InvalidArgument, "filestore: directory %q: %w", dir, err)
	}
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, driver.Errorf(driver.Permanent, "filestore: the store's directory %s does not exist (a read-only open creates nothing): %w", root, err)
	case err != nil:
		return nil, driver.Errorf(kindOr(err, driver.Permanent), "filestore: the store's directory %s: %w", root, err)
	case !fi.IsDir():
		return nil, driver.Errorf(driver.Permanent, "filestore: %s (the store's directory) is not a directory", root)
	}
	s := &Store{root: root, tmp: filepath.Join(root, tmpDirName), locks: filepath.Join(root, lockDirName), readOnly: true}
	s.initLocks()
	return s, nil
}

func (s *Store) initLocks() {
	for i := range s.stripes {
		s.stripes[i] = stripe{mu: make(chan struct{}, 1), fd: -1}
		s.dirLocks[i].fd = -1
	}
}

// probeWritable finds out now, not at the first write, that a directory
// the store writes to is read-only, or that the file system has no hard
// links. It writes a temp file, links it into the root as every create
// does, and creates a file where lock files go.
func (s *Store) probeWritable() error {
	notWritable := func(dir string, err error) error {
		return driver.Errorf(kindOr(err, driver.Permanent), "filestore: directory %s is not writable: %w", dir, err)
	}
	f, err := s.createTemp()
	if err != nil {
		return notWritable(s.tmp, err)
	}
	_ = f.Close()
	defer os.Remove(f.Name())
	// The name has none of the suffixes of keys, so List would ignore it
	// if a crash left it behind.
	probe := filepath.Join(s.root, ".probe-"+crand.Text())
	if err := os.Link(f.Name(), probe); err != nil {
		return driver.Errorf(kindOr(err, driver.Permanent),
			"filestore: directory %s is not writable, or its file system has no hard links: %w", s.root, err)
	}
	_ = os.Remove(probe)
	probe = filepath.Join(s.locks, ".probe-"+crand.Text())
	if err := os.WriteFile(probe, nil, 0o666); err != nil {
		return notWritable(s.locks, err)
	}
	_ = os.Remove(probe)
	return nil
}

// probeTmpfile tells whether creates can write unnamed files here: the
// kernel and the file system have O_TMPFILE, and linkTmpfile can name one
// (it also learns whether it needs /proc for that).
func (s *Store) probeTmpfile() bool {
	fd, err := openTmpfile(s.root)
	if err != nil {
		return false
	}
	defer fsys.CloseFD(fd)
	probe := filepath.Join(s.root, ".probe-"+crand.Text())
	if linkTmpfile(fd, probe, &s.viaProc) != nil {
		return false
	}
	_ = os.Remove(probe)
	return true
}

func ensureDir(dir, what string, parents bool) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		mkdir := os.Mkdir
		if parents {
			mkdir = os.MkdirAll
		}
		err = mkdir(dir, 0o777)
		if err == nil || errors.Is(err, fs.ErrExist) && isDir(dir) {
			return nil
		}
		return driver.Errorf(kindOr(err, driver.Permanent), "filestore: cannot create %s (%s): %w", dir, what, err)
	case err != nil:
		return driver.Errorf(kindOr(err, driver.Permanent), "filestore: %s (%s): %w", dir, what, err)
	case !fi.IsDir():
		return driver.Errorf(driver.Permanent, "filestore: %s (%s) is not a directory", dir, what)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func (s *Store) removeStaleTemps() {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return // best effort: a leftover temp file costs only space
	}
	cutoff := time.Now().Add(-staleTemp)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.IsDir() || !info.ModTime().Before(cutoff) {
			continue
		}
		_ = os.Remove(filepath.Join(s.tmp, e.Name()))
	}
}

// Version returns the version filestore gives to data: a hash of its bytes,
// as S3's ETag is, so the same bytes always have the same version.
func Version(data []byte) string { return pack.Version(data) }

// CheckKey refuses keys whose file path would exceed the system's limit. On
// Linux every key of up to 1024 bytes fits unless the directory's own path
// is longer than about 900 bytes.
func (s *Store) CheckKey(key string) error {
	if n := len(s.root) + 1 + encodedLen(key); n >= pathMax {
		return fmt.Errorf("filestore: the %d-byte key needs a path of %d bytes under %s; this system allows %d",
			len(key), n, s.root, pathMax-1)
	}
	return nil
}

func (s *Store) path(key string) string {
	return filepath.Join(append([]string{s.root}, encodeKey(key)...)...)
}

func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed()
	}
	return nil
}

// beginWrite is begin for Put and Delete, which a read-only store refuses
// before touching the file system (they would create lock files).
func (s *Store) beginWrite(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if s.readOnly {
		return driver.Errorf(driver.InvalidArgument, "filestore: %w: %s was opened read-only", store.ErrReadOnly, s.root)
	}
	return nil
}

func errClosed() error { return driver.Errorf(driver.Permanent, "filestore: %w", store.ErrClosed) }

// Get reads the file without a lock: files are only ever replaced whole by
// rename or link, so a reader sees one complete value.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited reads the file only if its size is within max, and never
// more than max+1 bytes of it (a file may grow between the stat and the
// read only if something other than a driver wrote it in place).
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	data, version, err := s.read(ctx, key, max, nil)
	if err != nil {
		return nil, "", err
	}
	if version == "" {
		version = Version(data)
	}
	return data, version, nil
}

// ReadInto is GetLimited without the version, which costs a hash of the
// value's bytes, and into buf's memory when the value fits (driver.Reader).
func (s *Store) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	data, _, err := s.read(ctx, key, max, buf)
	return data, err
}

// read reads key's file, of at most max bytes, into buf's memory if it
// fits. A key in a pack is read from it, with its version (else "").
func (s *Store) read(ctx context.Context, key string, max int64, buf []byte) ([]byte, string, error) {
	data, version, err := s.readOnce(ctx, key, max, buf)
	if errors.Is(err, pack.ErrGone) {
		// Found again, as it is now (forgetPack).
		data, version, err = s.readOnce(ctx, key, max, buf)
	}
	return data, version, err
}

func (s *Store) readOnce(ctx context.Context, key string, max int64, buf []byte) ([]byte, string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, "", err
	}
	path := s.path(key)
	if p := s.cachedPack(filepath.Dir(path)); p != nil {
		return p.Get(key, max, buf)
	}
	f, err := fsys.OpenReader(path)
	if notDir(err) {
		p, perr := s.findPack(filepath.Dir(path))
		if p != nil || perr != nil {
			if perr != nil {
				return nil, "", perr
			}
			return p.Get(key, max, buf)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", driver.Errorf(driver.NotFound, "filestore: no such key")
	}
	if err != nil {
		return nil, "", ioErr("read", err)
	}
	defer f.Close()
	data, err := driver.ReadLimitedInto(f, f.Size(), max, buf)
	if err != nil {
		if driver.Classify(nil, err) == driver.TooLarge {
			return nil, "", err
		}
		return nil, "", ioErr("read", err)
	}
	return data, "", nil
}

// Put creates by linkat(2) of an unnamed file (or link(2) of a temp file)
// and swaps by rename(2), under the key's lock. It returns once the new
// value is durable.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	version, err := s.putOnce(ctx, key, data, cond)
	if errors.Is(err, pack.ErrGone) {
		// Refused before anything was written; found again (forgetPack).
		version, err = s.putOnce(ctx, key, data, cond)
	}
	return version, err
}

func (s *Store) putOnce(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if err := s.beginWrite(ctx); err != nil {
		return "", err
	}
	path := s.path(key)
	p, err := s.packFor(path)
	if err != nil {
		return "", err
	}
	if p == nil {
		version, err := s.putFile(ctx, key, path, data, cond)
		if !notDir(err) {
			return version, err
		}
		// The directory became a pack since this Store last looked.
		if p, err = s.findPack(filepath.Dir(path)); p == nil || err != nil {
			return version, errors.Join(err, driver.Errorf(driver.Permanent, "filestore: %s: a file where a directory should be", filepath.Dir(path)))
		}
	}
	if cond.Kind != driver.IfAbsent && cond.Kind != driver.IfMatch {
		return "", driver.Errorf(driver.InvalidArgument, "filestore: put with condition %s", cond.Kind)
	}
	return p.Put(ctx, key, data, cond)
}

// putFile is Put of a key kept as a file.
func (s *Store) putFile(ctx context.Context, key, path string, data []byte, cond driver.Cond) (_ string, err error) {
	var check, precheck func() error
	switch cond.Kind {
	case driver.IfAbsent:
		check = func() error { return checkAbsent(path) }
		precheck = check
	case driver.IfMatch:
		check = func() error { return s.checkVersion(path, cond.Version) }
		precheck = func() error { return s.precheckVersion(path, cond.Version) }
	default:
		return "", driver.Errorf(driver.InvalidArgument, "filestore: put with condition %s", cond.Kind)
	}
	// A condition that already fails is refused without the lock: under
	// contention, that is most of the losers.
	if err := precheck(); err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	create := cond.Kind == driver.IfAbsent
	if create {
		// Until the directory's sync, no delete removes it (pruneDirs). A
		// swap needs no such hold: its key's file is in the directory.
		releaseDir, err := s.shareDir(ctx, dir)
		if err != nil {
			return "", err
		}
		defer func() {
			releaseDir()
			if err != nil {
				// A create that made the directory and failed (its
				// caller gave up, say) leaves nothing behind.
				s.pruneDirs(ctx, dir)
			}
		}()
		if err := s.keyDir(dir); err != nil {
			return "", err
		}
	}
	release, waited, err := s.lockWaited(ctx, key)
	if err != nil {
		return "", err
	}
	// The write happens under the lock, after the check, so that only the
	// one writer whose condition holds pays for an fsync. A create that
	// got the lock at once skips the check: the precheck has just seen the
	// name absent, and the link fails if it appeared since.
	if !create || waited {
		err = check()
	}
	if err == nil {
		err = s.commit(ctx, dir, path, data, create)
		for try := 1; errors.Is(err, errNoDir) && try < dirAttempts; try++ {
			// Removed since it was made: the delete of its last key
			// removed it (pruneDirs), here or in another process, or
			// something did behind the store's back. Made again.
			s.dirs.forget(dir)
			s.dirSyncs.reopen(dir)
			if err = s.mkdirs(dir); err == nil {
				s.dirs.add(dir)
				err = s.commit(ctx, dir, path, data, create)
			}
		}
	}
	var held *heldFile
	if err == nil {
		held = s.known.hold(path, len(data))
	}
	release()
	if err != nil {
		return "", err
	}
	// Hashed outside the lock: a large value takes a while.
	version := Version(data)
	s.known.wrote(path, held, version)
	// Syncing the directory after releasing the lock is enough: we return
	// only once the new name is durable, and a later writer that saw it
	// syncs the same directory before it returns.
	if err := s.dirSyncs.sync(dir); err != nil {
		return "", committedErr("sync directory", err)
	}
	return version, nil
}

// keyDir makes the key's directory dir unless this Store knows it exists.
func (s *Store) keyDir(dir string) error {
	if s.dirs.has(dir) {
		return nil
	}
	err := s.mkdirs(dir)
	for try := 1; errors.Is(err, errNoDir) && try < dirAttempts; try++ {
		err = s.mkdirs(dir) // a parent was removed as it was made
	}
	if err != nil {
		return err
	}
	s.dirs.add(dir)
	return nil
}

// dirAttempts bounds the times a create makes its key's directory again
// because the delete of another key removed it meanwhile (pruneDirs), or
// a parent as it made it; each removal needs the directory empty, so
// losing this race again and again takes deletes in step with the
// create. After the last the create fails with a transient error.
const dirAttempts = 8

// errNoDir marks a create that found the key's directory missing.
var errNoDir = errors.New("the key's directory is missing")

// errTmpfileRefused marks a create that found O_TMPFILE unusable.
var errTmpfileRefused = errors.New("no O_TMPFILE")

// beforeLink, if set, runs just before a create links its file into
// place; tests use it to create the name first, as a writer that ignores
// the lock could.
var beforeLink func(path string)

// openTmpfile is openTmpfileSys; tests replace it to refuse.
var openTmpfile = openTmpfileSys

// commit writes data to a new file, syncs it, and gives it the key's name:
// by linkat(2) or link(2) to create, which fail if the name exists (so
// create-if-absent holds even against a writer that ignored the lock), or
// by rename(2) to replace. Either way the file appears whole or not at
// all. A create writes an unnamed file in the key's directory where the
// system has O_TMPFILE, else a temp file in the store's temp directory.
func (s *Store) commit(ctx context.Context, dir, path string, data []byte, create bool) error {
	if create && s.tmpfile.Load() {
		err := s.createUnnamed(ctx, dir, path, data)
		if !errors.Is(err, errTmpfileRefused) {
			return err
		}
		s.tmpfile.Store(false)
	}
	tmp, err := s.writeTemp(data)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if !create {
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			return commitErr("rename", err)
		}
		return nil
	}
	if beforeLink != nil {
		beforeLink(path)
	}
	err = os.Link(tmp, path)
	// A link that found no file is the directory's fault while the temp
	// file is there (it may be made again by now: the check is not of it).
	tmpLeft := errors.Is(err, fs.ErrNotExist) && exists(tmp)
	_ = os.Remove(tmp) // after a link, the key's name still holds the file
	switch {
	case errors.Is(err, fs.ErrExist):
		return errExists()
	case tmpLeft:
		return noDirErr(err)
	case err != nil:
		return commitErr("link", err)
	}
	return nil
}

// createUnnamed writes data to an unnamed file in the key's directory,
// syncs it, and links it in as path. Compared with a named temp file it
// saves the temp name's creation and removal (two changes of a directory),
// and a crash leaves nothing to clean up: the file dies with its
// descriptor. The file is the directory's spare when one is open (spares),
// and the next spare opens while this one is written.
func (s *Store) createUnnamed(ctx context.Context, dir, path string, data []byte) error {
	open := openTmpfile
	if fd, ok := s.spares.take(dir); ok {
		s.spares.refill(dir, open)
		err := s.linkUnnamed(ctx, fd, dir, path, data)
		var de *driver.Error
		if err == nil || ctx.Err() != nil || errors.Is(err, errNoDir) || errors.Is(err, errTmpfileRefused) ||
			errors.As(err, &de) && de.Kind == driver.PreconditionFailed {
			return err
		}
		// The spare failed where a file opened now may not: say the
		// store's directory was moved to another file system since.
	}
	fd, err := open(dir)
	switch {
	case err == nil:
	case tmpfileRefused(err):
		return fmt.Errorf("%w: %w", errTmpfileRefused, err)
	case errors.Is(err, fs.ErrNotExist):
		return noDirErr(err)
	default:
		return ioErr("create unnamed file", err)
	}
	s.spares.refill(dir, open)
	return s.linkUnnamed(ctx, fd, dir, path, data)
}

// linkUnnamed writes data to the unnamed file fd, syncs it, links it in as
// path and closes it.
func (s *Store) linkUnnamed(ctx context.Context, fd int, dir, path string, data []byte) error {
	defer fsys.CloseFD(fd)
	if err := writeFD(fd, data); err != nil {
		return ioErr("write unnamed file", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if beforeLink != nil {
		beforeLink(path)
	}
	err := linkTmpfile(fd, path, &s.viaProc)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return errExists()
	case errors.Is(err, fs.ErrNotExist) && !exists("/proc/self/fd"):
		// /proc was unmounted since New, and the descriptor cannot be
		// linked without it. Nothing was linked; fall back. (Whether the
		// directory is there says nothing: a delete may have removed it,
		// and a create made it again, since the link.)
		return fmt.Errorf("%w: %w", errTmpfileRefused, err)
	case errors.Is(err, fs.ErrNotExist):
		return noDirErr(err)
	}
	return ioErr("link", err)
}

func noDirErr(err error) error {
	return driver.Errorf(driver.Transient, "filestore: %w: %w", errNoDir, err)
}

// Delete removes the key's file under its lock and returns once the removal
// is durable.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	err := s.deleteOnce(ctx, key, cond)
	if errors.Is(err, pack.ErrGone) {
		err = s.deleteOnce(ctx, key, cond) // as Put
	}
	return err
}

func (s *Store) deleteOnce(ctx context.Context, key string, cond driver.Cond) error {
	if err := s.beginWrite(ctx); err != nil {
		return err
	}
	if cond.Kind != driver.Unconditional && cond.Kind != driver.IfMatch {
		return driver.Errorf(driver.InvalidArgument, "filestore: delete with condition %s", cond.Kind)
	}
	path := s.path(key)
	dir := filepath.Dir(path)
	if p := s.cachedPack(dir); p != nil {
		return p.Delete(ctx, key, cond)
	}
	err := s.deleteFile(ctx, key, path, dir, cond)
	if notDir(err) {
		p, perr := s.findPack(dir)
		if perr != nil {
			return perr
		}
		if p != nil {
			return p.Delete(ctx, key, cond)
		}
	}
	return err
}

// deleteFile is Delete of a key kept as a file.
func (s *Store) deleteFile(ctx context.Context, key, path, dir string, cond driver.Cond) error {
	// Until the directory's sync, no other delete removes it (pruneDirs).
	releaseDir, err := s.shareDir(ctx, dir)
	if err != nil {
		return err
	}
	release, err := s.lock(ctx, key)
	if err != nil {
		releaseDir()
		return err
	}
	removed, err := s.remove(ctx, path, cond)
	s.known.forget(path)
	release()
	if err == nil && removed {
		if err = s.dirSyncs.sync(dir); err != nil {
			err = committedErr("sync directory", err)
		}
	}
	releaseDir()
	if err != nil {
		return err
	}
	// Even if the key was not there: a delete of another key in the
	// directory may have left its removal to this one (removeDir).
	s.pruneDirs(ctx, dir)
	return nil
}

// pruneDirs removes dir, then its parents up to the store's root, while
// they are empty: a key directory whose last key is deleted goes with it.
// Keys under a prefix that is never used again (a snapshot's parts, named
// by their snapshot) would otherwise leave one empty directory each, for
// ever, and every listing above them would read them all.
//
// A directory is removed only empty, under its lock (dirLock), which
// every create and delete in it holds from before its change until the
// directory's sync: the directory changed is the one synced, and a
// directory kept open for its syncs that was removed since is opened
// again by its path (dirSync.sync). A create that finds its directory
// removed (this Store knew it, or made it just before it went) makes it
// again (Put, dirAttempts). The removal is not synced: after a crash an
// empty directory may be back, which costs nothing but its inode.
func (s *Store) pruneDirs(ctx context.Context, dir string) {
	for len(dir) > len(s.root) {
		// A large directory has had many keys: likely more are in it, and
		// ext4's rmdir reads all of it to find one (a log's directory
		// after a day of creates and deletes). A listing removes it if it
		// is ever empty (pruneEmpty).
		if fi, err := os.Lstat(dir); err != nil || fi.Size() > pruneSizeMax {
			return
		}
		if !s.removeDir(ctx, dir) {
			return // not empty, gone already, or in use
		}
		s.dirs.forget(dir)
		s.dirSyncs.reopen(dir)
		dir = filepath.Dir(dir)
	}
}

// pruneSizeMax is the size of the largest directory a delete tries to
// remove: 16 blocks of ext4.
const pruneSizeMax = 64 << 10

// pruneListMax bounds the empty directories one listing removes: each
// costs a rmdir(2), 0.1 ms on an ext4 (tens of thousands may have been
// left by a version that removed none), so the first listings after an
// upgrade share the work.
const pruneListMax = 1000

// pruneEmpty removes the empty key directory dir that a listing found, if
// no writer holds it: one that a delete did not remove (its lock was
// busy, the process ended first, or a version of this package that
// removed none deleted its last key). A listing never waits for it.
func (s *Store) pruneEmpty(dir string) bool {
	dl, i := s.dirLockOf(dir)
	removed, _ := s.tryRemoveDir(dl, i, dir)
	if removed {
		s.dirs.forget(dir)
		s.dirSyncs.reopen(dir)
	}
	return removed
}

// remove deletes the file under the key's lock (pruneDirs removes its
// directory, if it is left empty).
func (s *Store) remove(ctx context.Context, path string, cond driver.Cond) (bool, error) {
	if cond.Kind == driver.IfMatch {
		if err := s.checkVersion(path, cond.Version); err != nil {
			return false, err
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err := os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist) && cond.Kind == driver.Unconditional:
		return false, nil
	}
	return false, ioErr("remove", err)
}

func (s *Store) checkVersion(path, want string) error {
	v, ok := s.known.version(path)
	var err error
	if !ok {
		v, err = fileVersion(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return driver.Errorf(driver.PreconditionFailed, "filestore: key does not exist")
	}
	if err != nil {
		return ioErr("read", err)
	}
	if v != want {
		return driver.Errorf(driver.PreconditionFailed, "filestore: version is %s, not %s", v, want)
	}
	return nil
}

// precheckMax is the largest file whose version a compare-and-swap checks
// before taking the lock as well as under it: small records are what
// contending writers swap, and a large value is read and hashed once.
const precheckMax = 64 << 10

// precheckVersion is checkVersion for a file of at most precheckMax
// bytes; a larger one passes, to be checked under the lock.
func (s *Store) precheckVersion(path, want string) error {
	fi, err := os.Lstat(path)
	if err == nil && fi.Size() > precheckMax {
		return nil
	}
	return s.checkVersion(path, want)
}

// knownFiles remembers the versions of a few large values this Store
// wrote, so that a compare-and-swap on one of them (a snapshot, replaced
// again and again) does not read and hash it whole. Each is held open:
// while its inode is held it cannot be freed and given to another file,
// so a key's file with the same device and inode, size and modification
// time as when it was written is that very file, and values are never
// changed in place. Anything else is hashed from the file.
type knownFiles struct {
	mu     sync.Mutex
	files  map[string]knownFile
	order  []string // oldest first
	closed bool
}

type knownFile struct {
	f       *os.File
	info    fs.FileInfo // when written
	version string
}

const (
	knownMin = precheckMax // smaller values are hashed: it costs little
	knownMax = 8           // files held open
)

// heldFile is a value just committed, opened under the key's lock.
type heldFile struct {
	f    *os.File
	info fs.FileInfo
}

// hold forgets what was known of path and, for a large value, opens the
// file just committed there; the caller holds the key's lock.
func (k *knownFiles) hold(path string, size int) *heldFile {
	k.forget(path)
	if size < knownMin {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil
	}
	return &heldFile{f: f, info: fi}
}

// wrote records the version of a held file. It may run after the lock
// was released: if the key was written again meanwhile, the entry names a
// file that is no longer the key's, and version finds that out.
func (k *knownFiles) wrote(path string, h *heldFile, version string) {
	if h == nil {
		return
	}
	f, fi := h.f, h.info
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		_ = f.Close()
		return
	}
	if old, ok := k.files[path]; ok {
		// A later write of this key registered first.
		_ = old.f.Close()
		delete(k.files, path)
		k.order = slices.DeleteFunc(k.order, func(p string) bool { return p == path })
	}
	if k.files == nil {
		k.files = map[string]knownFile{}
	}
	for len(k.order) >= knownMax {
		old := k.order[0]
		k.order = k.order[1:]
		_ = k.files[old].f.Close()
		delete(k.files, old)
	}
	k.files[path] = knownFile{f: f, info: fi, version: version}
	k.order = append(k.order, path)
}

// version returns the version of the file at path if it is one this Store
// wrote and still holds.
func (k *knownFiles) version(path string) (string, bool) {
	v, _, ok := k.versionSize(path)
	return v, ok
}

// versionSize is version and the file's size.
func (k *knownFiles) versionSize(path string) (string, int64, bool) {
	k.mu.Lock()
	e, ok := k.files[path]
	k.mu.Unlock()
	if !ok {
		return "", 0, false
	}
	fi, err := os.Lstat(path)
	if err != nil || !os.SameFile(fi, e.info) || fi.Size() != e.info.Size() || !fi.ModTime().Equal(e.info.ModTime()) {
		return "", 0, false
	}
	return e.version, fi.Size(), true
}

// forget drops path's entry, if any.
func (k *knownFiles) forget(path string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.files[path]
	if !ok {
		return
	}
	_ = e.f.Close()
	delete(k.files, path)
	k.order = slices.DeleteFunc(k.order, func(p string) bool { return p == path })
}

// closeAll closes every file held.
func (k *knownFiles) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.files {
		_ = e.f.Close()
	}
	k.files, k.order, k.closed = nil, nil, true
}

// listedVersion is the version and size of the file at path: known
// without reading it if this Store wrote it and still holds it (a
// snapshot's key, listed to learn its version), else hashed from it.
func (s *Store) listedVersion(path string) (string, int64, error) {
	if v, size, ok := s.known.versionSize(path); ok {
		return v, size, nil
	}
	return fileVersionSize(path)
}

// knownDirs are the key directories this Store made or saw exist, so
// that a create in one makes no stat to find out. A create that finds one
// gone (its last key deleted, here or in another process) makes it again.
type knownDirs struct {
	mu   sync.Mutex
	dirs map[string]struct{}
}

// knownDirsMax bounds the memory: past it the set starts again empty.
const knownDirsMax = 4096

func (k *knownDirs) has(dir string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.dirs[dir]
	return ok
}

func (k *knownDirs) add(dir string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dirs == nil || len(k.dirs) >= knownDirsMax {
		k.dirs = map[string]struct{}{}
	}
	k.dirs[dir] = struct{}{}
}

func (k *knownDirs) forget(dir string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.dirs, dir)
}

// hashBufs are the read buffers of fileVersion.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// fileVersion is the Version of the file at path, hashed as it is read:
// a large value is never held in memory whole.
func fileVersion(path string) (string, error) {
	v, _, err := fileVersionSize(path)
	return v, err
}

// fileVersionSize is fileVersion and the number of bytes hashed.
func fileVersionSize(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	var size int64
	for {
		n, err := f.Read(*bp)
		h.Write((*bp)[:n])
		size += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", 0, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), size, nil
}

func checkAbsent(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return errExists()
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return ioErr("stat", err)
}

func errExists() error { return driver.Errorf(driver.PreconditionFailed, "filestore: key exists") }

// List walks only the directory the prefix names up to its last '/', decodes
// the names it finds, and sorts them: sorting afterwards is simpler than
// walking the tree in key order, which the escaping and suffixes do not keep.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	cands, err := s.listed(ctx, prefix, after)
	if err != nil {
		return nil, err
	}
	items := make([]driver.Item, 0, min(limit, len(cands)))
	for _, c := range cands {
		if len(items) == limit {
			break
		}
		if c.packed {
			items = append(items, driver.Item{Key: c.key, Version: c.version, Size: c.size})
			continue
		}
		// Hashed as it is read, through a pooled buffer: a value kept
		// whole for each key would be garbage at once.
		version, size, err := s.listedVersion(c.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the walk
		}
		if err != nil {
			return nil, ioErr("read", err)
		}
		items = append(items, driver.Item{Key: c.key, Version: version, Size: size})
	}
	return items, nil
}

// ListKeys is List without the versions, which cost a read and a hash of
// each value (driver.KeyLister): a log's truncation and a snapshot's
// collection list keys only, and the segments a collection lists may be
// gigabytes.
func (s *Store) ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	cands, err := s.listed(ctx, prefix, after)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, min(limit, len(cands)))
	for _, c := range cands[:min(limit, len(cands))] {
		keys = append(keys, c.key)
	}
	return keys, nil
}

// listedKey is a key a listing found, and its file; or, for a key in a
// pack, its version and size.
type listedKey struct {
	key, path string
	packed    bool
	version   string
	size      int64
}

// listed walks the keys under prefix after after, in order (List).
func (s *Store) listed(ctx context.Context, prefix, after string) ([]listedKey, error) {
	cands, err := s.listedOnce(ctx, prefix, after)
	if errors.Is(err, pack.ErrGone) {
		cands, err = s.listedOnce(ctx, prefix, after) // as read
	}
	return cands, err
}

func (s *Store) listedOnce(ctx context.Context, prefix, after string) ([]listedKey, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var cands []listedKey
	emit := func(key, path string) {
		if strings.HasPrefix(key, prefix) && key > after {
			cands = append(cands, listedKey{key: key, path: path})
		}
	}
	packed := func(head string) error {
		if s.cachedPack(head) == nil && pack.CheckHead(head) != nil {
			return nil // a file someone else put here
		}
		p, err := s.findPack(head)
		if err != nil || p == nil {
			return err
		}
		items, err := p.List(prefix, after)
		for _, it := range items {
			cands = append(cands, listedKey{key: it.Key, packed: true, version: it.Version, size: it.Size})
		}
		return err
	}
	slash := strings.LastIndexByte(prefix, '/')
	start, comps := s.root, []string(nil)
	if slash >= 0 {
		// The components of "a/b/" are those of the directories a.d/b.d
		// and a final empty ".k", which is not a directory.
		c := encodeKey(prefix[:slash+1])
		comps = c[:len(c)-1]
		start = filepath.Join(append([]string{s.root}, comps...)...)
		if len(start) >= pathMax {
			return nil, nil // no key under it could have been stored
		}
		if p, err := s.findPack(start); p != nil || err != nil {
			if err == nil {
				err = packed(p.Head())
			}
			return cands, err
		}
	}
	var prune func(dir string) bool
	if !s.readOnly {
		budget := pruneListMax
		prune = func(dir string) bool {
			if budget == 0 {
				return false
			}
			budget--
			return s.pruneEmpty(dir)
		}
	}
	if _, err := walk(ctx, start, comps, escapeSegment(prefix[slash+1:]), emit, packed, prune); err != nil {
		return nil, err
	}
	slices.SortFunc(cands, func(a, b listedKey) int { return strings.Compare(a.key, b.key) })
	return cands, nil
}

// walk calls emit for every key stored at or below dir, whose components
// from the root are comps, and packed for every pack's head it finds
// there. At the top level it skips entries whose segment cannot start with
// first (the escaped last segment of the prefix). It calls prune (if not nil) for each directory below dir that it found
// empty, and reports whether dir was, or is now that prune removed what
// it held.
func walk(ctx context.Context, dir string, comps []string, first string, emit func(key, path string), packed func(head string) error, prune func(dir string) bool) (empty bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, ioErr("list", err)
	}
	entries, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil {
		return false, ioErr("list", err)
	}
	left := len(entries)
	for _, e := range entries {
		name := e.Name()
		// Anything without one of our suffixes is not ours: .tmp, .locks,
		// or a file someone else put here.
		if len(name) < 2 || name[len(name)-2] != '.' {
			continue
		}
		stem, suf := name[:len(name)-2], name[len(name)-2:]
		if first != "" && !strings.HasPrefix(stem, first) && (suf != sufCont || !strings.HasPrefix(first, stem)) {
			continue
		}
		c := append(comps[:len(comps):len(comps)], name)
		switch {
		case suf == sufKey && e.Type().IsRegular():
			if key, ok := decodeKey(c); ok {
				emit(key, filepath.Join(dir, name))
			}
		case (suf == sufDir || suf == sufCont) && e.IsDir():
			sub := filepath.Join(dir, name)
			empty, err := walk(ctx, sub, c, "", emit, packed, prune)
			if err != nil {
				return false, err
			}
			if empty && prune != nil && prune(sub) {
				left--
			}
		case suf == sufDir && e.Type().IsRegular():
			if err := packed(filepath.Join(dir, name)); err != nil {
				return false, err
			}
		}
	}
	return left == 0, nil
}

// ErrorKind classifies raw errors from the operating system; the errors
// filestore builds itself carry their kind.
func (s *Store) ErrorKind(err error) driver.Kind { return osKind(err) }

func osKind(err error) driver.Kind { return fsys.Kind(err) }

// kindOr is osKind, with def for errors it cannot place.
func kindOr(err error, def driver.Kind) driver.Kind {
	if k := osKind(err); k != driver.Unknown {
		return k
	}
	return def
}

// ioErr wraps an unexpected error of the file system. A missing file or
// directory here is not a missing key (Get and the conditions report those)
// but the store's directory changing under us, so it is not NotFound.
func ioErr(op string, err error) error {
	k := osKind(err)
	if k == driver.NotFound {
		k = driver.Permanent
	}
	return driver.Errorf(k, "filestore: %s: %w", op, err)
}

// syncCommitted, if set, syncs a directory after a write or delete became
// visible, in place of the descriptor dirSyncs keeps open; tests set it to
// fail there.
var syncCommitted func(dir string) error

// committedErr wraps a failure after the commit point: the rename, link or
// unlink has already made the change visible to every reader, so whatever
// the errno says the outcome is not a definite failure. It is Transient
// (ambiguous), for store.PutResolved to settle by reading back.
func committedErr(op string, err error) error {
	return driver.Errorf(driver.Transient, "filestore: %s after the change became visible (it may be lost in a crash): %w", op, err)
}

// commitErr wraps a failed link or rename. A missing source means our temp
// file was removed as stale while this writer stalled for over a minute:
// nothing was written and a retry may succeed.
func commitErr(op string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return driver.Errorf(driver.Transient, "filestore: %s: %w (was the temp file removed as stale?)", op, err)
	}
	return ioErr(op, err)
}

// Close closes the lock files. Calls after it fail.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.known.closeAll()
	s.dirSyncs.closeAll()
	s.spares.closeAll()
	errs := []error{s.closePacks()}
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu <- struct{}{}
		if st.fd >= 0 {
			errs = append(errs, fsys.CloseFD(st.fd))
			st.fd = -1
		}
		<-st.mu
	}
	errs = append(errs, s.closeDirLocks())
	return errors.Join(errs...)
}

// lock takes the key's stripe: first the in-process mutex, which a
// cancelled ctx abandons, then flock, which is polled for the same reason.
func (s *Store) lock(ctx context.Context, key string) (release func(), err error) {
	release, _, err = s.lockWaited(ctx, key)
	return release, err
}

// lockWaited is lock, and tells whether it had to wait for the stripe.
func (s *Store) lockWaited(ctx context.Context, key string) (release func(), waited bool, err error) {
	i := stripeOf(key)
	st := &s.stripes[i]
	select {
	case st.mu <- struct{}{}:
	default:
		waited = true
		select {
		case st.mu <- struct{}{}:
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	}
	fail := func(err error) (func(), bool, error) {
		<-st.mu
		return nil, waited, err
	}
	if s.closed.Load() {
		return fail(errClosed())
	}
	if st.fd < 0 {
		fd, err := fsys.OpenLockFile(filepath.Join(s.locks, fmt.Sprintf("%02x", i)))
		if err != nil {
			return fail(ioErr("open lock file", err))
		}
		st.fd = fd
	}
	w, err := waitLock(ctx, st.fd, fsys.TryLock)
	waited = waited || w
	if err != nil {
		return fail(err)
	}
	return func() {
		if fsys.Unlock(st.fd) != nil {
			// Closing the descriptor surely drops the lock; the next
			// caller opens it again.
			_ = fsys.CloseFD(st.fd)
			st.fd = -1
		}
		<-st.mu
	}, waited, nil
}

func stripeOf(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32() % numStripes
}

// waitLock takes the flock on fd with try (fsys.TryLock, or
// fsys.TryLockShared for a directory's lock), polled until ctx ends, and
// tells whether it had to wait (fsys.WaitLock).
func waitLock(ctx context.Context, fd int, try func(fd int) (bool, error)) (waited bool, err error) {
	waited, err = fsys.WaitLock(ctx, fd, try)
	if se := (*os.SyscallError)(nil); errors.As(err, &se) {
		return waited, ioErr("flock", se.Err)
	}
	return waited, err
}

// mkdirs creates dir and its missing parents, syncing each parent so that a
// key's directory is as durable as the key.
func (s *Store) mkdirs(dir string) error {
	if _, err := os.Lstat(dir); err == nil || len(dir) <= len(s.root) {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return err
	}
	// If another writer made it first, sync anyway: that writer may not
	// have synced the parent yet, and our key must not depend on it.
	err := os.Mkdir(dir, 0o777)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return noDirErr(err) // the parent was removed since (pruneDirs)
	case err != nil && !errors.Is(err, fs.ErrExist):
		return ioErr("mkdir", err)
	}
	if err := fsys.SyncDir(parent); err != nil {
		return ioErr("sync directory", err)
	}
	return nil
}

// writeBackPiece is the piece in which a large value is written out on
// Linux (writeOut): each piece is handed to the disk (sync_file_range) and
// waited for before the next is written, so that the disk never has more
// than a piece of it queued ahead of another writer's sync. An RSM's
// snapshot writes parts of 8 MiB while its log appends sync every batch:
// 8 MiB files written whole and then synced, back to back, made the syncs
// of small appends beside them wait 2–2.8 ms at the median and up to 11
// ms, in pieces of 256 KiB 0.3 ms and up to 6 ms (docs/BENCHMARKS.md).
const writeBackPiece = 256 << 10

// writeTemp writes data to a new temp file and syncs it, so that it is whole
// on disk before any name of the store points to it.
func (s *Store) writeTemp(data []byte) (string, error) {
	f, err := s.createTemp()
	if err != nil {
		return "", ioErr("create temp file", err)
	}
	err = writeFile(f, data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", ioErr("write temp file", err)
	}
	return f.Name(), nil
}

func (s *Store) createTemp() (*os.File, error) {
	// 128 random bits: no two writers pick the same name, and O_EXCL
	// would refuse it if they did.
	name := filepath.Join(s.tmp, crand.Text()+".tmp")
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
}

// dirSyncs shares directory syncs between the writers of one Store (group
// commit): a writer whose change is visible waits for a sync of its
// directory that started after the change, and one sync serves every
// writer waiting when it starts. Pipelined log writes and a truncation's
// deletes land in one directory, so most of them share a sync.
//
// Each directory stays open between its syncs, so a sync is one fsync(2)
// instead of open, fsync and close. The one open may have been removed
// since (its last key deleted, pruneDirs) and made again: a sync checks
// that it still has a name, else it opens the one at the path, where the
// change it syncs was made. At most idleDirsMax directories stay open
// without a writer.
type dirSyncs struct {
	mu     sync.Mutex
	dirs   map[string]*dirSync
	closed bool
}

const idleDirsMax = 16

// dirSync is the state of one directory's syncs.
type dirSync struct {
	users int // writers using it; under dirSyncs.mu
	// f is the directory, open for the next sync; only the running sync,
	// or with no users the goroutine under dirSyncs.mu, touches it.
	f       *os.File
	reopen  bool // the directory was made again: f is the old one
	mu      sync.Mutex
	cond    sync.Cond
	running bool
	started uint64 // syncs started so far
	synced  uint64 // the latest sync that succeeded, by its start number
}

// sync returns once a sync of dir that started after the call succeeded,
// or with the error of the one this caller ran.
func (ds *dirSyncs) sync(dir string) error {
	ds.mu.Lock()
	if ds.dirs == nil {
		ds.dirs = map[string]*dirSync{}
	}
	d := ds.dirs[dir]
	if d == nil {
		d = &dirSync{}
		d.cond.L = &d.mu
		ds.dirs[dir] = d
	}
	d.users++
	ds.mu.Unlock()
	defer func() {
		ds.mu.Lock()
		if d.users--; d.users == 0 && (ds.closed || len(ds.dirs) > idleDirsMax) {
			d.close()
			delete(ds.dirs, dir)
		}
		ds.mu.Unlock()
	}()

	d.mu.Lock()
	defer d.mu.Unlock()
	// A sync running now may have started before this caller's change.
	need := d.started + 1
	for d.synced < need {
		if d.running {
			d.cond.Wait()
			continue
		}
		d.running = true
		d.started++
		mine := d.started
		reopen := d.reopen
		d.reopen = false
		d.mu.Unlock()
		err := d.sync(dir, reopen)
		d.mu.Lock()
		d.running = false
		if err == nil {
			d.synced = max(d.synced, mine)
		}
		d.cond.Broadcast()
		if err != nil {
			// Waiters covered by this sync run another.
			return err
		}
	}
	return nil
}

// reopen makes the next sync of dir open it again: it was made again, and
// the descriptor kept open is the removed one's.
func (ds *dirSyncs) reopen(dir string) {
	ds.mu.Lock()
	d := ds.dirs[dir]
	ds.mu.Unlock()
	if d != nil {
		d.mu.Lock()
		d.reopen = true
		d.mu.Unlock()
	}
}

// sync syncs dir through the descriptor kept open, opening it first if
// need be; after a failure the next sync opens it again.
func (d *dirSync) sync(dir string, reopen bool) error {
	if syncCommitted != nil {
		return syncCommitted(dir)
	}
	if reopen || d.f != nil && fsys.Unlinked(d.f) {
		d.close()
	}
	if d.f == nil {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		d.f = f
	}
	err := d.f.Sync()
	if err != nil {
		d.close()
	}
	return err
}

func (d *dirSync) close() {
	if d.f != nil {
		_ = d.f.Close()
		d.f = nil
	}
}

// closeAll closes the directories open without a writer; those in use
// are closed when their last writer is done.
func (ds *dirSyncs) closeAll() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.closed = true
	for dir, d := range ds.dirs {
		if d.users == 0 {
			d.close()
			delete(ds.dirs, dir)
		}
	}
}
