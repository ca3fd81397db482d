package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestMain fails the run if a test leaves goroutines of tenure's code
// behind.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m) }

func newDriver(t testing.TB, dir string) *Store {
	t.Helper()
	d, err := New(dir)
	if err != nil {
		t.Fatalf("New(%q): %v", dir, err)
	}
	return d
}

func openTemp(t *testing.T) *store.Store {
	return store.New(newDriver(t, t.TempDir()))
}

func fileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, openTemp, drivertest.Options{
		// An answer is lost when the directory sync after the rename or
		// link fails: the write is visible, its caller hears an error.
		LostAnswer: func(t *testing.T) (*store.Store, func()) {
			var lose atomic.Bool
			t.Cleanup(SetSyncCommitted(func(dir string) error {
				if lose.Swap(false) {
					return &fs.PathError{Op: "sync", Path: dir, Err: syscall.EIO}
				}
				return fsys.SyncDir(dir)
			}))
			return openTemp(t), func() { lose.Store(true) }
		},
	})
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	base := t.TempDir()
	regular := filepath.Join(base, "regular")
	if err := os.WriteFile(regular, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpIsFile := filepath.Join(base, "tmp-is-file")
	if err := os.MkdirAll(tmpIsFile, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpIsFile, tmpDirName), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	good := []struct{ name, url, dir string }{
		{"absolute", fileURL(filepath.Join(base, "abs")), filepath.Join(base, "abs")},
		{"missing parents are created", fileURL(filepath.Join(base, "deep", "er", "dir")), filepath.Join(base, "deep", "er", "dir")},
		{"localhost", "file://localhost" + filepath.Join(base, "local"), filepath.Join(base, "local")},
		{"escaped path", fileURL(filepath.Join(base, "with space")), filepath.Join(base, "with space")},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(ctx, c.url)
			if err != nil {
				t.Fatalf("Open(%q): %v", c.url, err)
			}
			defer s.Close()
			if _, err := s.Put(ctx, "k", []byte("v"), store.IfAbsent()); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if _, err := os.Stat(filepath.Join(c.dir, "k.k")); err != nil {
				t.Fatalf("the key is not stored under %s: %v", c.dir, err)
			}
		})
	}

	bad := []struct {
		name, url string
		want      error  // sentinel the error must match; nil: any error
		mention   string // text the message must contain, to be clear
	}{
		{"regular file", fileURL(regular), store.ErrPermanent, "not a directory"},
		{"below a regular file", fileURL(filepath.Join(regular, "sub")), store.ErrPermanent, "not a directory"},
		{"temp dir is a file", fileURL(tmpIsFile), store.ErrPermanent, ".tmp"},
		{"relative without slashes", "file:data", store.ErrInvalidArgument, "file://./"},
		{"remote host", "file://data/dir", store.ErrInvalidArgument, `host "data"`},
		{"no directory", "file://", store.ErrInvalidArgument, "no directory"},
		{"query", fileURL(base) + "?sync=false", store.ErrInvalidArgument, "query"},
		{"fragment", fileURL(base) + "#x", store.ErrInvalidArgument, "fragment"},
		{"user", "file://me@localhost" + base, store.ErrInvalidArgument, "user"},
		{"malformed", "file://%zz/dir", nil, "invalid URL escape"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(ctx, c.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Open(%q) = %v; want an error matching %v", c.url, err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("Open(%q) = %q; want it to mention %q", c.url, err, c.mention)
			}
		})
	}
}

func TestOpenRelative(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	for _, rawURL := range []string{"file://./data", "file://./data/nested/"} {
		s, err := store.Open(t.Context(), rawURL)
		if err != nil {
			t.Fatalf("Open(%q): %v", rawURL, err)
		}
		if _, err := s.Put(t.Context(), "k", nil, store.IfAbsent()); err != nil {
			t.Fatalf("Put in %q: %v", rawURL, err)
		}
		s.Close()
	}
	for _, p := range []string{"data/k.k", "data/nested/k.k"} {
		if _, err := os.Stat(filepath.Join(wd, p)); err != nil {
			t.Errorf("relative store did not write %s under the working directory: %v", p, err)
		}
	}
}

func TestOpenReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write to any directory")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	_, err := New(filepath.Join(dir, "store"))
	if err == nil || driver.Classify(nil, err) != driver.Permanent || !strings.Contains(err.Error(), "cannot create") {
		t.Fatalf("New under a read-only directory = %v; want a permanent error saying it cannot create it", err)
	}
}

func TestWriteToReadOnlyStore(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write to any directory")
	}
	dir := t.TempDir()
	s := store.New(newDriver(t, dir))
	defer s.Close()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	_, err := s.Put(t.Context(), "new/key", []byte("x"), store.IfAbsent())
	if !errors.Is(err, store.ErrPermanent) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Put into a read-only directory = %v; want ErrPermanent wrapping fs.ErrPermission", err)
	}
	_, err = New(dir)
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("New on a read-only directory = %v; want it to say so", err)
	}
}

func TestErrorKind(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want driver.Kind
	}{
		{"not exist", fmt.Errorf("read: %w", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}), driver.NotFound},
		{"permission", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, driver.Permanent},
		{"not permitted", &fs.PathError{Op: "link", Path: "/x", Err: syscall.EPERM}, driver.Permanent},
		{"read-only file system", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, driver.Permanent},
		{"disk full", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, driver.Transient},
		{"quota", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EDQUOT}, driver.Transient},
		{"i/o error", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EIO}, driver.Transient},
		{"name too long", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENAMETOOLONG}, driver.InvalidArgument},
		{"other", errors.New("something else"), driver.Unknown},
	}
	s := newDriver(t, t.TempDir())
	defer s.Close()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := s.ErrorKind(c.err); got != c.want {
				t.Errorf("ErrorKind(%v) = %v; want %v", c.err, got, c.want)
			}
		})
	}
}

func TestVersionIsContentHash(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	data := []byte(`{"nonce":"n1"}`)
	v1, err := s.Put(ctx, "a", data, store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Put(ctx, "b/c", data, store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if v1 != Version(data) || v2 != v1 || v1 != memstore.Version(data) {
		t.Fatalf("versions %q and %q of the same bytes; want both %q, as memstore gives", v1, v2, Version(data))
	}
	v3, err := s.Put(ctx, "a", []byte(`{"nonce":"n2"}`), store.IfMatch(v1))
	if err != nil || v3 == v1 {
		t.Fatalf("swap to new bytes = %q, %v; want a new version", v3, err)
	}
}

// TestListMatchesModel compares List with memstore's on awkward keys and
// random prefixes, including prefixes that end inside a chunked segment.
func TestListMatchesModel(t *testing.T) {
	ctx := t.Context()
	fsys := openTemp(t)
	defer fsys.Close()
	model := store.New(memstore.New())
	defer model.Close()

	long := strings.Repeat("x", 230)
	segs := []string{"", "a", "b", "ab", "a.k", "a.d", ".", "..", "é", "A", " ", "%", "z~", long, long[:199] + "é", long + "é"}
	rng := rand.New(rand.NewPCG(1, 2))
	randKey := func() string {
		parts := make([]string, 1+rng.IntN(3))
		for i := range parts {
			parts[i] = segs[rng.IntN(len(segs))]
		}
		return strings.Join(parts, "/")
	}
	var keys []string
	for i := 0; i < 300; i++ {
		k := randKey()
		data := []byte(fmt.Sprintf("value %d of %q", i, k))
		_, ferr := fsys.Put(ctx, k, data, store.IfAbsent())
		_, merr := model.Put(ctx, k, data, store.IfAbsent())
		if store.KindOf(ferr) != store.KindOf(merr) {
			t.Fatalf("Put(%q): filestore %v, memstore %v", k, ferr, merr)
		}
		if ferr == nil {
			keys = append(keys, k)
		}
	}
	// Delete some, so that empty directories are left behind.
	for _, k := range keys[:50] {
		if err := fsys.Delete(ctx, k, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		if err := model.Delete(ctx, k, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 500; i++ {
		var prefix, after string
		switch rng.IntN(3) {
		case 0:
			k := keys[rng.IntN(len(keys))]
			prefix = k[:rng.IntN(len(k)+1)]
			for !utf8.ValidString(prefix) {
				prefix = prefix[:len(prefix)-1]
			}
		case 1:
			prefix = randKey()
		}
		if rng.IntN(2) == 0 {
			after = keys[rng.IntN(len(keys))]
		}
		limit := 1 + rng.IntN(20)
		if rng.IntN(4) == 0 {
			limit = 1000
		}
		got, err := fsys.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
		}
		want, err := model.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("List(%q, %q, %d):\n got %v\nwant %v", prefix, after, limit, got, want)
		}
	}
}

func TestListIgnoresForeignFiles(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := store.New(newDriver(t, dir))
	defer s.Close()
	if _, err := s.Put(ctx, "a/b", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"README", "notes.txt", "X.k", "a.d/Upper.k", "a.d/%61.k", "b.d"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("foreign"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"c.k", "plain-dir", ".tmp/stray.d"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp", "half-written.tmp"), []byte("par"), 0o644); err != nil {
		t.Fatal(err)
	}
	items, err := s.List(ctx, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Key != "a/b" || items[0].Size != 1 || items[0].Version != Version([]byte("x")) {
		t.Fatalf("List = %+v; want only a/b", items)
	}
}

func TestNewRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	newDriver(t, dir).Close()
	stale, fresh := filepath.Join(dir, tmpDirName, "stale.tmp"), filepath.Join(dir, tmpDirName, "fresh.tmp")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	newDriver(t, dir).Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temp file survived New: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("New removed a fresh temp file, which may be a write in flight: %v", err)
	}
}

// TestLockWaitHonoursContext holds a key's lock and checks that writers
// waiting for it give up when their context ends, both in another Store
// (waiting on flock, as another process would) and in the same Store
// (waiting on the in-process mutex), and that nothing is written.
func TestLockWaitHonoursContext(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	s1, s2 := store.New(d1), store.New(d2)
	defer s1.Close()
	defer s2.Close()
	v, err := s1.Put(ctx, "k", []byte("one"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	release, err := d1.lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*store.Store{"other store": s2, "same store": s1} {
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := s.Put(short, "k", []byte("two"), store.IfMatch(v))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: swap while the lock is held = %v; want it to give up with ctx", name, err)
		}
		err = s.Delete(short, "k", store.Cond{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: delete while the lock is held = %v; want it to give up with ctx", name, err)
		}
		cancel()
	}
	// A create of a new key waits for the lock of its stripe too.
	sameStripe, otherStripe := "", ""
	for i := 0; sameStripe == "" || otherStripe == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if stripeOf(k) == stripeOf("k") {
			sameStripe = k
		} else {
			otherStripe = k
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := s2.Put(short, sameStripe, []byte("x"), store.IfAbsent()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("create of %q, in the held stripe = %v; want it to give up with ctx", sameStripe, err)
	}
	cancel()
	if _, err := s2.Put(ctx, otherStripe, []byte("x"), store.IfAbsent()); err != nil {
		t.Errorf("create of %q, in another stripe, while the lock is held: %v", otherStripe, err)
	}
	// A condition that already fails needs no lock to be refused.
	if _, err := s2.Put(ctx, "k", []byte("x"), store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Errorf("create of the existing key while its lock is held = %v; want ErrPreconditionFailed", err)
	}
	release()
	if _, _, err := s2.Get(ctx, sameStripe); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the abandoned create of %q left it readable: %v", sameStripe, err)
	}
	if data, gv, err := s2.Get(ctx, "k"); err != nil || string(data) != "one" || gv != v {
		t.Fatalf("after abandoned writes: %q, %q, %v; want the value unchanged", data, gv, err)
	}
	if _, err := s2.Put(ctx, "k", []byte("two"), store.IfMatch(v)); err != nil {
		t.Fatalf("swap after the lock is released: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Join(dir, tmpDirName)); err != nil || len(entries) != 0 {
		t.Errorf("abandoned writes left temp files: %v, %v", entries, err)
	}
}

// TestTwoStoresOneDirectory races goroutines over two Stores on the same
// directory: their locks are separate open files, so only flock keeps them
// apart.
func TestTwoStoresOneDirectory(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	stores := []*store.Store{store.New(newDriver(t, dir)), store.New(newDriver(t, dir))}
	for _, s := range stores {
		defer s.Close()
	}
	const rounds, workers = 100, 8
	race := func(write func(w int) error) (winners []int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			wg.Go(func() {
				<-start
				err := write(w)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, w)
				case !errors.Is(err, store.ErrPreconditionFailed):
					t.Errorf("worker %d: %v", w, err)
				}
			})
		}
		close(start)
		wg.Wait()
		return winners
	}
	for r := 0; r < rounds; r++ {
		key := fmt.Sprintf("two/%d", r)
		if w := race(func(w int) error {
			_, err := stores[w%2].Put(ctx, key, []byte(fmt.Sprintf("create %d %d", r, w)), store.IfAbsent())
			return err
		}); len(w) != 1 {
			t.Fatalf("round %d: create won by %v; want exactly one", r, w)
		}
		_, v, err := stores[0].Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		w := race(func(w int) error {
			_, err := stores[w%2].Put(ctx, key, []byte(fmt.Sprintf("swap %d %d", r, w)), store.IfMatch(v))
			return err
		})
		if len(w) != 1 {
			t.Fatalf("round %d: swap won by %v; want exactly one", r, w)
		}
		if data, _, err := stores[1].Get(ctx, key); err != nil || !bytes.Equal(data, []byte(fmt.Sprintf("swap %d %d", r, w[0]))) {
			t.Fatalf("round %d: stored %q, %v; want worker %d's swap", r, data, err, w[0])
		}
	}
}

// TestLongDirectory checks that a key whose path would be too long is
// refused before anything is written, and that List under it is empty.
func TestLongDirectory(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < pathMax-1500 {
		dir = filepath.Join(dir, strings.Repeat("d", 200))
	}
	s := store.New(newDriver(t, dir))
	defer s.Close()
	ctx := t.Context()
	long := strings.Repeat("é", 512)
	_, err := s.Put(ctx, long, []byte("x"), store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "path") {
		t.Fatalf("Put of a key too long for the directory = %v; want ErrInvalidArgument naming the path", err)
	}
	if _, err := s.Put(ctx, "short", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatalf("Put of a short key: %v", err)
	}
	items, err := s.List(ctx, long[:len(long)-2]+"/", "", 10)
	if err != nil || len(items) != 0 {
		t.Fatalf("List under a too-long prefix = %v, %v; want nothing", items, err)
	}
}

func TestUseAfterClose(t *testing.T) {
	d := newDriver(t, t.TempDir())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := d.Put(t.Context(), "k", nil, driver.Cond{Kind: driver.IfAbsent})
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("driver Put after Close = %v; want ErrClosed", err)
	}
}

// TestFailureAfterCommitIsAmbiguous fails the directory sync that follows
// the rename or link, with an errno that alone would read as permanent: the
// write is already visible, so the error must be ambiguous and
// store.PutResolved must find that it landed. The same holds for Delete.
func TestFailureAfterCommitIsAmbiguous(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	restore := SetSyncCommitted(func(string) error { return &fs.PathError{Op: "sync", Path: "dir", Err: syscall.EACCES} })
	defer restore()

	_, err := s.Put(ctx, "k", []byte("created"), store.IfAbsent())
	if err == nil || !store.IsAmbiguous(err) || errors.Is(err, store.ErrPermanent) {
		t.Fatalf("a create whose directory sync failed returned %v; want an ambiguous error", err)
	}
	data, v1, gerr := s.Get(ctx, "k")
	if gerr != nil || string(data) != "created" {
		t.Fatalf("the create is not visible: %q, %v", data, gerr)
	}
	v2, err := store.PutResolved(ctx, s, "k", []byte("swapped"), store.IfMatch(v1), store.ResolveOptions{Attempts: 2, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatalf("PutResolved of a swap that landed (only its directory sync failed): %v", err)
	}
	if data, v, _ := s.Get(ctx, "k"); string(data) != "swapped" || v != v2 {
		t.Fatalf("after the swap the key holds %q at %q; want \"swapped\" at %q", data, v, v2)
	}
	if err := s.Delete(ctx, "k", store.IfMatch(v2)); err == nil || !store.IsAmbiguous(err) || errors.Is(err, store.ErrPermanent) {
		t.Fatalf("a delete whose directory sync failed returned %v; want an ambiguous error", err)
	}
	if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the delete is not visible: %v", err)
	}
}

// tree lists every path under dir, with its mode, to compare before and
// after an operation that must not write.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v", p, d.Type()))
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func TestOpenReadOnlyCreatesNothing(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "typo", "sub")
	_, err := store.Open(t.Context(), "file://"+missing, store.ReadOnly())
	if !errors.Is(err, store.ErrPermanent) || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), missing+" does not exist") {
		t.Fatalf("read-only Open of a missing directory = %v; want ErrPermanent and fs.ErrNotExist naming %s", err, missing)
	}
	if got := tree(t, parent); len(got) != 1 {
		t.Fatalf("read-only Open of a missing directory created %v", got[1:])
	}

	// An existing store with a key, made by a writer.
	dir := filepath.Join(parent, "store")
	w, err := store.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(t.Context(), "a/b", []byte("v"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Without .locks and .tmp, as a store copied by hand or on a read-only
	// mount would be.
	for _, d := range []string{lockDirName, tmpDirName} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, dir)
	s, err := store.Open(t.Context(), "file://"+dir, store.ReadOnly())
	if err != nil {
		t.Fatalf("read-only Open: %v", err)
	}
	defer s.Close()
	if data, _, err := s.Get(t.Context(), "a/b"); err != nil || string(data) != "v" {
		t.Fatalf("Get = %q, %v", data, err)
	}
	if _, _, err := s.Get(t.Context(), "no/such/key"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key = %v; want ErrNotFound", err)
	}
	if items, err := s.ListAll(t.Context(), "", 10); err != nil || len(items) != 1 {
		t.Fatalf("List = %+v, %v", items, err)
	}
	_, err = s.Put(t.Context(), "c", []byte("v"), store.IfAbsent())
	if !errors.Is(err, store.ErrReadOnly) || !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Put through a read-only store = %v; want ErrReadOnly", err)
	}
	if err := s.Delete(t.Context(), "a/b", store.Cond{}); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("Delete through a read-only store = %v; want ErrReadOnly", err)
	}
	// The driver refuses too, for callers that use it directly.
	d, err := NewReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Put(t.Context(), "c", []byte("v"), driver.Cond{Kind: driver.IfAbsent}); !errors.Is(err, store.ErrReadOnly) || driver.Classify(d, err) != driver.InvalidArgument {
		t.Fatalf("driver Put on a read-only store = %v; want ErrReadOnly, invalid argument", err)
	}
	if err := d.Delete(t.Context(), "a/b", driver.Cond{}); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("driver Delete on a read-only store = %v; want ErrReadOnly", err)
	}
	if after := tree(t, dir); !slices.Equal(before, after) {
		t.Fatalf("a read-only store changed its directory:\nbefore %v\nafter  %v", before, after)
	}

	if _, err := NewReadOnly(filepath.Join(dir, "a.d", "b.k")); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("NewReadOnly of a file = %v; want it to say it is not a directory", err)
	}
}

func TestOpenReadOnlyUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write to any directory; TestOpenReadOnlyCreatesNothing shows that nothing is written")
	}
	dir := t.TempDir()
	w := newDriver(t, dir)
	if _, err := w.Put(t.Context(), "k", []byte("v"), driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	s, err := store.Open(t.Context(), "file://"+dir, store.ReadOnly())
	if err != nil {
		t.Fatalf("read-only Open of an unwritable directory: %v", err)
	}
	defer s.Close()
	if data, _, err := s.Get(t.Context(), "k"); err != nil || string(data) != "v" {
		t.Fatalf("Get = %q, %v", data, err)
	}
}
