//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// emptyDirs lists the directories under root that hold nothing, but the
// store's own .tmp.
func emptyDirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == filepath.Join(root, ".tmp") {
			return nil
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDeleteRemovesEmptyDirs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := store.New(newDriver(t, root))
	defer s.Close()
	put := func(key string) {
		t.Helper()
		if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	del := func(key string) {
		t.Helper()
		if err := s.Delete(ctx, key, store.Cond{}); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(root, rel))
		return err == nil
	}
	for _, k := range []string{"g/snap/b1/00000", "g/snap/b1/00001", "g/snap/b2/00000", "g/log/1", "top"} {
		put(k)
	}

	del("g/snap/b1/00000")
	if !exists("g.d/snap.d/b1.d") {
		t.Fatal("a directory with a key left was removed")
	}
	del("g/snap/b1/00001")
	if exists("g.d/snap.d/b1.d") {
		t.Error("the directory of the last key deleted is still there")
	}
	if !exists("g.d/snap.d/b2.d") || !exists("g.d/log.d") {
		t.Fatal("a sibling directory with keys was removed")
	}
	del("g/snap/b2/00000")
	if exists("g.d/snap.d") {
		t.Error("a parent left empty is still there")
	}
	if !exists("g.d") {
		t.Fatal("a parent with keys below it was removed")
	}
	del("g/log/1")
	del("top")
	if exists("g.d") {
		t.Error("the group's directory is still there with no key below it")
	}
	if !exists("") || !exists(".locks") || !exists(".tmp") {
		t.Fatal("the store's own directories were removed")
	}
	if e := emptyDirs(t, root); len(e) > 0 {
		t.Errorf("empty directories left: %v", e)
	}

	// A key is created again where its directory was removed, and the
	// other keys and listings are as before.
	put("g/snap/b1/00000")
	data, _, err := s.Get(ctx, "g/snap/b1/00000")
	if err != nil || string(data) != "g/snap/b1/00000" {
		t.Fatalf("get after the directory was made again: %q, %v", data, err)
	}
	items, err := s.List(ctx, "g/", "", 10)
	if err != nil || len(items) != 1 || items[0].Key != "g/snap/b1/00000" {
		t.Fatalf("list: %v, %v", items, err)
	}
	// A delete of a key that is not there removes nothing.
	if err := s.Delete(ctx, "g/snap/b1/zzz", store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if !exists("g.d/snap.d/b1.d/00000.k") {
		t.Fatal("the key is gone")
	}
}

// The directory a Store keeps open for its syncs may be removed by
// another Store (or process) that deleted its last key, and made again by
// a create there. A create of the first Store then links its file into the
// new directory, and its sync must be of that one: fsync(2) of the removed
// directory would leave the new name unsynced.
func TestSyncFollowsDirectoryMadeAgain(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	da, db := newDriver(t, root), newDriver(t, root)
	a, b := store.New(da), store.New(db)
	defer a.Close()
	defer b.Close()
	mustPut := func(s *store.Store, key string) {
		t.Helper()
		if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	dir := filepath.Join(root, "d.d")
	ino := func(path string) uint64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	mustPut(a, "d/x")
	old := ino(dir)
	if err := b.Delete(ctx, "d/x", store.Cond{}); err != nil {
		t.Fatal(err)
	}
	mustPut(b, "d/y")
	if ino(dir) == old { // a's descriptor keeps the old inode from reuse
		t.Fatal("the directory was not removed and made again")
	}
	mustPut(a, "d/z")
	da.dirSyncs.mu.Lock()
	d := da.dirSyncs.dirs[dir]
	da.dirSyncs.mu.Unlock()
	if d == nil || d.f == nil {
		t.Fatal("a keeps no directory open for its syncs")
	}
	fi, err := d.f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Sys().(*syscall.Stat_t).Ino, ino(dir); got != want {
		t.Fatalf("a synced directory inode %d (the removed one: %v); the directory holding its key is %d", got, got == old, want)
	}
	for _, k := range []string{"d/y", "d/z"} {
		if _, _, err := a.Get(ctx, k); err != nil {
			t.Errorf("get %s: %v", k, err)
		}
	}
}

// Creates and deletes of distinct keys in a few shared directories, by
// two Stores (as two processes: each with its own directory caches, one
// creating through unnamed files, the other through named temp files):
// each directory is removed and made again many times under them, and
// every operation succeeds.
func TestCreatesRaceDirectoryRemoval(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	stores := twoStores(t, root)
	const workers, rounds, dirs = 8, 150, 2
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			s := stores[w%2]
			for r := range rounds {
				key := fmt.Sprintf("g/d%d/w%d-%d", (w+r)%dirs, w, r)
				if _, err := s.Put(ctx, key, []byte(key), store.IfAbsent()); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					continue
				}
				data, _, err := s.Get(ctx, key)
				if err != nil || string(data) != key {
					errs <- fmt.Errorf("get %s: %q, %v", key, data, err)
				}
				if err := s.Delete(ctx, key, store.Cond{}); err != nil {
					errs <- fmt.Errorf("delete %s: %w", key, err)
				}
				if _, _, err := s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
					errs <- fmt.Errorf("get %s after its delete: %v; want not found", key, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 10 {
		t.Errorf("... %d errors in all", n)
	}
	if e := emptyDirs(t, root); len(e) > 0 {
		t.Errorf("empty directories left: %v", e)
	}
}

// Empty key directories that no delete removed (a version that removed
// none left them, or a delete found the directory's lock busy) are
// removed by the listings that walk them; foreign files keep theirs, and
// a read-only store removes nothing.
func TestListPrunesEmptyDirs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := store.New(newDriver(t, root))
	defer s.Close()
	if _, err := s.Put(ctx, "g/snap/m", []byte("m"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	left := []string{"g.d/snap.d/b1.d", "g.d/snap.d/b2.d", "g.d/snap.d/n.d/o.d/p.d", "g.d/x.d"}
	for _, d := range left {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "g.d/x.d/foreign.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	ro, err := NewReadOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if items, err := ro.List(ctx, "g/", "", 10); err != nil || len(items) != 1 {
		t.Fatalf("read-only list: %v, %v", items, err)
	}
	if e := emptyDirs(t, root); len(e) != 3 {
		t.Fatalf("a read-only listing changed the empty directories: %v", e)
	}

	items, err := s.List(ctx, "g/", "", 10)
	if err != nil || len(items) != 1 || items[0].Key != "g/snap/m" {
		t.Fatalf("list: %v, %v", items, err)
	}
	if e := emptyDirs(t, root); len(e) > 0 {
		t.Errorf("empty directories left after a listing: %v", e)
	}
	for _, d := range []string{"g.d/snap.d/n.d", "g.d/snap.d/b1.d"} {
		if _, err := os.Lstat(filepath.Join(root, d)); err == nil {
			t.Errorf("%s is still there", d)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "g.d/x.d/foreign.txt")); err != nil {
		t.Errorf("a foreign file's directory was removed: %v", err)
	}
}

// A listing does not remove a directory a create holds (between making
// it and linking its key): the create still succeeds.
func TestListLeavesDirectoryOfACreate(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	s := store.New(d)
	defer s.Close()
	dir := filepath.Join(root, "g.d", "new.d")
	listed := false
	beforeLink = func(string) {
		if listed {
			return
		}
		listed = true
		if _, err := os.Lstat(dir); err != nil {
			t.Errorf("the directory is not there before the link: %v", err)
		}
		if _, err := s.List(ctx, "g/", "", 10); err != nil {
			t.Errorf("list: %v", err)
		}
		if _, err := os.Lstat(dir); err != nil {
			t.Errorf("a listing removed the directory of a create in progress: %v", err)
		}
	}
	defer func() { beforeLink = nil }()
	if _, err := s.Put(ctx, "g/new/k", []byte("v"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if !listed {
		t.Fatal("the create did not reach its link")
	}
	if data, _, err := s.Get(ctx, "g/new/k"); err != nil || string(data) != "v" {
		t.Fatalf("get: %q, %v", data, err)
	}
}

// One listing removes at most pruneListMax empty directories; the next
// ones go on.
func TestListPrunesBoundedWork(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := store.New(newDriver(t, root))
	defer s.Close()
	const extra = 7
	for i := range pruneListMax + extra {
		if err := os.MkdirAll(filepath.Join(root, "g.d", fmt.Sprintf("b%d.d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{extra, 0} {
		if _, err := s.List(ctx, "g/", "", 10); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(filepath.Join(root, "g.d"))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != want {
			t.Fatalf("%d empty directories left after a listing; want %d", len(entries), want)
		}
	}
}

// A delete does not try to remove a large directory (one that has held
// many keys: its log of names may be long to read through), even empty;
// the next listing does.
func TestDeleteLeavesLargeDirToListing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := store.New(newDriver(t, root))
	defer s.Close()
	long := strings.Repeat("x", 180) // about 200 bytes of directory per name
	var keys []string
	for i := 0; ; i++ {
		key := fmt.Sprintf("g/big/%s-%04d", long, i)
		if _, err := s.Put(ctx, key, nil, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		fi, err := os.Stat(filepath.Join(root, "g.d", "big.d"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > pruneSizeMax {
			break
		}
		if i == 2000 {
			t.Skip("this file system does not report a directory's size in bytes")
		}
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	big := filepath.Join(root, "g.d", "big.d")
	fi, err := os.Stat(big)
	if err != nil {
		t.Fatalf("the large directory was removed by a delete: %v", err)
	}
	if fi.Size() <= pruneSizeMax {
		t.Skip("this file system shrinks a directory as its names are removed")
	}
	if _, err := s.List(ctx, "g/", "", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(big); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the listing left the empty large directory: %v", err)
	}
}
