package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/filestore/internal/pack"
)

// packPrefix is the prefix the pack tests keep their keys under.
const packPrefix = "g/log/"

// inPack is a driver that keeps every key under packPrefix of a Store in
// which that prefix is a pack: the conformance suite then runs against
// the pack.
type inPack struct{ *Store }

func (d inPack) Get(ctx context.Context, key string) ([]byte, string, error) {
	return d.Store.Get(ctx, packPrefix+key)
}

func (d inPack) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	return d.Store.GetLimited(ctx, packPrefix+key, max)
}

func (d inPack) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	return d.Store.ReadInto(ctx, packPrefix+key, buf, max)
}

func (d inPack) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	return d.Store.Put(ctx, packPrefix+key, data, cond)
}

func (d inPack) Delete(ctx context.Context, key string, cond driver.Cond) error {
	return d.Store.Delete(ctx, packPrefix+key, cond)
}

func (d inPack) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	if after != "" {
		after = packPrefix + after
	}
	items, err := d.Store.List(ctx, packPrefix+prefix, after, limit)
	for i := range items {
		items[i].Key = strings.TrimPrefix(items[i].Key, packPrefix)
	}
	return items, err
}

func (d inPack) ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if after != "" {
		after = packPrefix + after
	}
	keys, err := d.Store.ListKeys(ctx, packPrefix+prefix, after, limit)
	for i := range keys {
		keys[i] = strings.TrimPrefix(keys[i], packPrefix)
	}
	return keys, err
}

func (d inPack) CheckKey(key string) error {
	if len(packPrefix+key) > store.MaxKeyLen {
		return fmt.Errorf("the key is longer than %d bytes", store.MaxKeyLen-len(packPrefix))
	}
	return d.Store.CheckKey(packPrefix + key)
}

// newPacked opens a Store on dir and makes packPrefix a pack.
// smallSegments returns a packed Store writing segments of 256 bytes
// under a new directory, and a second Store reading it, both closed (and
// the segment size restored) when t ends.
func smallSegments(t *testing.T) (dir string, w, r *Store) {
	t.Helper()
	t.Cleanup(SetPackSegMax(256))
	dir = t.TempDir()
	w, r = newPacked(t, dir), newDriver(t, dir)
	t.Cleanup(func() {
		w.Close()
		r.Close()
	})
	return dir, w, r
}

// packKey is the packed prefix's i-th key, in order.
func packKey(i int) string { return fmt.Sprintf("%s%04d", packPrefix, i) }

func newPacked(t testing.TB, dir string) *Store {
	t.Helper()
	d := newDriver(t, dir)
	ok, err := d.Pack(context.Background(), packPrefix)
	if err != nil || !ok {
		t.Fatalf("Pack(%q) = %v, %v; want true", packPrefix, ok, err)
	}
	return d
}

func TestPackConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store {
		return store.New(inPack{newPacked(t, t.TempDir())})
	}, drivertest.Options{MaxKeyLen: store.MaxKeyLen - len(packPrefix)})
}

// TestPackConformanceTwoStores runs the suite through one Store while a
// second one on the same directory wrote the pack first, so that every
// read catches up with frames another writer appended.
func TestPackConformanceTwoStores(t *testing.T) {
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store {
		dir := t.TempDir()
		other := newPacked(t, dir)
		if _, err := other.Put(t.Context(), packPrefix+"other/seed", []byte("x"), driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(t.Context(), packPrefix+"other/seed", driver.Cond{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		return store.New(inPack{newDriver(t, dir)})
	}, drivertest.Options{MaxKeyLen: store.MaxKeyLen - len(packPrefix), RaceRounds: 50})
}

func mustPutKey(t *testing.T, d *Store, key, value string, cond driver.Cond) string {
	t.Helper()
	v, err := d.Put(t.Context(), key, []byte(value), cond)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return v
}

func wantValue(t *testing.T, d *Store, key, want string) {
	t.Helper()
	got, v, err := d.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if string(got) != want || v != Version([]byte(want)) {
		t.Fatalf("Get(%q) = %q, %s; want %q, %s", key, got, v, want, Version([]byte(want)))
	}
}

var create = driver.Cond{Kind: driver.IfAbsent}

func TestPackConversion(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := newDriver(t, dir)
	defer d.Close()

	// Keys stored as files keep the prefix a directory.
	mustPutKey(t, d, "files/a", "1", create)
	if ok, err := d.Pack(ctx, "files/"); ok || err != nil {
		t.Fatalf("Pack of a prefix with keys = %v, %v; want false, nil", ok, err)
	}
	wantValue(t, d, "files/a", "1")

	// A directory emptied by deletes becomes a pack.
	if err := d.Delete(ctx, "files/a", driver.Cond{}); err != nil {
		t.Fatal(err)
	}
	mustPutKey(t, d, "files/b", "2", create)
	if err := d.Delete(ctx, "files/b", driver.Cond{}); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"files/", "new/deep/"} {
		if ok, err := d.Pack(ctx, prefix); !ok || err != nil {
			t.Fatalf("Pack(%q) = %v, %v; want true", prefix, ok, err)
		}
		if ok, err := d.Pack(ctx, prefix); !ok || err != nil {
			t.Fatalf("Pack(%q) again = %v, %v; want true", prefix, ok, err)
		}
		mustPutKey(t, d, prefix+"k", "v", create)
		wantValue(t, d, prefix+"k", "v")
	}
	// Keys below a pack's prefix, at any depth, are in it.
	mustPutKey(t, d, "new/deep/a/b/c", "deeper", create)
	wantValue(t, d, "new/deep/a/b/c", "deeper")
	if ok, err := d.Pack(ctx, "new/deep/a/"); !ok || err != nil {
		t.Fatalf("Pack inside a pack = %v, %v; want true (it is in one)", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.d", "deep.d", "a.d")); !errors.Is(err, os.ErrNotExist) && !notDir(err) {
		t.Fatalf("a key in a pack made a directory: %v", err)
	}
	for _, bad := range []string{"", "nodelimiter", "/"} {
		if _, err := d.Pack(ctx, bad+"x"); err == nil {
			t.Errorf("Pack(%q) accepted a prefix without a trailing '/'", bad+"x")
		}
	}

	// Another Store finds the pack from the files alone.
	d2 := newDriver(t, dir)
	defer d2.Close()
	wantValue(t, d2, "files/k", "v")
	wantValue(t, d2, "new/deep/a/b/c", "deeper")
	items, err := d2.List(ctx, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	want := []string{"files/k", "new/deep/a/b/c", "new/deep/k"}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("List of the whole store = %q; want %q", keys, want)
	}
	if items[1].Version != Version([]byte("deeper")) || items[1].Size != 6 {
		t.Fatalf("listed %+v; want the value's version and size", items[1])
	}

	// A read-only Store reads packs and makes none.
	ro, err := NewReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Pack(ctx, "other/"); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("read-only Pack: %v; want ErrReadOnly", err)
	}
	got, _, err := ro.Get(ctx, "files/k")
	if err != nil || string(got) != "v" {
		t.Fatalf("read-only Get = %q, %v", got, err)
	}
}

// TestPackRefusesFileWriters: a process that stores keys as files (a
// version without packs) cannot create a key under a pack's prefix: the
// prefix's path is the head, a regular file.
func TestPackRefusesFileWriters(t *testing.T) {
	dir := t.TempDir()
	d := newPacked(t, dir)
	defer d.Close()
	head := filepath.Join(dir, "g.d", "log.d")
	if err := os.MkdirAll(filepath.Join(head, "x.d"), 0o755); !notDir(err) {
		t.Fatalf("mkdir under a pack's head: %v; want ENOTDIR", err)
	}
	if err := os.WriteFile(filepath.Join(head, "k.k"), []byte("v"), 0o644); !notDir(err) {
		t.Fatalf("a file under a pack's head: %v; want ENOTDIR", err)
	}
	// And the head of a format it does not know is refused, not read.
	if err := os.WriteFile(head, []byte("tenure filestore pack, format 99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir)
	defer d2.Close()
	_, _, err := d2.Get(t.Context(), packPrefix+"k")
	if err == nil || !strings.Contains(err.Error(), "format 99") {
		t.Fatalf("Get under a head of an unknown format: %v", err)
	}
}

// segFiles returns the pack's segment numbers.
func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "g.d", "log.p"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func lastSeg(t *testing.T, dir string) string {
	segs := segFiles(t, dir)
	return filepath.Join(dir, "g.d", "log.p", segs[len(segs)-1])
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPackTornTail: what a writer that died mid-append leaves (a frame
// cut short, or zeros where the file grew and the data never came) is not
// read, and the next writer cuts it and appends after the last whole
// frame. A whole frame whose writer died before its sync (never
// acknowledged) is read: the write landed, as one whose answer was lost.
func TestPackTornTail(t *testing.T) {
	frame := encodeFrame(testRec{key: packPrefix + "torn", value: []byte("never whole")})
	for name, tail := range map[string][]byte{
		"cut short":      frame[:len(frame)-3],
		"header only":    frame[:testFrameHeader],
		"under a header": frame[:5],
		"zeros":          make([]byte, 4096),
		"bad checksum":   append(append([]byte{}, frame[:len(frame)-1]...), frame[len(frame)-1]^1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			d := newPacked(t, dir)
			defer d.Close()
			mustPutKey(t, d, packPrefix+"a", "1", create)
			seg := lastSeg(t, dir)
			appendBytes(t, seg, tail)

			r := newDriver(t, dir)
			defer r.Close()
			wantValue(t, r, packPrefix+"a", "1")
			if _, _, err := r.Get(t.Context(), packPrefix+"torn"); !errors.Is(err, store.ErrNotFound) && driver.Classify(nil, err) != driver.NotFound {
				t.Fatalf("Get of the torn key: %v; want not found", err)
			}
			// The other Store appends: it cuts the tail first.
			w := newDriver(t, dir)
			defer w.Close()
			mustPutKey(t, w, packPrefix+"b", "2", create)
			fi, err := os.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*Store{d, r, w, newDriver(t, dir)} {
				wantValue(t, s, packPrefix+"a", "1")
				wantValue(t, s, packPrefix+"b", "2")
			}
			data, _ := os.ReadFile(seg)
			if int64(len(data)) != fi.Size() || bytes.Contains(data, []byte("never whole")) {
				t.Fatalf("the torn tail is still in the segment")
			}
		})
	}
	t.Run("whole frame of a dead writer", func(t *testing.T) {
		dir := t.TempDir()
		d := newPacked(t, dir)
		defer d.Close()
		mustPutKey(t, d, packPrefix+"a", "1", create)
		appendBytes(t, lastSeg(t, dir), encodeFrame(testRec{key: packPrefix + "landed", value: []byte("x")}))
		r := newDriver(t, dir)
		defer r.Close()
		wantValue(t, r, packPrefix+"landed", "x")
		if _, err := d.Put(t.Context(), packPrefix+"landed", []byte("y"), create); driver.Classify(nil, err) != driver.PreconditionFailed {
			t.Fatalf("create over the landed key: %v; want precondition failed", err)
		}
	})
}

// TestPackCorruption: a bad frame that frames follow is reported as a
// corrupt pack, by readers and writers, and nothing is cut.
func TestPackCorruption(t *testing.T) {
	dir := t.TempDir()
	d := newPacked(t, dir)
	defer d.Close()
	mustPutKey(t, d, packPrefix+"a", "first", create)
	mustPutKey(t, d, packPrefix+"b", "second", create)
	seg := lastSeg(t, dir)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("first"))
	data[i] ^= 0x20 // "First": the first frame's checksum fails
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{newDriver(t, dir), newDriver(t, dir)} {
		defer s.Close()
		_, _, err := s.Get(t.Context(), packPrefix+"b")
		if err == nil || !strings.Contains(err.Error(), "corrupt pack") || driver.Classify(nil, err) != driver.Permanent {
			t.Fatalf("Get from a corrupt pack: %v; want a permanent corrupt pack error", err)
		}
		_, err = s.Put(t.Context(), packPrefix+"c", []byte("x"), create)
		if err == nil || !strings.Contains(err.Error(), "corrupt pack") {
			t.Fatalf("Put to a corrupt pack: %v; want a corrupt pack error", err)
		}
	}
	after, _ := os.ReadFile(seg)
	if !bytes.Equal(after, data) {
		t.Fatal("a writer changed a corrupt segment")
	}
	// A value changed after the Store indexed it is caught by its checksum.
	dir2 := t.TempDir()
	d2 := newPacked(t, dir2)
	defer d2.Close()
	mustPutKey(t, d2, packPrefix+"v", "value", create)
	seg2 := lastSeg(t, dir2)
	data2, _ := os.ReadFile(seg2)
	data2[bytes.Index(data2, []byte("value"))] = 'V'
	if err := os.WriteFile(seg2, data2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d2.Get(t.Context(), packPrefix+"v"); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Get of a value changed on disk: %v; want a checksum error", err)
	}
}

// TestPackSegments: a full segment starts the next; the oldest go once
// none of their puts is live; a Store that last read a removed segment
// starts over from the oldest one left, and misses no delete.
func TestPackSegments(t *testing.T) {
	ctx := t.Context()
	dir, w, r := smallSegments(t)
	key, val := packKey, strings.Repeat("v", 100)
	behind := newDriver(t, dir) // reads segment 1 only, then nothing until its removal
	defer behind.Close()
	for i := range 20 {
		mustPutKey(t, w, key(i), val, create)
		if i == 0 {
			wantValue(t, behind, key(0), val)
		}
	}
	before := segFiles(t, dir)
	if len(before) != 10 {
		t.Fatalf("%d segments after 20 puts of 100 bytes at 256 bytes a segment; want 10 (two frames each)", len(before))
	}
	wantValue(t, r, key(0), val) // r has read every segment
	// A truncation: the oldest keys go, and their segments with them.
	for i := range 15 {
		if err := w.Delete(ctx, key(i), driver.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	// The puts of keys 0 to 13 filled segments 1 to 7; the deletes' frames
	// are after the live keys' and stay with them.
	segs := segFiles(t, dir)
	if segs[0] != "0000000000000008.s" {
		t.Fatalf("segments left after deleting the 15 oldest of 20 keys: %q; want 1 to 7 removed", segs)
	}
	for _, s := range []*Store{w, r, behind, newDriver(t, dir)} {
		keys, err := s.ListKeys(ctx, packPrefix, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 5 || keys[0] != key(15) {
			t.Fatalf("keys after the truncation: %q", keys)
		}
		if _, _, err := s.Get(ctx, key(3)); driver.Classify(nil, err) != driver.NotFound {
			t.Fatalf("Get of a deleted key: %v", err)
		}
		wantValue(t, s, key(19), val)
	}
	// A segment missing between others is damage, not a removal.
	for i := range 4 {
		mustPutKey(t, w, key(100+i), val, create)
	}
	segs = segFiles(t, dir)
	if err := os.Remove(filepath.Join(dir, "g.d", "log.p", segs[len(segs)-2])); err != nil {
		t.Fatal(err)
	}
	fresh := newDriver(t, dir)
	defer fresh.Close()
	if _, err := fresh.Put(ctx, key(200), []byte("x"), create); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Put with a segment missing: %v; want a corrupt pack error", err)
	}
	// A Store that only reads finds the gap too: the keys after it are
	// not reported absent.
	reader := newDriver(t, dir)
	defer reader.Close()
	if _, _, err := reader.Get(ctx, key(103)); err == nil || !strings.Contains(err.Error(), "missing") || driver.Classify(nil, err) != driver.Permanent {
		t.Fatalf("Get of a key after a missing segment: %v; want a permanent corrupt pack error", err)
	}
	if keys, err := reader.ListKeys(ctx, packPrefix, "", 100); err == nil {
		t.Fatalf("listing with a segment missing: %q; want a corrupt pack error", keys)
	}
}

// TestPackGapUnderReader: a segment removed from between others while a
// Store that only reads has the pack open is found by that Store's next
// read past it, not taken for the end of the pack.
func TestPackGapUnderReader(t *testing.T) {
	ctx := t.Context()
	dir, w, r := smallSegments(t)
	val := strings.Repeat("v", 100)
	mustPutKey(t, w, packKey(0), val, create)
	wantValue(t, r, packKey(0), val) // r's index begins at segment 1, the only one
	for i := 1; i < 6; i++ {
		mustPutKey(t, w, packKey(i), val, create)
	}
	segs := segFiles(t, dir)
	if len(segs) < 3 {
		t.Fatalf("segments after 6 puts of 100 bytes at 256 bytes a segment: %q; want 3", segs)
	}
	if err := os.Remove(filepath.Join(dir, "g.d", "log.p", segs[1])); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.Get(ctx, packKey(5))
	if err == nil || !strings.Contains(err.Error(), "missing") || driver.Classify(nil, err) != driver.Permanent || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Get of a key after a segment removed under the reader: %v; want a permanent corrupt pack error matching store.ErrCorrupt", err)
	}
}

// TestPackNextSegmentMadeWhileReaderLooks: a reader that finds the
// segment after its full one missing, and then lists a next segment a
// writer made meanwhile, reads on: a new segment is no gap.
func TestPackNextSegmentMadeWhileReaderLooks(t *testing.T) {
	_, w, r := smallSegments(t)
	val := strings.Repeat("v", 100)
	mustPutKey(t, w, packKey(0), val, create)
	mustPutKey(t, w, packKey(1), val, create) // segment 1 is full: the next put starts segment 2
	made := false
	packHooks.AfterNextMissing = func(writer bool) {
		if !writer && !made {
			made = true
			mustPutKey(t, w, packKey(2), val, create)
		}
	}
	defer func() { packHooks.AfterNextMissing = nil }()
	wantValue(t, r, packKey(0), val)
	if !made {
		t.Fatal("the reader never found the next segment missing: nothing tested")
	}
	wantValue(t, r, packKey(2), val)
}

// TestPackReleasesRemovedSegments: once a truncation lets the writer
// remove the oldest segments, no Store keeps them open, the writer nor
// one that only reads: an open descriptor of a removed file holds its
// blocks, and a follower that reads the log for as long as it runs would
// hold every segment it ever read.
func TestPackReleasesRemovedSegments(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd:", err)
	}
	ctx := t.Context()
	dir, w, r := smallSegments(t)
	key, val := packKey, strings.Repeat("v", 100)
	for i := range 20 {
		mustPutKey(t, w, key(i), val, create)
		wantValue(t, r, key(i), val) // r reads every segment as it is written
	}
	for i := range 15 {
		if err := w.Delete(ctx, key(i), driver.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	wantValue(t, r, key(19), val) // r catches up on the deletes
	if segs := segFiles(t, dir); segs[0] != "0000000000000008.s" {
		t.Fatalf("segments left after deleting the 15 oldest of 20 keys: %q; want 1 to 7 removed", segs)
	}
	segDir := filepath.Join(dir, "g.d", "log.p")
	// The descriptors are closed off the writers' and readers' path.
	var held []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		held = held[:0]
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
			if err == nil && strings.HasPrefix(target, segDir) && strings.HasSuffix(target, " (deleted)") {
				held = append(held, target)
			}
		}
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(held) > 0 {
		t.Fatalf("removed segments still open: %q", held)
	}
	// Both Stores still read and write.
	mustPutKey(t, w, key(20), val, create)
	wantValue(t, r, key(20), val)
	wantValue(t, r, key(15), val)
}

// TestPackRemovalLeavesNoGap: segments left dead but not removed (a
// writer killed between its frame and their removal) are removed, oldest
// first, by the next Store that writes, even if it read them first: one
// left between removed segments would hide every later segment from
// readers, and with them acknowledged writes.
func TestPackRemovalLeavesNoGap(t *testing.T) {
	defer SetPackSegMax(256)()
	ctx := t.Context()
	dir := t.TempDir()
	key, val := packKey, strings.Repeat("v", 100)
	w := newPacked(t, dir)
	for i := range 10 {
		mustPutKey(t, w, key(i), val, create)
	}
	segDir := filepath.Join(dir, "g.d", "log.p")
	saved := map[string][]byte{}
	for _, name := range segFiles(t, dir)[:2] {
		b, err := os.ReadFile(filepath.Join(segDir, name))
		if err != nil {
			t.Fatal(err)
		}
		saved[name] = b
	}
	for i := range 4 {
		if err := w.Delete(ctx, key(i), driver.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// As if the writer had been killed before it removed them.
	for name, b := range saved {
		if err := os.WriteFile(filepath.Join(segDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newDriver(t, dir)
	defer s.Close()
	wantValue(t, s, key(9), val) // reads segments 1 and 2, dead
	for i := 4; i < 8; i++ {
		if err := s.Delete(ctx, key(i), driver.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	segs := segFiles(t, dir)
	for i := 1; i < len(segs); i++ {
		if prev, next := parseSeg(t, segs[i-1]), parseSeg(t, segs[i]); next != prev+1 {
			t.Fatalf("segments %q: %d missing between others", segs, prev+1)
		}
	}
	r := newDriver(t, dir)
	defer r.Close()
	wantValue(t, r, key(9), val)
	wantValue(t, r, key(8), val)
	if _, _, err := r.Get(ctx, key(5)); driver.Classify(nil, err) != driver.NotFound {
		t.Fatalf("Get of a deleted key: %v", err)
	}
}

func parseSeg(t *testing.T, name string) uint64 {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscanf(name, "%016x.s", &n); err != nil {
		t.Fatalf("segment name %q: %v", name, err)
	}
	return n
}

// TestPackRaceStores: creates of the same keys from two Stores (each its
// own file description, as two processes) let exactly one win each key,
// and both Stores then read the winner's value.
func TestPackRaceStores(t *testing.T) {
	dir := t.TempDir()
	a := newPacked(t, dir)
	defer a.Close()
	b := newDriver(t, dir)
	defer b.Close()
	const keys, workers = 100, 8
	wins := make([][]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if w%2 == 1 {
				s = b
			}
			for k := range keys {
				_, err := s.Put(t.Context(), fmt.Sprintf("%s%d", packPrefix, k), []byte(fmt.Sprint(w)), create)
				switch driver.Classify(nil, err) {
				case driver.Unknown:
					if err == nil {
						wins[w] = append(wins[w], k)
					} else {
						t.Errorf("create: %v", err)
					}
				case driver.PreconditionFailed:
				default:
					t.Errorf("create: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	winner := map[int]int{}
	for w, ks := range wins {
		for _, k := range ks {
			if prev, ok := winner[k]; ok {
				t.Fatalf("key %d created by workers %d and %d", k, prev, w)
			}
			winner[k] = w
		}
	}
	if len(winner) != keys {
		t.Fatalf("%d of %d keys created", len(winner), keys)
	}
	for k, w := range winner {
		for _, s := range []*Store{a, b} {
			wantValue(t, s, fmt.Sprintf("%s%d", packPrefix, k), fmt.Sprint(w))
		}
	}
}

// TestPackBatches: writes queued while a batch syncs share the next
// frame, and each still gets its own outcome: the first batch is held in
// its sync until the 63 other writes (two a key) are queued, and they
// must then take one frame, not one each.
func TestPackBatches(t *testing.T) {
	dir := t.TempDir()
	d := newPacked(t, dir)
	defer d.Close()
	// The most writes queued at once.
	var most atomic.Int64
	packHooks.Queued = func(n int) {
		for m := most.Load(); int64(n) > m && !most.CompareAndSwap(m, int64(n)); m = most.Load() {
		}
	}
	defer func() { packHooks.Queued = nil }()
	queued := func() int { return int(most.Load()) }
	var wins atomic.Int64
	put := func(i int) {
		k := fmt.Sprintf("%s%d", packPrefix, i%32) // two writers a key
		_, err := d.Put(t.Context(), k, []byte(fmt.Sprint(i)), create)
		switch {
		case err == nil:
			wins.Add(1)
		case driver.Classify(nil, err) != driver.PreconditionFailed:
			t.Errorf("create: %v", err)
		}
	}
	// The first write is alone in its batch; held in its sync, it lets the
	// other 63 queue.
	var first atomic.Bool
	var wg sync.WaitGroup
	packHooks.BeforeSync = func() {
		if first.Swap(true) {
			return
		}
		for i := 1; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				put(i)
			}()
		}
		for deadline := time.Now().Add(10 * time.Second); queued() < 63; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("only %d writes queued behind the first batch", queued())
				return
			}
		}
	}
	defer func() { packHooks.BeforeSync = nil }()
	put(0)
	wg.Wait()
	if wins.Load() != 32 {
		t.Fatalf("%d creates won for 32 keys, two writers each; want 32", wins.Load())
	}
	keys, err := d.ListKeys(t.Context(), packPrefix, "", 100)
	if err != nil || len(keys) != 32 {
		t.Fatalf("ListKeys = %d keys, %v; want 32", len(keys), err)
	}
	data, err := os.ReadFile(lastSeg(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	frames := len(frameLens(t, data))
	if frames != 2 {
		t.Fatalf("%d frames: want the first write's and one for the 63 queued behind it", frames)
	}
}

// TestPackHeadRemoved: a pack removed by hand (its head and segments) and
// made again is not used through the Stores that had found the first:
// each notices the head replaced and uses what is there now; writers
// never share a segment without sharing its lock.
func TestPackHeadRemoved(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a := newPacked(t, dir)
	defer a.Close()
	b := newDriver(t, dir)
	defer b.Close()
	mustPutKey(t, a, packPrefix+"old", "1", create)
	wantValue(t, b, packPrefix+"old", "1")

	for _, name := range []string{"log.d", "log.p"} {
		if err := os.RemoveAll(filepath.Join(dir, "g.d", name)); err != nil {
			t.Fatal(err)
		}
	}
	c := newPacked(t, dir) // a new pack at the same path
	defer c.Close()
	mustPutKey(t, c, packPrefix+"new", "2", create)

	for name, s := range map[string]*Store{"writer": a, "reader": b} {
		mustPutKey(t, s, packPrefix+"from-"+name, name, create)
		wantValue(t, s, packPrefix+"new", "2")
		if _, _, err := s.Get(ctx, packPrefix+"old"); driver.Classify(nil, err) != driver.NotFound {
			t.Fatalf("%s: Get of a key of the removed pack: %v; want not found", name, err)
		}
	}
	for _, key := range []string{"from-writer", "from-reader"} {
		wantValue(t, c, packPrefix+key, strings.TrimPrefix(key, "from-"))
	}

	// Removed and not made again: the prefix is a directory of files.
	for _, name := range []string{"log.d", "log.p"} {
		if err := os.RemoveAll(filepath.Join(dir, "g.d", name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Get(ctx, packPrefix+"new"); driver.Classify(nil, err) != driver.NotFound {
		t.Fatalf("Get after the pack was removed: %v; want not found", err)
	}
	mustPutKey(t, c, packPrefix+"file", "3", create)
	if fi, err := os.Stat(filepath.Join(dir, "g.d", "log.d")); err != nil || !fi.IsDir() {
		t.Fatalf("after the pack's removal, the prefix is not a directory: %v", err)
	}
	wantValue(t, a, packPrefix+"file", "3")
}

// TestPackLargeSegment: a segment read in pieces (pack.ReadChunk) gives
// every frame, whole frames larger than a piece included; a bad frame in
// a later piece is corruption, and one at the end a torn tail.
func TestPackLargeSegment(t *testing.T) {
	defer SetPackSegMax(32 << 20)()
	dir := t.TempDir()
	d := newPacked(t, dir)
	defer d.Close()
	key := func(i int) string { return fmt.Sprintf("%s%03d", packPrefix, i) }
	val := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 100<<10+i*(40<<10)) }
	for i := range 40 { // from 100 KiB to 1.6 MiB: 36 MiB in all
		mustPutKey(t, d, key(i), val(i), create)
	}
	if n := len(segFiles(t, dir)); n != 2 {
		t.Fatalf("%d segments for 36 MiB; want 2", n)
	}
	r := newDriver(t, dir)
	defer r.Close()
	for i := range 40 {
		wantValue(t, r, key(i), val(i))
	}
	seg := lastSeg(t, dir)
	appendBytes(t, seg, encodeFrame(testRec{key: key(99), value: []byte("torn")})[:30])
	wantValue(t, newDriver(t, dir), key(39), val(39))

	first := filepath.Join(dir, "g.d", "log.p", segFiles(t, dir)[0])
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("kkkk")) // key 10's value, past the first piece
	if i < pack.ReadChunk {
		t.Fatalf("key 10's value at %d, in the first %d bytes", i, pack.ReadChunk)
	}
	data[i] = 'K'
	if err := os.WriteFile(first, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newDriver(t, dir).Get(t.Context(), key(39)); err == nil || !strings.Contains(err.Error(), "corrupt pack") {
		t.Fatalf("Get past a corrupt frame in a later piece: %v; want a corrupt pack error", err)
	}
}

// holdFirstSync holds the first writer that reaches its sync after its
// append (packHooks.BeforeSync) until resume is closed; inSync is closed
// when it is held. Later writers sync at once.
func holdFirstSync(t *testing.T) (inSync, resume chan struct{}) {
	inSync, resume = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	packHooks.BeforeSync = func() {
		if !first.Swap(true) {
			close(inSync)
			<-resume
		}
	}
	t.Cleanup(func() { packHooks.BeforeSync = nil })
	return inSync, resume
}

// TestPackWriterStoppedInSync: a writer stopped between its append and
// its sync (SIGSTOP, a disk that takes seconds) holds no lock: another
// process's writer appends meanwhile, after syncing the stopped one's
// frame, and reads it.
func TestPackWriterStoppedInSync(t *testing.T) {
	dir := t.TempDir()
	a := newPacked(t, dir)
	defer a.Close()
	b := newDriver(t, dir) // its own flock, as another process's
	defer b.Close()
	stopped, resume := holdFirstSync(t) // a's; b's must not wait
	done := make(chan error, 1)
	go func() {
		_, err := a.Put(context.Background(), packPrefix+"a", []byte("from a"), create)
		done <- err
	}()
	<-stopped
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := b.Put(ctx, packPrefix+"b", []byte("from b"), create); err != nil {
		t.Fatalf("a write while another writer is stopped in its sync: %v", err)
	}
	wantValue(t, b, packPrefix+"a", "from a")
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the stopped writer's put: %v", err)
	}
	wantValue(t, a, packPrefix+"b", "from b")
}

// TestPackSegmentFilledWhileReaderLooks: a Store that has read the last
// segment to its end, while another Store appends the frame that fills it
// and starts the next, reads that frame before moving on: the key it
// holds is not read as absent, nor created again over its value.
func TestPackSegmentFilledWhileReaderLooks(t *testing.T) {
	_, w, r := smallSegments(t)
	val := strings.Repeat("v", 100)
	mustPutKey(t, w, packKey(0), val, create)
	filled := false
	packHooks.AfterSegmentRead = func(writer bool) {
		if !writer && !filled {
			filled = true
			mustPutKey(t, w, packKey(1), val, create) // fills segment 1
			mustPutKey(t, w, packKey(2), val, create) // starts segment 2
		}
	}
	defer func() { packHooks.AfterSegmentRead = nil }()
	wantValue(t, r, packKey(0), val)
	if !filled {
		t.Fatal("the reader never read a segment to its end: nothing tested")
	}
	packHooks.AfterSegmentRead = nil
	wantValue(t, r, packKey(1), val)
	if _, err := r.Put(t.Context(), packKey(1), []byte("over"), create); driver.Classify(nil, err) != driver.PreconditionFailed {
		t.Fatalf("create over the key the reader skipped: %v; want precondition failed", err)
	}
	wantValue(t, w, packKey(1), val)
}

// TestPackReportsVisibleBeforeSync: a packed put under driver.WithVisible
// says when its frame is visible, before its sync: another process's
// Store reads the value then, while the writer is still in its sync, and
// the put itself returns only after the sync. A refused put, a refused
// delete and a delete of a key that is not there report nothing.
func TestPackReportsVisibleBeforeSync(t *testing.T) {
	dir := t.TempDir()
	a := newPacked(t, dir)
	defer a.Close()
	b := newDriver(t, dir) // its own flock, as another process's
	defer b.Close()
	var visibles atomic.Int32
	visible := make(chan struct{}, 1)
	ctx := driver.WithVisible(t.Context(), func() {
		visibles.Add(1)
		visible <- struct{}{}
	})
	inSync, resume := holdFirstSync(t)
	done := make(chan error, 1)
	go func() {
		_, err := a.Put(ctx, packPrefix+"a", []byte("from a"), create)
		done <- err
	}()
	<-inSync
	select {
	case <-visible:
	default:
		t.Error("the writer reached its sync without reporting its put visible")
	}
	wantValue(t, b, packPrefix+"a", "from a")
	select {
	case err := <-done:
		t.Fatalf("the put returned before its sync (err %v)", err)
	default:
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("put: %v", err)
	}
	if _, err := a.Put(ctx, packPrefix+"a", []byte("again"), create); driver.Classify(nil, err) != driver.PreconditionFailed {
		t.Fatalf("a second create of the key: %v; want a precondition failure", err)
	}
	if err := a.Delete(ctx, packPrefix+"a", driver.Cond{Kind: driver.IfMatch, Version: "no such version"}); driver.Classify(nil, err) != driver.PreconditionFailed {
		t.Fatalf("a delete on another version: %v; want a precondition failure", err)
	}
	if err := a.Delete(ctx, packPrefix+"never", driver.Cond{}); err != nil {
		t.Fatalf("a delete of a key that is not there: %v", err)
	}
	if n := visibles.Load(); n != 1 {
		t.Fatalf("visible reported %d times; want once, for the put that was made", n)
	}
	if err := a.Delete(ctx, packPrefix+"a", driver.Cond{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-visible:
	default:
		t.Error("the delete did not report visible")
	}
	if _, _, err := b.Get(t.Context(), packPrefix+"a"); driver.Classify(nil, err) != driver.NotFound {
		t.Fatalf("get after the delete: %v; want not found", err)
	}
}

// TestPackShowsOnlyWhatItMade: a delete of a key that is not there, taken
// in one frame with a put, makes no record, so it reports nothing visible
// while the put beside it does.
func TestPackShowsOnlyWhatItMade(t *testing.T) {
	dir := t.TempDir()
	d := newPacked(t, dir)
	defer d.Close()
	var queued atomic.Int64
	packHooks.Queued = func(n int) { queued.Store(int64(n)) }
	defer func() { packHooks.Queued = nil }()
	inSync, resume := holdFirstSync(t)
	first := make(chan error, 1)
	go func() {
		_, err := d.Put(t.Context(), packPrefix+"first", []byte("1"), create)
		first <- err
	}()
	<-inSync
	var putShown, delShown atomic.Int32
	errs := make(chan error, 2)
	go func() {
		_, err := d.Put(driver.WithVisible(t.Context(), func() { putShown.Add(1) }), packPrefix+"put", []byte("2"), create)
		errs <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); queued.Load() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(resume)
			t.Fatal("the put did not queue behind the held batch")
		}
	}
	go func() {
		errs <- d.Delete(driver.WithVisible(t.Context(), func() { delShown.Add(1) }), packPrefix+"never", driver.Cond{})
	}()
	for deadline := time.Now().Add(10 * time.Second); queued.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(resume)
			t.Fatal("the delete did not queue behind the held batch")
		}
	}
	close(resume)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if putShown.Load() != 1 || delShown.Load() != 0 {
		t.Fatalf("shown: the put %d times, the delete of nothing %d; want 1 and 0", putShown.Load(), delShown.Load())
	}
}
