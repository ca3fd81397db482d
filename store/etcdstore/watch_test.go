package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/etcdstore"
)

// watchTimeout bounds every wait for an event or for a channel to close.
const watchTimeout = 10 * time.Second

func watcher(t *testing.T, s *store.Store) driver.Watcher {
	t.Helper()
	w, ok := s.Driver().(driver.Watcher)
	if !ok {
		t.Fatalf("%T does not implement driver.Watcher", s.Driver())
	}
	return w
}

func mustPut(t *testing.T, s *store.Store, key, data string, cond store.Cond) string {
	t.Helper()
	v, err := s.Put(t.Context(), key, []byte(data), cond)
	if err != nil {
		t.Fatalf("Put(%q, %q): %v", key, data, err)
	}
	return v
}

// next returns the next event, failing t if none comes within watchTimeout
// or the channel closes.
func next(t *testing.T, ch <-chan driver.WatchEvent) driver.WatchEvent {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended; want another event")
		}
		return e
	case <-time.After(watchTimeout):
		t.Fatalf("no event within %v", watchTimeout)
	}
	return driver.WatchEvent{}
}

// wantClosed fails t unless ch closes within watchTimeout without sending
// another event.
func wantClosed(t *testing.T, ch <-chan driver.WatchEvent) {
	t.Helper()
	select {
	case e, ok := <-ch:
		if ok {
			t.Fatalf("got event %+v; want the watch to end", e)
		}
	case <-time.After(watchTimeout):
		t.Fatalf("the watch did not end within %v", watchTimeout)
	}
}

// wantQuiet fails t if ch sends anything within d.
func wantQuiet(t *testing.T, ch <-chan driver.WatchEvent, d time.Duration) {
	t.Helper()
	select {
	case e, ok := <-ch:
		t.Fatalf("got %+v (open %v); want nothing", e, ok)
	case <-time.After(d):
	}
}

func wantEvent(t *testing.T, got driver.WatchEvent, data, version string, deleted bool) {
	t.Helper()
	if got.Deleted != deleted || got.Version != version || (!deleted && string(got.Data) != data) || (deleted && got.Data != nil) {
		t.Fatalf("event %+v (data %q); want data %q, version %s, deleted %v", got, got.Data, data, version, deleted)
	}
}

func TestWatchEvents(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	ctx := t.Context()
	v1 := mustPut(t, s, "k", "one", store.IfAbsent())
	ch, err := watcher(t, s).Watch(ctx, "k", v1)
	if err != nil {
		t.Fatal(err)
	}

	v2 := mustPut(t, s, "k", "two", store.IfMatch(v1))
	wantEvent(t, next(t, ch), "two", v2, false)

	// Other keys, even ones the watched key is a prefix of, send nothing.
	mustPut(t, s, "k2", "other", store.IfAbsent())
	mustPut(t, s, "k/child", "other", store.IfAbsent())
	// A refused write changes nothing and sends nothing.
	if _, err := s.Put(ctx, "k", []byte("stale"), store.IfMatch(v1)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("stale swap: %v", err)
	}
	v3 := mustPut(t, s, "k", "three", store.IfMatch(v2))
	wantEvent(t, next(t, ch), "three", v3, false)

	if err := s.Delete(ctx, "k", store.IfMatch(v3)); err != nil {
		t.Fatal(err)
	}
	del := next(t, ch)
	if !del.Deleted || del.Data != nil {
		t.Fatalf("after a delete: %+v; want a deletion", del)
	}
	if r, _ := strconv.ParseInt(del.Version, 10, 64); r <= mustRev(t, v3) {
		t.Fatalf("deletion at version %s, not after the last write %s", del.Version, v3)
	}

	v4 := mustPut(t, s, "k", "", store.IfAbsent())
	e := next(t, ch)
	wantEvent(t, e, "", v4, false)
	if e.Data == nil {
		t.Error("an empty value arrived as nil data")
	}
	wantQuiet(t, ch, 200*time.Millisecond)
}

func mustRev(t *testing.T, v string) int64 {
	t.Helper()
	r, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("version %q is not a revision: %v", v, err)
	}
	return r
}

// TestWatchFromVersionMissesNothing makes changes before the watch starts:
// a watch from a version sends every change after it, old and new, in
// order.
func TestWatchFromVersionMissesNothing(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	ctx := t.Context()
	versions := []string{mustPut(t, s, "k", "v0", store.IfAbsent())}
	for i := 1; i < 20; i++ {
		versions = append(versions, mustPut(t, s, "k", fmt.Sprintf("v%d", i), store.IfMatch(versions[i-1])))
	}
	ch, err := watcher(t, s).Watch(ctx, "k", versions[4])
	if err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 20; i++ {
		wantEvent(t, next(t, ch), fmt.Sprintf("v%d", i), versions[i], false)
	}
	// Live changes follow the history without a gap.
	for i := 20; i < 30; i++ {
		versions = append(versions, mustPut(t, s, "k", fmt.Sprintf("v%d", i), store.IfMatch(versions[i-1])))
	}
	for i := 20; i < 30; i++ {
		wantEvent(t, next(t, ch), fmt.Sprintf("v%d", i), versions[i], false)
	}

	// A watch resumed from the last version seen sends only what came
	// after it.
	ch2, err := watcher(t, s).Watch(ctx, "k", versions[29])
	if err != nil {
		t.Fatal(err)
	}
	wantQuiet(t, ch2, 200*time.Millisecond)
	v := mustPut(t, s, "k", "v30", store.IfMatch(versions[29]))
	wantEvent(t, next(t, ch2), "v30", v, false)
	wantEvent(t, next(t, ch), "v30", v, false)
}

// TestWatchFromNow watches without a version: changes made once the watch
// is set up arrive; the test cannot know when that is, so it writes until
// the first event comes.
func TestWatchFromNow(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	ctx := t.Context()
	v := mustPut(t, s, "k", "w0", store.IfAbsent())
	written := map[string]string{}
	ch, err := watcher(t, s).Watch(ctx, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(watchTimeout)
	var first driver.WatchEvent
	for i := 1; first.Version == ""; i++ {
		data := fmt.Sprintf("w%d", i)
		v = mustPut(t, s, "k", data, store.IfMatch(v))
		written[v] = data
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("the watch ended")
			}
			first = e
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no event within %v", watchTimeout)
		}
	}
	if written[first.Version] != string(first.Data) {
		t.Fatalf("first event %+v matches none of the writes %v", first, written)
	}
	// Everything after the first event arrives, in order.
	last := mustPut(t, s, "k", "final", store.IfMatch(v))
	for {
		e := next(t, ch)
		if mustRev(t, e.Version) <= mustRev(t, first.Version) {
			t.Fatalf("event %s after %s: out of order", e.Version, first.Version)
		}
		first = e
		if e.Version == last {
			wantEvent(t, e, "final", last, false)
			break
		}
	}
}

func TestWatchEndsWithContext(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := watcher(t, s).Watch(ctx, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	wantClosed(t, ch)

	// An already cancelled context: an error, or a channel that closes.
	if ch, err := watcher(t, s).Watch(ctx, "k", ""); err == nil {
		wantClosed(t, ch)
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with a cancelled context: %v", err)
	}
}

func TestWatchEndsWithClose(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	w := watcher(t, s)
	ch, err := w.Watch(t.Context(), "k", "")
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads ch: Close must not wait for a reader.
	mustPut(t, s, "k", "unread", store.IfAbsent())
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(watchTimeout):
		t.Fatal("Close did not return while a watch was open")
	}
	// The event in flight may or may not be delivered; then the channel
	// closes.
	drain := time.After(watchTimeout)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-drain:
			t.Fatal("the watch did not end after Close")
		}
	}
	if _, err := w.Watch(t.Context(), "k", ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close: %v; want ErrClosed", err)
	}
}

func TestWatchInvalid(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	w := watcher(t, s)
	for _, c := range []struct{ key, version string }{
		{"", ""},
		{"k", "not-a-version"},
		{"k", "0"},
		{"k", "-3"},
		{"k", "9223372036854775807"},
	} {
		ch, err := w.Watch(t.Context(), c.key, c.version)
		if err == nil {
			t.Errorf("Watch(%q, %q) started a watch", c.key, c.version)
			wantClosed(t, ch)
			continue
		}
		if k := driver.Classify(s.Driver(), err); k != driver.InvalidArgument {
			t.Errorf("Watch(%q, %q): %v is %v, want invalid argument", c.key, c.version, err, k)
		}
	}
}

// TestWatchCompacted starts a watch from a version whose history has been
// compacted away: the watch ends without an event, and Get, the caller's
// fallback, reads the current value.
func TestWatchCompacted(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	s := openOn(t, srv)
	ctx := t.Context()
	v := mustPut(t, s, "k", "c0", store.IfAbsent())
	first := v
	for i := 1; i < 5; i++ {
		v = mustPut(t, s, "k", fmt.Sprintf("c%d", i), store.IfMatch(v))
	}
	// A watch that is running when the compaction happens is not
	// affected by it.
	live, err := watcher(t, s).Watch(ctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client(t).Compact(ctx, mustRev(t, v)); err != nil {
		t.Fatalf("compact: %v", err)
	}

	ch, err := watcher(t, s).Watch(ctx, "k", first)
	if err != nil {
		t.Fatalf("Watch from a compacted version: %v; want a watch that ends", err)
	}
	wantClosed(t, ch)
	data, gv, err := s.Get(ctx, "k")
	if err != nil || string(data) != "c4" || gv != v {
		t.Fatalf("Get after the watch ended = %q, %q, %v; want c4, %s", data, gv, err, v)
	}

	v5 := mustPut(t, s, "k", "c5", store.IfMatch(v))
	wantEvent(t, next(t, live), "c5", v5, false)
	// Watching again from the version just read works.
	again, err := watcher(t, s).Watch(ctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, next(t, again), "c5", v5, false)
}

// TestWatchVersionIsStoreVersion checks that an event's version is what
// Get returns and what IfMatch accepts.
func TestWatchVersionIsStoreVersion(t *testing.T) {
	s := openOn(t, testutil.Etcd(t))
	ctx := t.Context()
	v := mustPut(t, s, "k", "a", store.IfAbsent())
	ch, err := watcher(t, s).Watch(ctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	v2 := mustPut(t, s, "k", "b", store.IfMatch(v))
	e := next(t, ch)
	_, gv, err := s.Get(ctx, "k")
	if err != nil || e.Version != v2 || gv != v2 {
		t.Fatalf("event version %s, Get version %s (%v), Put returned %s", e.Version, gv, err, v2)
	}
	if _, err := s.Put(ctx, "k", []byte("c"), store.IfMatch(e.Version)); err != nil {
		t.Fatalf("IfMatch(event version): %v", err)
	}
	if etcdVersion(mustRev(t, v2)) != v2 {
		t.Errorf("FormatVersion(%d) = %q", mustRev(t, v2), etcdVersion(mustRev(t, v2)))
	}
}

func etcdVersion(rev int64) string { return etcdstore.FormatVersion(rev) }
