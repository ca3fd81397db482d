package filestore

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
)

// createPaths are the ways a create writes its file: an unnamed file
// (O_TMPFILE) in the key's directory, linked by its descriptor or through
// /proc, and the fallback, a named temp file in <dir>/.tmp.
var createPaths = []struct {
	name string
	new  func(t *testing.T, dir string) *Store
}{
	{"unnamed", newUnnamed},
	{"unnamed-via-proc", func(t *testing.T, dir string) *Store {
		d := newUnnamed(t, dir)
		d.viaProc.Store(true)
		return d
	}},
	{"tempfile", func(t *testing.T, dir string) *Store { return newFallback(t, dir) }},
}

// newUnnamed opens a store that creates through O_TMPFILE, and skips the
// test where the system has none.
func newUnnamed(t *testing.T, dir string) *Store {
	t.Helper()
	d := newDriver(t, dir)
	if !d.tmpfile.Load() {
		d.Close()
		if fd, err := openTmpfileSys(dir); err == nil {
			_ = fsys.CloseFD(fd)
			if _, err := os.Stat("/proc/self/fd"); err == nil {
				t.Fatal("O_TMPFILE and /proc work here, yet the store creates through temp files")
			}
		}
		t.Skip("no O_TMPFILE here (not Linux, or the file system refuses it): creates use the temp file path, tested on its own")
	}
	return d
}

// newFallback opens a store that creates through a named temp file, as
// where O_TMPFILE is missing.
func newFallback(t testing.TB, dir string) *Store {
	t.Helper()
	d := newDriver(t, dir)
	d.tmpfile.Store(false)
	return d
}

func TestConformanceTempFileCreates(t *testing.T) {
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store {
		return store.New(newFallback(t, t.TempDir()))
	}, drivertest.Options{})
}

// TestCreateNeedsNoTempDir: a create through an unnamed file does not
// touch <dir>/.tmp, so it works with .tmp replaced by a regular file,
// where the fallback fails.
func TestCreateNeedsNoTempDir(t *testing.T) {
	dir := t.TempDir()
	d := newUnnamed(t, dir)
	s := store.New(d)
	defer s.Close()
	tmp := filepath.Join(dir, tmpDirName)
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	v, err := s.Put(ctx, "log/1", []byte("entry"), store.IfAbsent())
	if err != nil {
		t.Fatalf("create with no temp directory: %v", err)
	}
	if data, gv, err := s.Get(ctx, "log/1"); err != nil || string(data) != "entry" || gv != v {
		t.Fatalf("Get = %q, %s, %v; want the value created at %s", data, gv, err, v)
	}
	d.tmpfile.Store(false)
	if _, err := s.Put(ctx, "log/2", []byte("entry"), store.IfAbsent()); err == nil {
		t.Fatal("the fallback created a key with no temp directory: the test does not tell the two paths apart")
	}
}

// TestCreateLosesToNameMadeBeforeLink: a name created between the
// create's check and its link (by a writer that ignores the lock) makes
// the create fail with ErrPreconditionFailed and leaves that writer's
// value, and no temp file, in place.
func TestCreateLosesToNameMadeBeforeLink(t *testing.T) {
	for _, tc := range createPaths {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := store.New(tc.new(t, dir))
			defer s.Close()
			ctx := t.Context()
			// The key's directory exists first: the intruder writes a file.
			if _, err := s.Put(ctx, "log/0", []byte("first"), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			calls := 0
			beforeLink = func(path string) {
				calls++
				if err := os.WriteFile(path, []byte("intruder"), 0o666); err != nil {
					t.Error(err)
				}
			}
			defer func() { beforeLink = nil }()
			_, err := s.Put(ctx, "log/1", []byte("mine"), store.IfAbsent())
			if calls != 1 {
				t.Fatalf("the hook ran %d times, want 1", calls)
			}
			if !errors.Is(err, store.ErrPreconditionFailed) {
				t.Fatalf("create over a name made before its link = %v; want ErrPreconditionFailed", err)
			}
			if data, _, err := s.Get(ctx, "log/1"); err != nil || string(data) != "intruder" {
				t.Fatalf("the key holds %q, %v; want the intruder's value", data, err)
			}
			if entries, err := os.ReadDir(filepath.Join(dir, tmpDirName)); err != nil || len(entries) != 0 {
				t.Fatalf("the failed create left temp files: %v, %v", entries, err)
			}
			if entries, err := os.ReadDir(filepath.Join(dir, "log.d")); err != nil || len(entries) != 2 {
				t.Fatalf("the key's directory holds %v, %v; want the two keys", entries, err)
			}
		})
	}
}

// TestCreateRemakesRemovedDirectory: a Store remembers the directories it
// made, but a create in one removed behind its back makes it again, as a
// stat before every create did.
func TestCreateRemakesRemovedDirectory(t *testing.T) {
	for _, tc := range createPaths {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := tc.new(t, dir)
			s := store.New(d)
			defer s.Close()
			ctx := t.Context()
			if _, err := s.Put(ctx, "a/b/1", []byte("x"), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "a.d")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(ctx, "a/b/2", []byte("y"), store.IfAbsent()); err != nil {
				t.Fatalf("create in a directory removed behind the store's back: %v", err)
			}
			if data, _, err := s.Get(ctx, "a/b/2"); err != nil || string(data) != "y" {
				t.Fatalf("Get = %q, %v", data, err)
			}
			// The directory synced is the new one, not the removed one
			// the store kept open.
			keyDir := filepath.Join(dir, "a.d", "b.d")
			ds := d.dirSyncs.dirs[keyDir]
			if ds == nil || ds.f == nil {
				t.Fatalf("%s is not kept open after its sync", keyDir)
			}
			kept, err := ds.f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if now, err := os.Stat(keyDir); err != nil || !os.SameFile(kept, now) {
				t.Fatalf("the directory kept open for syncs is not the one at %s (%v)", keyDir, err)
			}
		})
	}
}

// TestLargeValuesInPieces: values written out piece by piece
// (writeBackPiece) read back whole, whatever their size against a piece,
// created on every path and swapped (a temp file renamed).
func TestLargeValuesInPieces(t *testing.T) {
	sizes := []int{writeBackPiece - 1, writeBackPiece, writeBackPiece + 1, 4*writeBackPiece + 17}
	for _, tc := range createPaths {
		t.Run(tc.name, func(t *testing.T) {
			s := store.New(tc.new(t, t.TempDir()))
			defer s.Close()
			ctx := t.Context()
			for i, size := range sizes {
				val := make([]byte, size)
				if _, err := rand.Read(val); err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("big/%d", i)
				v, err := s.Put(ctx, key, val, store.IfAbsent())
				if err != nil {
					t.Fatalf("create of %d bytes: %v", size, err)
				}
				if data, gv, err := s.Get(ctx, key); err != nil || !bytes.Equal(data, val) || gv != v {
					t.Fatalf("%d bytes created: read %d bytes, version %s (%v); want %s", size, len(data), gv, err, v)
				}
				val[size/2] ^= 0xff // a swap writes a temp file and renames it
				v2, err := s.Put(ctx, key, val, store.IfMatch(v))
				if err != nil {
					t.Fatalf("swap of %d bytes: %v", size, err)
				}
				if data, gv, err := s.Get(ctx, key); err != nil || !bytes.Equal(data, val) || gv != v2 {
					t.Fatalf("%d bytes swapped: read %d bytes, version %s (%v); want %s", size, len(data), gv, err, v2)
				}
			}
		})
	}
}
