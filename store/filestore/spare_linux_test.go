package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tenure-io/tenure/store"
)

// spareOf returns the inode of dir's open spare, after waiting for the
// spares being opened; ok is false when dir has none.
func spareOf(t *testing.T, d *Store, dir string) (ino uint64, ok bool) {
	t.Helper()
	d.spares.opening.Wait()
	d.spares.mu.Lock()
	defer d.spares.mu.Unlock()
	for _, f := range d.spares.files {
		if f.dir == dir && f.fd >= 0 {
			var st unix.Stat_t
			if err := unix.Fstat(f.fd, &st); err != nil {
				t.Fatal(err)
			}
			return st.Ino, true
		}
	}
	return 0, false
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestCreatesTakeSpares: after a create, the next unnamed file of its
// directory is open; the next create in that directory writes and links
// that very file, and opens another.
func TestCreatesTakeSpares(t *testing.T) {
	root := t.TempDir()
	d := newUnnamed(t, root)
	s := store.New(d)
	defer s.Close()
	ctx := t.Context()
	dir := filepath.Join(root, "log.d")
	if _, err := s.Put(ctx, "log/0", []byte("0"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		spare, ok := spareOf(t, d, dir)
		if !ok {
			t.Fatalf("no spare open for %s before create %d", dir, i)
		}
		key := fmt.Sprintf("log/%d", i)
		if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		if got := inodeOf(t, d.path(key)); got != spare {
			t.Fatalf("create %d linked inode %d; the spare was %d", i, got, spare)
		}
		if data, _, err := s.Get(ctx, key); err != nil || string(data) != key {
			t.Fatalf("Get(%s) = %q, %v", key, data, err)
		}
	}
	// A create refused up front (the name is there) spends no spare.
	spare, _ := spareOf(t, d, dir)
	if _, err := s.Put(ctx, "log/3", []byte("again"), store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("create of an existing key = %v; want ErrPreconditionFailed", err)
	}
	if after, ok := spareOf(t, d, dir); !ok || after != spare {
		t.Fatalf("after a create refused up front: spare %d (open %v); want %d still", after, ok, spare)
	}
	// One whose name appears just before its link (a writer that ignored
	// the lock) links nothing, the spare included, and leaves the other
	// writer's value.
	beforeLink = func(path string) {
		if err := os.WriteFile(path, []byte("other"), 0o666); err != nil {
			t.Error(err)
		}
	}
	defer func() { beforeLink = nil }()
	if _, err := s.Put(ctx, "log/21", []byte("mine"), store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("create that lost to another writer = %v; want ErrPreconditionFailed", err)
	}
	if data, _, err := s.Get(ctx, "log/21"); err != nil || string(data) != "other" {
		t.Fatalf("after a create lost at its link, Get = %q, %v; want the other writer's", data, err)
	}
	if after, ok := spareOf(t, d, dir); !ok || after == spare {
		t.Fatalf("after a create lost at its link: spare %d (open %v), was %d; want a new one", after, ok, spare)
	}
}

// TestSpareOfRemovedDirectory: a spare opened before an operator removed
// its directory still leads to a create that lands, whether the directory
// was made again meanwhile or not.
func TestSpareOfRemovedDirectory(t *testing.T) {
	for _, remake := range []bool{false, true} {
		t.Run(fmt.Sprintf("remade=%v", remake), func(t *testing.T) {
			root := t.TempDir()
			d := newUnnamed(t, root)
			s := store.New(d)
			defer s.Close()
			ctx := t.Context()
			dir := filepath.Join(root, "log.d")
			if _, err := s.Put(ctx, "log/1", []byte("1"), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			if _, ok := spareOf(t, d, dir); !ok {
				t.Fatal("no spare after a create")
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if remake {
				if err := os.Mkdir(dir, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Put(ctx, "log/2", []byte("2"), store.IfAbsent()); err != nil {
				t.Fatalf("create after the directory was removed: %v", err)
			}
			if data, _, err := s.Get(ctx, "log/2"); err != nil || string(data) != "2" {
				t.Fatalf("Get = %q, %v", data, err)
			}
			if _, _, err := s.Get(ctx, "log/1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Get of the removed key = %v; want ErrNotFound", err)
			}
		})
	}
}

// TestSparesBounded: creates in many directories keep at most maxSpares
// open, those of the directories written last; Close closes them, and no
// file is left where they were opened.
func TestSparesBounded(t *testing.T) {
	before := openFDs(t)
	root := t.TempDir()
	d := newUnnamed(t, root)
	s := store.New(d)
	ctx := t.Context()
	const dirs = maxSpares + 3
	for i := range dirs {
		if _, err := s.Put(ctx, fmt.Sprintf("d%d/k", i), nil, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		d.spares.opening.Wait() // else the last ones may still be opening
	}
	for i := range dirs {
		_, ok := spareOf(t, d, filepath.Join(root, fmt.Sprintf("d%d.d", i)))
		if want := i >= dirs-maxSpares; ok != want {
			t.Fatalf("directory %d of %d has a spare: %v; want %v (the last %d)", i, dirs, ok, want, maxSpares)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after Close, %d before New", after, before)
	}
	for i := range dirs {
		entries, err := os.ReadDir(filepath.Join(root, fmt.Sprintf("d%d.d", i)))
		if err != nil || len(entries) != 1 {
			t.Fatalf("directory %d holds %v, %v; want only its key", i, entries, err)
		}
	}
}

// TestSpareOpenFailureIsNotTheCreates: a spare that fails to open leaves
// no trace; the next create opens its own file.
func TestSpareOpenFailureIsNotTheCreates(t *testing.T) {
	root := t.TempDir()
	d := newUnnamed(t, root)
	s := store.New(d)
	defer s.Close()
	ctx := t.Context()
	calls := 0
	openTmpfile = func(dir string) (int, error) {
		calls++
		if calls == 2 { // the spare opened after the first create
			return -1, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: syscall.EMFILE}
		}
		return openTmpfileSys(dir)
	}
	defer func() { openTmpfile = openTmpfileSys }()
	for _, key := range []string{"log/1", "log/2"} {
		if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
			t.Fatalf("create of %s: %v", key, err)
		}
		d.spares.opening.Wait()
	}
	if calls != 4 {
		t.Fatalf("%d opens; want 4 (a create, its failed spare, a create, its spare)", calls)
	}
	if _, ok := spareOf(t, d, filepath.Join(root, "log.d")); !ok {
		t.Fatal("no spare after the second create")
	}
}
