package filestore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
)

// TestDirSyncsShareOneSync: writers whose changes became visible while a
// sync of their directory ran wait for it, then share one more sync; none
// returns on a sync that started before its call.
func TestDirSyncsShareOneSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls []chan error // one per sync started; the test answers each
		restore := SetSyncCommitted(func(dir string) error {
			ch := make(chan error)
			mu.Lock()
			calls = append(calls, ch)
			mu.Unlock()
			return <-ch
		})
		defer restore()
		started := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(calls)
		}
		answer := func(i int, err error) {
			mu.Lock()
			ch := calls[i]
			mu.Unlock()
			ch <- err
		}

		var ds dirSyncs
		results := make(chan error, 4)
		go func() { results <- ds.sync("d") }() // runs sync 0
		synctest.Wait()
		if n := started(); n != 1 {
			t.Fatalf("%d syncs started for one writer, want 1", n)
		}
		for range 3 {
			go func() { results <- ds.sync("d") }() // wait for sync 0, then share sync 1
		}
		synctest.Wait()
		if n := started(); n != 1 {
			t.Fatalf("%d syncs started while one ran, want 1 (the others wait)", n)
		}
		answer(0, nil)
		if err := <-results; err != nil {
			t.Fatalf("the first writer: %v", err)
		}
		synctest.Wait()
		if n := started(); n != 2 {
			t.Fatalf("%d syncs started, want 2: the three writers that came during the first share the second", n)
		}
		select {
		case err := <-results:
			t.Fatalf("a writer returned (%v) before a sync that started after its call ended", err)
		default:
		}
		// The second sync fails: its runner gets the error, and the two
		// it served run a third.
		answer(1, syscall.EIO)
		synctest.Wait()
		if n := started(); n != 3 {
			t.Fatalf("%d syncs started after a failed one, want 3", n)
		}
		answer(2, nil)
		var failed, ok int
		for range 3 {
			if err := <-results; errors.Is(err, syscall.EIO) {
				failed++
			} else if err == nil {
				ok++
			}
		}
		if failed != 1 || ok != 2 {
			t.Fatalf("%d writers saw the failed sync and %d succeeded; want 1 and 2", failed, ok)
		}
		for dir, d := range ds.dirs {
			if d.users != 0 {
				t.Errorf("%s: %d users after every writer returned", dir, d.users)
			}
		}
		ds.closeAll()
		if len(ds.dirs) != 0 {
			t.Errorf("%d directories still tracked after closeAll", len(ds.dirs))
		}
	})
}

// TestPutSyncsTheDirectory: a put returns only after a sync of the
// key's directory, and a failed sync is reported as ambiguous.
func TestPutSyncsTheDirectory(t *testing.T) {
	s := openTemp(t)
	var synced []string
	var mu sync.Mutex
	defer SetSyncCommitted(func(dir string) error {
		mu.Lock()
		synced = append(synced, dir)
		mu.Unlock()
		return fsys.SyncDir(dir)
	})()
	ctx := t.Context()
	if _, err := s.Put(ctx, "a/b", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || filepath.Base(synced[0]) != "a.d" {
		t.Fatalf("directories synced: %q, want the key's", synced)
	}
}

// TestLargeSwapChecksVersion: a compare-and-swap of a value above the size
// checked before the lock is still refused on a stale version, and the
// version check reads the file without holding it in memory.
func TestLargeSwapChecksVersion(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	v1, err := s.Put(ctx, "snap", big, store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, v, err := s.Get(ctx, "snap"); err != nil || v != v1 || v1 != Version(big) {
		t.Fatalf("Get: version %s, %v; Put gave %s, want %s", v, err, v1, Version(big))
	}
	big2 := append([]byte(nil), big...)
	big2[len(big2)-1]++
	v2, err := s.Put(ctx, "snap", big2, store.IfMatch(v1))
	if err != nil || v2 != Version(big2) {
		t.Fatalf("swap on the current version: %s, %v", v2, err)
	}
	if _, err := s.Put(ctx, "snap", big, store.IfMatch(v1)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("swap on a stale version of a large value: %v, want precondition failed", err)
	}
	if err := s.Delete(ctx, "snap", store.IfMatch(v1)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("delete on a stale version of a large value: %v, want precondition failed", err)
	}

	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, big, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := fileVersion(path); err != nil { // warm the buffer pool
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := fileVersion(path)
	runtime.ReadMemStats(&after)
	if err != nil || v != Version(big) {
		t.Fatalf("fileVersion: %s, %v; want %s", v, err, Version(big))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("hashing a %d-byte file allocated %d bytes", len(big), n)
	}
	if _, err := fileVersion(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("fileVersion of a missing file: %v", err)
	}
}

// TestKnownVersions: a large value this Store wrote keeps its version
// known without reading it, as long as the key's file is the one it wrote:
// not after another Store replaced it, an edit in place, a delete, or
// Close; small values are always read.
func TestKnownVersions(t *testing.T) {
	dir := t.TempDir()
	d1, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := store.New(d1), store.New(d2)
	defer s2.Close()
	ctx := t.Context()
	big := make([]byte, knownMin+1)
	path := d1.path("snap")
	v1, err := s1.Put(ctx, "snap", big, store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := d1.known.version(path); !ok || v != v1 {
		t.Fatalf("after a large put: %q, %v; want %q known", v, ok, v1)
	}
	// Swaps go on from the known version.
	big[0] = 1
	v2, err := s1.Put(ctx, "snap", big, store.IfMatch(v1))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := d1.known.version(path); !ok || v != v2 {
		t.Fatalf("after a swap: %q, %v; want %q known", v, ok, v2)
	}
	// Another store (as another process would) replaces it: not known.
	big[0] = 2
	v3, err := s2.Put(ctx, "snap", big, store.IfMatch(v2))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d1.known.version(path); ok {
		t.Fatal("a file another store wrote is taken for the one this store wrote")
	}
	if _, err := s1.Put(ctx, "snap", big, store.IfMatch(v2)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("swap on the version another store replaced: %v", err)
	}
	big[0] = 3
	v4, err := s1.Put(ctx, "snap", big, store.IfMatch(v3))
	if err != nil {
		t.Fatalf("swap on the other store's version: %v", err)
	}
	// An edit in place (out of contract, but not to be hidden).
	if err := os.WriteFile(path, append(big, 'x'), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, ok := d1.known.version(path); ok {
		t.Fatal("a file edited in place keeps its known version")
	}
	if _, err := s1.Put(ctx, "snap", big, store.IfMatch(v4)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("swap over an edit in place: %v", err)
	}
	// Delete forgets; small values are never held.
	if err := s1.Delete(ctx, "snap", store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := d1.known.version(path); ok || len(d1.known.files) != 0 {
		t.Fatal("a deleted key's version is still known")
	}
	if _, err := s1.Put(ctx, "small", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if len(d1.known.files) != 0 {
		t.Fatal("a small value is held open")
	}
	// At most knownMax files are held open.
	for i := range knownMax + 3 {
		if _, err := s1.Put(ctx, "big/"+string(rune('a'+i)), big, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(d1.known.files); n != knownMax {
		t.Fatalf("%d files held open, want %d", n, knownMax)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if len(d1.known.files) != 0 {
		t.Fatal("Close left files open")
	}
}

// TestListVersions: List reports each key's version and size as Get
// does, whether the value is small, large and held by this store, or
// replaced by another store or edited in place since this store wrote it.
func TestListVersions(t *testing.T) {
	dir := t.TempDir()
	d1, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := store.New(d1), store.New(d2)
	defer s1.Close()
	defer s2.Close()
	ctx := t.Context()
	check := func(when string) {
		t.Helper()
		items, err := s1.List(ctx, "k/", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 3 {
			t.Fatalf("%s: listed %d keys, want 3", when, len(items))
		}
		for _, it := range items {
			data, v, err := s1.Get(ctx, it.Key)
			if err != nil {
				t.Fatal(err)
			}
			if it.Version != v || it.Size != int64(len(data)) {
				t.Fatalf("%s: %s listed as version %s, %d bytes; Get says %s, %d bytes", when, it.Key, it.Version, it.Size, v, len(data))
			}
		}
	}
	big := make([]byte, knownMin+100_000) // larger than one read buffer
	for k, v := range map[string][]byte{"k/a": []byte("small"), "k/big": big, "k/empty": nil} {
		if _, err := s1.Put(ctx, k, v, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := d1.known.version(d1.path("k/big")); !ok {
		t.Fatal("the large value is not held")
	}
	check("as written")
	_, v, err := s2.Get(ctx, "k/big")
	if err != nil {
		t.Fatal(err)
	}
	big[0] = 1
	if _, err := s2.Put(ctx, "k/big", big, store.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	check("replaced by another store")
	if err := os.WriteFile(d1.path("k/big"), append(big, 'x'), 0o666); err != nil {
		t.Fatal(err)
	}
	check("edited in place")
}
