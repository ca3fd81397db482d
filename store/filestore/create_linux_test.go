package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// TestTmpfileRefusedFallsBack: where the file system refuses O_TMPFILE
// (EOPNOTSUPP, or EISDIR and EINVAL from old kernels), a create falls back
// to a named temp file, and later creates go there at once.
func TestTmpfileRefusedFallsBack(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.EISDIR, syscall.EINVAL} {
		t.Run(errno.Error(), func(t *testing.T) {
			d := newUnnamed(t, t.TempDir())
			s := store.New(d)
			defer s.Close()
			calls := 0
			openTmpfile = func(dir string) (int, error) {
				calls++
				return -1, &fs.PathError{Op: "open O_TMPFILE", Path: dir, Err: errno}
			}
			defer func() { openTmpfile = openTmpfileSys }()
			ctx := t.Context()
			for _, key := range []string{"log/1", "log/2"} {
				if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
					t.Fatalf("create of %s with O_TMPFILE refused: %v", key, err)
				}
				if data, _, err := s.Get(ctx, key); err != nil || string(data) != key {
					t.Fatalf("Get(%s) = %q, %v", key, data, err)
				}
			}
			if calls != 1 || d.tmpfile.Load() {
				t.Fatalf("O_TMPFILE tried %d times, still in use: %v; want one try, then the fallback only", calls, d.tmpfile.Load())
			}
		})
	}
	// Any other failure is the create's, not a reason to fall back.
	d := newUnnamed(t, t.TempDir())
	s := store.New(d)
	defer s.Close()
	openTmpfile = func(dir string) (int, error) {
		return -1, &fs.PathError{Op: "open O_TMPFILE", Path: dir, Err: syscall.ENOSPC}
	}
	defer func() { openTmpfile = openTmpfileSys }()
	if _, err := s.Put(t.Context(), "k", nil, store.IfAbsent()); !errors.Is(err, store.ErrTransient) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create with a full disk = %v; want a transient error", err)
	}
	if !d.tmpfile.Load() {
		t.Fatal("a full disk turned O_TMPFILE off")
	}
}

// TestProbeTmpfile: New finds out whether O_TMPFILE can be used (the file
// system has it, and /proc is there for linkTmpfile), and its probe leaves
// nothing behind.
func TestProbeTmpfile(t *testing.T) {
	d := newDriver(t, t.TempDir())
	defer d.Close()
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		if d.tmpfile.Load() {
			t.Fatal("O_TMPFILE in use without /proc/self/fd")
		}
		return
	}
	calls := 0
	openTmpfile = func(dir string) (int, error) {
		calls++
		return -1, &fs.PathError{Op: "open O_TMPFILE", Path: dir, Err: syscall.EOPNOTSUPP}
	}
	defer func() { openTmpfile = openTmpfileSys }()
	dir := t.TempDir()
	d2 := newDriver(t, dir)
	defer d2.Close()
	if calls != 1 || d2.tmpfile.Load() {
		t.Fatalf("New with O_TMPFILE refused: %d probes, in use %v; want 1 probe and the fallback", calls, d2.tmpfile.Load())
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 2 {
		t.Fatalf("the store's directory holds %v, %v; want only .locks and .tmp", entries, err)
	}
}

// TestCloseClosesDirectories: the directories dirSyncs keeps open between
// syncs are closed by Close, and no more than idleDirsMax stay open.
func TestCloseClosesDirectories(t *testing.T) {
	openFDs := func() int { return openFDs(t) }
	before := openFDs()
	d := newDriver(t, t.TempDir())
	s := store.New(d)
	ctx := t.Context()
	for i := range idleDirsMax + 10 {
		if _, err := s.Put(ctx, fmt.Sprintf("d%d/k", i), nil, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	open := 0
	for _, ds := range d.dirSyncs.dirs {
		if ds.f != nil {
			open++
		}
	}
	if open == 0 || open > idleDirsMax+1 {
		t.Fatalf("%d directories open after creates in %d; want some, at most %d", open, idleDirsMax+10, idleDirsMax+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(); after != before {
		t.Fatalf("%d descriptors open after Close, %d before New", after, before)
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestLinkViaProcWhenRefused: where linking the unnamed file's descriptor
// itself is refused (ENOENT, to a process without CAP_DAC_READ_SEARCH),
// creates link it through /proc/self/fd, and stop trying the first way.
func TestLinkViaProcWhenRefused(t *testing.T) {
	calls := 0
	linkEmptyPath = func(int, string) error {
		calls++
		return syscall.ENOENT
	}
	defer func() { linkEmptyPath = linkEmptyPathSys }()
	d := newUnnamed(t, t.TempDir()) // its probe learns it
	s := store.New(d)
	defer s.Close()
	if !d.viaProc.Load() || calls != 1 {
		t.Fatalf("after New's probe: via /proc %v, %d tries; want true, 1", d.viaProc.Load(), calls)
	}
	d.viaProc.Store(false) // as if New had found it allowed
	ctx := t.Context()
	for _, key := range []string{"log/1", "log/2"} {
		if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
			t.Fatalf("create of %s: %v", key, err)
		}
		if data, _, err := s.Get(ctx, key); err != nil || string(data) != key {
			t.Fatalf("Get(%s) = %q, %v", key, data, err)
		}
	}
	if !d.viaProc.Load() || calls != 2 {
		t.Fatalf("via /proc %v after %d refusals; want true after 2 (one in New, one for the first create)", d.viaProc.Load(), calls)
	}
	if _, err := s.Put(ctx, "log/1", nil, store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("create of an existing key through /proc = %v; want ErrPreconditionFailed", err)
	}
}
