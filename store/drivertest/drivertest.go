// Package drivertest is the conformance suite every tenure store driver
// passes. A driver's tests call RunConformanceTests with a function that
// opens a fresh, empty store; the suite then checks the whole contract of
// store.Store through the portable layer: every error case, awkward keys and
// values, List paging and order, cancellation, Close, races in which many
// goroutines create and compare-and-swap one key and exactly one must win,
// and, where the harness can lose a write's answer (Options.LostAnswer), that
// such a write is reported as ambiguous and store.PutResolved finds it landed.
package drivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
)

// Options adapt the suite to a driver. Zero values mean the defaults.
type Options struct {
	// MaxKeyLen is the longest key the driver stores (default
	// store.MaxKeyLen). Drivers that add a prefix set it lower; the suite
	// then also checks that a longer key is refused with
	// store.ErrInvalidArgument.
	MaxKeyLen int
	// MaxValueSize is the largest value, in bytes, that the driver stores
	// (default: the suite writes a 5 MiB value, which every driver must
	// then store). Drivers whose store caps values lower (DynamoDB's 400
	// KiB items, Route 53's TXT records) set it; the suite then writes a
	// value of exactly MaxValueSize bytes instead and checks that one byte
	// more is refused with store.ErrInvalidArgument, writing nothing.
	MaxValueSize int
	// RaceRounds is the number of rounds of each race (default 200).
	RaceRounds int
	// RaceWorkers is the number of goroutines in each race (default 16).
	RaceWorkers int
	// LostAnswer, if set, opens a fresh, empty store that can lose the
	// answer to a write: after loseNext, the next conditional write
	// reaches the store and is applied, and its answer never reaches the
	// driver (an HTTP driver gets this from faultstore.Transport's
	// HTTPApplyThenDrop rule). The suite then checks that such a write is
	// reported as ambiguous, never as failed, and that store.PutResolved
	// finds that it landed. Drivers without a transport to break leave it
	// nil and the case is skipped.
	LostAnswer func(t *testing.T) (s *store.Store, loseNext func())
}

func (o Options) withDefaults() Options {
	if o.MaxKeyLen <= 0 {
		o.MaxKeyLen = store.MaxKeyLen
	}
	if o.RaceRounds <= 0 {
		o.RaceRounds = 200
	}
	if o.RaceWorkers <= 0 {
		o.RaceWorkers = 16
	}
	return o
}

// RunConformanceTests runs the whole suite. open must return a fresh, empty
// store on every call; the suite closes it (the harness may register cleanups
// of its own with t.Cleanup).
func RunConformanceTests(t *testing.T, open func(t *testing.T) *store.Store, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	mk := func(t *testing.T) *store.Store {
		s := open(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("GetMissing", func(t *testing.T) { testGetMissing(t, mk(t)) })
	t.Run("CreateIfAbsent", func(t *testing.T) { testCreateIfAbsent(t, mk(t)) })
	t.Run("CompareAndSwap", func(t *testing.T) { testCompareAndSwap(t, mk(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, mk(t)) })
	t.Run("InvalidArguments", func(t *testing.T) { testInvalidArguments(t, mk(t), opts) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, mk(t), opts) })
	t.Run("Values", func(t *testing.T) { testValues(t, mk(t), opts) })
	t.Run("GetLimited", func(t *testing.T) { testGetLimited(t, mk(t), opts) })
	t.Run("ListOrder", func(t *testing.T) { testListOrder(t, mk(t)) })
	t.Run("ListPaging", func(t *testing.T) { testListPaging(t, mk(t)) })
	t.Run("Cancellation", func(t *testing.T) { testCancellation(t, mk(t)) })
	t.Run("ErrorsAreWrapped", func(t *testing.T) { testErrorsAreWrapped(t, mk(t)) })
	t.Run("Close", func(t *testing.T) { testClose(t, open(t)) })
	t.Run("RaceCreate", func(t *testing.T) { testRaceCreate(t, mk(t), opts) })
	t.Run("RaceCompareAndSwap", func(t *testing.T) { testRaceCAS(t, mk(t), opts) })
	t.Run("LostAnswer", func(t *testing.T) {
		if opts.LostAnswer == nil {
			t.Skip("the harness cannot lose an answer (Options.LostAnswer is nil)")
		}
		s, loseNext := opts.LostAnswer(t)
		t.Cleanup(func() { _ = s.Close() })
		testLostAnswer(t, s, loseNext)
	})
}

// testLostAnswer: a write applied whose answer was lost is ambiguous, not a
// failure, and PutResolved settles it as landed, for a create and a
// compare-and-swap.
func testLostAnswer(t *testing.T, s *store.Store, loseNext func()) {
	want := []byte(`{"nonce":"lost-1"}`)
	loseNext()
	_, err := s.Put(ctxFor(t), "lost/plain", want, store.IfAbsent())
	if err == nil || !store.IsAmbiguous(err) || errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrPermanent) {
		t.Fatalf("create whose answer was lost: %v; want an ambiguous error", err)
	}
	if data, _ := mustGet(t, s, "lost/plain"); !bytes.Equal(data, want) {
		t.Fatalf("the create whose answer was lost holds %q; it reached the store with %q", data, want)
	}

	for _, c := range []struct {
		name string
		cond func(v string) store.Cond
	}{
		{"create", func(string) store.Cond { return store.IfAbsent() }},
		{"compare-and-swap", func(v string) store.Cond { return store.IfMatch(v) }},
	} {
		key := "lost/resolved-" + strings.ReplaceAll(c.name, " ", "-")
		v := ""
		if c.name != "create" {
			v = mustPut(t, s, key, []byte(`{"nonce":"before"}`), store.IfAbsent())
		}
		data := []byte(`{"nonce":"` + c.name + `"}`)
		loseNext()
		nv, err := store.PutResolved(ctxFor(t), s, key, data, c.cond(v), store.ResolveOptions{Backoff: func(int) time.Duration { return 0 }})
		if err != nil {
			t.Fatalf("PutResolved %s whose answer was lost: %v; want it settled as landed", c.name, err)
		}
		got, gv := mustGet(t, s, key)
		if !bytes.Equal(got, data) || gv != nv {
			t.Fatalf("after PutResolved %s: Get = %q, version %q; want %q, version %q", c.name, got, gv, data, nv)
		}
	}
}

func ctxFor(t *testing.T) context.Context { return t.Context() }

func mustPut(t *testing.T, s *store.Store, key string, data []byte, cond store.Cond) string {
	t.Helper()
	v, err := s.Put(ctxFor(t), key, data, cond)
	if err != nil {
		t.Fatalf("Put(%q, %v): %v", key, cond.Kind, err)
	}
	if v == "" {
		t.Fatalf("Put(%q) returned an empty version", key)
	}
	return v
}

func mustGet(t *testing.T, s *store.Store, key string) ([]byte, string) {
	t.Helper()
	data, v, err := s.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return data, v
}

func wantErr(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, sentinel)
	}
}

func wantGone(t *testing.T, s *store.Store, key string) {
	t.Helper()
	_, _, err := s.Get(ctxFor(t), key)
	wantErr(t, fmt.Sprintf("Get(%q) of a missing key", key), err, store.ErrNotFound)
}

func testGetMissing(t *testing.T, s *store.Store) {
	data, v, err := s.Get(ctxFor(t), "missing")
	wantErr(t, "Get of a missing key", err, store.ErrNotFound)
	if data != nil || v != "" {
		t.Errorf("Get of a missing key returned data %q, version %q", data, v)
	}
	for _, other := range []error{store.ErrPreconditionFailed, store.ErrTransient, store.ErrPermanent} {
		if errors.Is(err, other) {
			t.Errorf("not-found error also matches %v", other)
		}
	}
}

func testCreateIfAbsent(t *testing.T, s *store.Store) {
	v1 := mustPut(t, s, "k", []byte("one"), store.IfAbsent())
	data, v := mustGet(t, s, "k")
	if string(data) != "one" || v != v1 {
		t.Fatalf("Get after create = %q, %q; want %q, %q", data, v, "one", v1)
	}
	_, err := s.Put(ctxFor(t), "k", []byte("two"), store.IfAbsent())
	wantErr(t, "second create-if-absent", err, store.ErrPreconditionFailed)
	data, v = mustGet(t, s, "k")
	if string(data) != "one" || v != v1 {
		t.Fatalf("a refused create changed the object: %q, %q", data, v)
	}
	// A create after a delete succeeds again.
	if err := deleteAt(t, s, "k", v1); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustPut(t, s, "k", []byte("three"), store.IfAbsent())
	data, _ = mustGet(t, s, "k")
	if string(data) != "three" {
		t.Fatalf("Get after re-create = %q", data)
	}
}

func testCompareAndSwap(t *testing.T, s *store.Store) {
	v1 := mustPut(t, s, "k", []byte("one"), store.IfAbsent())
	v2 := mustPut(t, s, "k", []byte("two"), store.IfMatch(v1))
	if v2 == v1 {
		t.Fatalf("a write of different bytes kept version %q", v1)
	}
	data, v := mustGet(t, s, "k")
	if string(data) != "two" || v != v2 {
		t.Fatalf("Get after swap = %q, %q; want two, %q", data, v, v2)
	}
	_, err := s.Put(ctxFor(t), "k", []byte("stale"), store.IfMatch(v1))
	wantErr(t, "compare-and-swap on a stale version", err, store.ErrPreconditionFailed)
	_, err = s.Put(ctxFor(t), "missing", []byte("x"), store.IfMatch(v2))
	wantErr(t, "compare-and-swap on a missing key", err, store.ErrPreconditionFailed)
	wantGone(t, s, "missing")
	_, err = s.Put(ctxFor(t), "k", []byte("bogus"), store.IfMatch("not-a-version-of-anything"))
	wantErr(t, "compare-and-swap on a made-up version", err, store.ErrPreconditionFailed)
	data, v = mustGet(t, s, "k")
	if string(data) != "two" || v != v2 {
		t.Fatalf("refused swaps changed the object: %q, %q", data, v)
	}
	// Swapping to the same bytes is allowed; the version may or may not change.
	v3 := mustPut(t, s, "k", []byte("two"), store.IfMatch(v2))
	if _, v = mustGet(t, s, "k"); v != v3 {
		t.Fatalf("Get version %q after a swap that returned %q", v, v3)
	}
}

// testDelete: a conditional delete keeps its contract (refused on a stale
// version and on a missing key), or, on a store that cannot keep it, every
// conditional delete is refused with store.ErrUnsupported and nothing is
// deleted. Unconditional deletes work on every store.
func testDelete(t *testing.T, s *store.Store) {
	v1 := mustPut(t, s, "k", []byte("one"), store.IfAbsent())
	v2 := mustPut(t, s, "k", []byte("two"), store.IfMatch(v1))
	err := s.Delete(ctxFor(t), "k", store.IfMatch(v1))
	if data, v := mustGet(t, s, "k"); string(data) != "two" || v != v2 {
		t.Fatalf("a delete on a stale version (%v) changed the object: %q at %q", err, data, v)
	}
	if errors.Is(err, store.ErrUnsupported) {
		testDeleteUnsupported(t, s, v2)
		return
	}
	wantErr(t, "delete on a stale version", err, store.ErrPreconditionFailed)
	if err := s.Delete(ctxFor(t), "k", store.IfMatch(v2)); err != nil {
		t.Fatalf("delete on the current version: %v", err)
	}
	wantGone(t, s, "k")
	wantErr(t, "conditional delete of a missing key", s.Delete(ctxFor(t), "k", store.IfMatch(v2)), store.ErrPreconditionFailed)
	wantGone(t, s, "k")
	testDeleteUnconditional(t, s)
}

// deleteAt deletes key, at version v where conditional deletes are kept;
// where they are refused as unsupported (testDelete checks that), without
// a condition.
func deleteAt(t *testing.T, s *store.Store, key, v string) error {
	t.Helper()
	err := s.Delete(ctxFor(t), key, store.IfMatch(v))
	if errors.Is(err, store.ErrUnsupported) {
		err = s.Delete(ctxFor(t), key, store.Cond{})
	}
	return err
}

// testDeleteUnsupported: a store that refused a conditional delete as
// unsupported refuses every one alike, deleting nothing, with an error that
// is definite (not ambiguous, not to be retried).
func testDeleteUnsupported(t *testing.T, s *store.Store, v string) {
	for _, c := range []struct{ name, key string }{{"on the current version", "k"}, {"of a missing key", "absent"}} {
		err := s.Delete(ctxFor(t), c.key, store.IfMatch(v))
		wantErr(t, "conditional delete "+c.name+" on a store that refused one as unsupported", err, store.ErrUnsupported)
		if store.IsAmbiguous(err) || store.IsRetryable(err) {
			t.Fatalf("a refused conditional delete is ambiguous or retryable: %v", err)
		}
	}
	if data, gv := mustGet(t, s, "k"); string(data) != "two" || gv != v {
		t.Fatalf("refused conditional deletes changed the object: %q at %q", data, gv)
	}
	wantGone(t, s, "absent")
	if err := s.Delete(ctxFor(t), "k", store.Cond{}); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}
	wantGone(t, s, "k")
	testDeleteUnconditional(t, s)
}

func testDeleteUnconditional(t *testing.T, s *store.Store) {
	if err := s.Delete(ctxFor(t), "k", store.Cond{}); err != nil {
		t.Fatalf("unconditional delete of a missing key: %v", err)
	}
	mustPut(t, s, "k", []byte("three"), store.IfAbsent())
	if err := s.Delete(ctxFor(t), "k", store.Cond{}); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}
	wantGone(t, s, "k")
	if items, err := s.List(ctxFor(t), "", "", 10); err != nil || len(items) != 0 {
		t.Fatalf("List after deletes = %v, %v; want nothing", items, err)
	}
}

func testInvalidArguments(t *testing.T, s *store.Store, opts Options) {
	ctx := ctxFor(t)
	long := strings.Repeat("k", store.MaxKeyLen+1)
	cases := []struct {
		name string
		call func() error
	}{
		{"put without condition", func() error { _, err := s.Put(ctx, "k", nil, store.Cond{}); return err }},
		{"put IfMatch empty version", func() error { _, err := s.Put(ctx, "k", nil, store.IfMatch("")); return err }},
		{"put empty key", func() error { _, err := s.Put(ctx, "", nil, store.IfAbsent()); return err }},
		{"put key too long", func() error { _, err := s.Put(ctx, long, nil, store.IfAbsent()); return err }},
		{"put invalid UTF-8", func() error { _, err := s.Put(ctx, "bad\xff", nil, store.IfAbsent()); return err }},
		{"put control character", func() error { _, err := s.Put(ctx, "a\x00b", nil, store.IfAbsent()); return err }},
		{"get empty key", func() error { _, _, err := s.Get(ctx, ""); return err }},
		{"get key too long", func() error { _, _, err := s.Get(ctx, long); return err }},
		{"delete IfAbsent", func() error { return s.Delete(ctx, "k", store.IfAbsent()) }},
		{"delete IfMatch empty version", func() error { return s.Delete(ctx, "k", store.IfMatch("")) }},
		{"list limit 0", func() error { _, err := s.List(ctx, "", "", 0); return err }},
		{"list negative limit", func() error { _, err := s.List(ctx, "", "", -1); return err }},
	}
	if opts.MaxKeyLen < store.MaxKeyLen {
		driverLong := strings.Repeat("d", opts.MaxKeyLen+1)
		cases = append(cases, struct {
			name string
			call func() error
		}{"put key longer than the driver stores", func() error {
			_, err := s.Put(ctx, driverLong, nil, store.IfAbsent())
			return err
		}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			wantErr(t, c.name, err, store.ErrInvalidArgument)
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
		})
	}
	if items, err := s.List(ctx, "", "", 10); err != nil || len(items) != 0 {
		t.Fatalf("invalid calls wrote something: %v, %v", items, err)
	}
}

func testKeys(t *testing.T, s *store.Store, opts Options) {
	keys := []string{
		"plain",
		"with/slashes/in/it",
		"/leading-slash",
		"trailing-slash/",
		"double//slash",
		"  with spaces  and more spaces  ",
		"unicode/日本語/ключ/🔑",
		"dots/./and/../segments",
		".",
		"..",
		"...",
		"percent%2Fencoded%",
		"query?x=1&y=2#frag",
		"plus+equals=comma,semicolon;colon:",
		"quote\"apostrophe'back\\slash",
		"brackets[]{}()<>|*!~^`$@",
		"a.k", "a.d", "a.c", ".tmp", ".locks", "%41",
		strings.Repeat("x", opts.MaxKeyLen),
		strings.Repeat("s/", opts.MaxKeyLen/2),
		strings.Repeat("é", opts.MaxKeyLen/2),
	}
	versions := map[string]string{}
	for _, k := range keys {
		versions[k] = mustPut(t, s, k, []byte("value of "+k), store.IfAbsent())
	}
	for _, k := range keys {
		data, v := mustGet(t, s, k)
		if string(data) != "value of "+k || v != versions[k] {
			t.Errorf("Get(%q) = %q, %q; want its own value and version %q", k, data, v, versions[k])
		}
	}
	items, err := s.ListAll(ctxFor(t), "", 7)
	if err != nil {
		t.Fatalf("ListAll: %v", err)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := itemKeys(items); !slices.Equal(got, want) {
		t.Fatalf("List of awkward keys:\n got %q\nwant %q", got, want)
	}
	for _, it := range items {
		if it.Version != versions[it.Key] || it.Size != int64(len("value of "+it.Key)) {
			t.Errorf("List item %q: version %q size %d; want %q, %d", it.Key, it.Version, it.Size, versions[it.Key], len("value of "+it.Key))
		}
	}
	for _, k := range keys {
		if err := deleteAt(t, s, k, versions[k]); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
	}
	if items, err := s.List(ctxFor(t), "", "", 10); err != nil || len(items) != 0 {
		t.Fatalf("List after deleting every key = %v, %v", itemKeys(items), err)
	}
}

func testValues(t *testing.T, s *store.Store, opts Options) {
	size := 5 << 20
	if opts.MaxValueSize > 0 {
		size = opts.MaxValueSize
		over := make([]byte, size+1)
		_, err := s.Put(ctxFor(t), "too-large", over, store.IfAbsent())
		wantErr(t, fmt.Sprintf("Put of %d bytes, over the driver's MaxValueSize", size+1), err, store.ErrInvalidArgument)
		wantGone(t, s, "too-large")
	}
	big := make([]byte, size)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	values := map[string][]byte{
		"empty":   {},
		"binary":  {0, 1, 2, 0xff, 0, '\n', '\r'},
		"largest": big,
	}
	for name, val := range values {
		v := mustPut(t, s, name, val, store.IfAbsent())
		data, gv := mustGet(t, s, name)
		if !bytes.Equal(data, val) || gv != v {
			t.Errorf("%s value: read back %d bytes (version %q), wrote %d (version %q)", name, len(data), gv, len(val), v)
		}
		if len(data) > 0 {
			// The returned slice belongs to the caller: changing it must
			// not change the stored value.
			data[0] ^= 0xff
			again, _ := mustGet(t, s, name)
			if !bytes.Equal(again, val) {
				t.Errorf("%s value changed after the caller modified a returned slice", name)
			}
		}
	}
	// Put must not retain the caller's slice either.
	buf := []byte("original")
	mustPut(t, s, "retained", buf, store.IfAbsent())
	copy(buf, "modified")
	if data, _ := mustGet(t, s, "retained"); string(data) != "original" {
		t.Errorf("stored value followed the caller's slice: %q", data)
	}
	// An empty value can be swapped and deleted like any other.
	_, v := mustGet(t, s, "empty")
	v2 := mustPut(t, s, "empty", []byte("now full"), store.IfMatch(v))
	v3 := mustPut(t, s, "empty", nil, store.IfMatch(v2))
	if data, gv := mustGet(t, s, "empty"); len(data) != 0 || gv != v3 {
		t.Errorf("after swapping back to empty: %q, %q (want version %q)", data, gv, v3)
	}
}

// testGetLimited checks the bounded read: a value larger than the limit
// is refused with ErrTooLarge naming the key and the limit; one at the
// limit, or below it, is read whole with the version Get reports.
func testGetLimited(t *testing.T, s *store.Store, opts Options) {
	size := 64 << 10
	if opts.MaxValueSize > 0 && opts.MaxValueSize < size {
		size = opts.MaxValueSize
	}
	big := make([]byte, size)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, s, "limited", big, store.IfAbsent())
	for _, max := range []int64{1, int64(size) / 2, int64(size) - 1} {
		data, ver, err := s.GetLimited(ctxFor(t), "limited", max)
		wantErr(t, fmt.Sprintf("GetLimited of a %d-byte value with limit %d", size, max), err, store.ErrTooLarge)
		if data != nil || ver != "" {
			t.Fatalf("GetLimited beyond the limit returned %d bytes and version %q with its error", len(data), ver)
		}
		if errors.Is(err, store.ErrNotFound) || store.IsRetryable(err) {
			t.Fatalf("ErrTooLarge is classified as retryable or missing: %v", err)
		}
		if msg := err.Error(); !strings.Contains(msg, `"limited"`) || !strings.Contains(msg, fmt.Sprint(max)) {
			t.Fatalf("the error does not name the key and the limit %d: %v", max, err)
		}
	}
	for _, max := range []int64{int64(size), int64(size) + 1, 1 << 40} {
		data, ver, err := s.GetLimited(ctxFor(t), "limited", max)
		if err != nil {
			t.Fatalf("GetLimited of a %d-byte value with limit %d: %v", size, max, err)
		}
		if !bytes.Equal(data, big) || ver != v {
			t.Fatalf("GetLimited with limit %d returned %d bytes, version %q; want %d bytes, version %q", max, len(data), ver, size, v)
		}
	}
	mustPut(t, s, "limited-empty", []byte{}, store.IfAbsent())
	if data, _, err := s.GetLimited(ctxFor(t), "limited-empty", 1); err != nil || len(data) != 0 {
		t.Fatalf("GetLimited of an empty value: %d bytes, %v", len(data), err)
	}
	_, _, err := s.GetLimited(ctxFor(t), "limited-missing", 10)
	wantErr(t, "GetLimited of a missing key", err, store.ErrNotFound)
	_, _, err = s.GetLimited(ctxFor(t), "limited", 0)
	wantErr(t, "GetLimited with limit 0", err, store.ErrInvalidArgument)
}

func itemKeys(items []store.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}

func testListOrder(t *testing.T, s *store.Store) {
	// Keys chosen so that a directory walk in name order would get the
	// byte order wrong: '-' < '/' < '0', and "a" is both a key and a prefix.
	keys := []string{"a", "a-c", "a/b", "a/b/c", "a0", "a/", "b", "B", "a.b", "aa", "a/b-c", "a/b0", "é", "z"}
	for _, k := range keys {
		mustPut(t, s, k, []byte(k), store.IfAbsent())
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	cases := []struct {
		prefix, after string
		limit         int
	}{
		{"", "", 100},
		{"a", "", 100},
		{"a/", "", 100},
		{"a/b", "", 100},
		{"", "a/", 100},
		{"a", "a-c", 100},
		{"a/", "a/b", 100},
		{"", "", 3},
		{"a", "a/b", 2},
		{"nothing", "", 10},
		{"", "zz", 10},
		{"a/b/c", "", 10},
		{"a/b/c/", "", 10},
	}
	for _, c := range cases {
		var want []string
		for _, k := range sorted {
			if strings.HasPrefix(k, c.prefix) && k > c.after && len(want) < c.limit {
				want = append(want, k)
			}
		}
		items, err := s.List(ctxFor(t), c.prefix, c.after, c.limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", c.prefix, c.after, c.limit, err)
		}
		if got := itemKeys(items); !slices.Equal(got, want) {
			t.Errorf("List(%q, after %q, limit %d):\n got %q\nwant %q", c.prefix, c.after, c.limit, got, want)
		}
		// ListKeys lists the same keys, whether the driver has a listing
		// of its own without versions (driver.KeyLister) or not.
		got, err := s.ListKeys(ctxFor(t), c.prefix, c.after, c.limit)
		if err != nil {
			t.Fatalf("ListKeys(%q, %q, %d): %v", c.prefix, c.after, c.limit, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListKeys(%q, after %q, limit %d):\n got %q\nwant %q", c.prefix, c.after, c.limit, got, want)
		}
	}
}

func testListPaging(t *testing.T, s *store.Store) {
	var keys []string
	for i := 0; i < 57; i++ {
		k := fmt.Sprintf("log/%020d", i)
		keys = append(keys, k)
		mustPut(t, s, k, []byte(k), store.IfAbsent())
	}
	mustPut(t, s, "other/x", []byte("x"), store.IfAbsent())
	mustPut(t, s, "log", []byte("x"), store.IfAbsent())
	for _, page := range []int{1, 2, 10, 56, 57, 58, 1000} {
		var got []string
		after := ""
		for calls := 0; ; calls++ {
			if calls > len(keys)+1 {
				t.Fatalf("page size %d: paging does not end", page)
			}
			items, err := s.List(ctxFor(t), "log/", after, page)
			if err != nil {
				t.Fatalf("List page %d: %v", page, err)
			}
			if len(items) > page {
				t.Fatalf("List returned %d items with limit %d", len(items), page)
			}
			got = append(got, itemKeys(items)...)
			if len(items) < page {
				break
			}
			after = items[len(items)-1].Key
		}
		if !slices.Equal(got, keys) {
			t.Errorf("paging by %d: got %d keys %q…, want %d", page, len(got), got[:min(3, len(got))], len(keys))
		}
		got = nil
		after = ""
		for calls := 0; ; calls++ {
			if calls > len(keys)+1 {
				t.Fatalf("ListKeys page size %d: paging does not end", page)
			}
			ks, err := s.ListKeys(ctxFor(t), "log/", after, page)
			if err != nil {
				t.Fatalf("ListKeys page %d: %v", page, err)
			}
			if len(ks) > page {
				t.Fatalf("ListKeys returned %d keys with limit %d", len(ks), page)
			}
			got = append(got, ks...)
			if len(ks) < page {
				break
			}
			after = ks[len(ks)-1]
		}
		if !slices.Equal(got, keys) {
			t.Errorf("ListKeys paging by %d: got %d keys %q…, want %d", page, len(got), got[:min(3, len(got))], len(keys))
		}
	}
	all, err := s.ListAll(ctxFor(t), "log/", 5)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("ListAll = %d items, %v; want %d", len(all), err, len(keys))
	}
}

func testCancellation(t *testing.T, s *store.Store) {
	v := mustPut(t, s, "k", []byte("one"), store.IfAbsent())
	ctx, cancel := context.WithCancel(ctxFor(t))
	cancel()
	calls := map[string]func() error{
		"get":    func() error { _, _, err := s.Get(ctx, "k"); return err },
		"create": func() error { _, err := s.Put(ctx, "new", []byte("x"), store.IfAbsent()); return err },
		"swap":   func() error { _, err := s.Put(ctx, "k", []byte("two"), store.IfMatch(v)); return err },
		"delete": func() error { return s.Delete(ctx, "k", store.IfMatch(v)) },
		"list":   func() error { _, err := s.List(ctx, "", "", 10); return err },
		"keys":   func() error { _, err := s.ListKeys(ctx, "", "", 10); return err },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s with a cancelled context succeeded", name)
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v does not match context.Canceled", name, err)
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrPreconditionFailed) {
			t.Errorf("%s with a cancelled context claims a definite answer: %v", name, err)
		}
	}
	// A call whose context was cancelled before it started changed nothing.
	if data, gv := mustGet(t, s, "k"); string(data) != "one" || gv != v {
		t.Errorf("cancelled calls changed k: %q, %q", data, gv)
	}
	wantGone(t, s, "new")
}

func testErrorsAreWrapped(t *testing.T, s *store.Store) {
	v := mustPut(t, s, "present", []byte("x"), store.IfAbsent())
	ctx := ctxFor(t)
	// A store that cannot keep a conditional delete's contract refuses it
	// as unsupported (testDelete checks that it does so consistently).
	delErr, delWant := s.Delete(ctx, "absent", store.IfMatch(v)), store.ErrPreconditionFailed
	if errors.Is(delErr, store.ErrUnsupported) {
		delWant = store.ErrUnsupported
	}
	cases := []struct {
		op, key string
		err     error
		want    error
	}{
		{"get", "absent", func() error { _, _, err := s.Get(ctx, "absent"); return err }(), store.ErrNotFound},
		{"put", "present", func() error { _, err := s.Put(ctx, "present", []byte("y"), store.IfAbsent()); return err }(), store.ErrPreconditionFailed},
		{"put", "absent", func() error { _, err := s.Put(ctx, "absent", []byte("y"), store.IfMatch(v)); return err }(), store.ErrPreconditionFailed},
		{"delete", "absent", delErr, delWant},
		{"list", "p", func() error { _, err := s.List(ctx, "p", "", 0); return err }(), store.ErrInvalidArgument},
	}
	for _, c := range cases {
		var se *store.Error
		if !errors.As(c.err, &se) {
			t.Errorf("%s %q: error %v (%T) is not a *store.Error", c.op, c.key, c.err, c.err)
			continue
		}
		if se.Op != c.op || se.Key != c.key {
			t.Errorf("error %v names op %q key %q; want %q %q", c.err, se.Op, se.Key, c.op, c.key)
		}
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s %q: %v does not match %v", c.op, c.key, c.err, c.want)
		}
		// Wrapped once: the driver's error inside is not itself a *store.Error.
		var inner *store.Error
		if se.Err != nil && errors.As(se.Err, &inner) {
			t.Errorf("%s %q: error wrapped twice: %v", c.op, c.key, c.err)
		}
		if !strings.Contains(c.err.Error(), c.key) || !strings.Contains(c.err.Error(), c.op) {
			t.Errorf("message %q does not name the operation and key", c.err.Error())
		}
	}
}

func testClose(t *testing.T, s *store.Store) {
	mustPut(t, s, "k", []byte("x"), store.IfAbsent())
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := ctxFor(t)
	_, _, err := s.Get(ctx, "k")
	wantErr(t, "Get after Close", err, store.ErrClosed)
	_, err = s.Put(ctx, "k2", nil, store.IfAbsent())
	wantErr(t, "Put after Close", err, store.ErrClosed)
	wantErr(t, "Delete after Close", s.Delete(ctx, "k", store.Cond{}), store.ErrClosed)
	_, err = s.List(ctx, "", "", 1)
	wantErr(t, "List after Close", err, store.ErrClosed)
}

// outcome of one racer's write.
type outcome int

const (
	won outcome = iota
	lost
	failed
)

func classify(err error) outcome {
	switch {
	case err == nil:
		return won
	case errors.Is(err, store.ErrPreconditionFailed), errors.Is(err, store.ErrConflict):
		// A conflict (S3 409) is a refusal too: the write did not apply.
		return lost
	}
	return failed
}

// race runs workers goroutines that all call write at once and returns the
// indexes of the winners.
func race(t *testing.T, workers int, write func(w int) error) []int {
	t.Helper()
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []int
		errs    []error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := write(w)
			mu.Lock()
			defer mu.Unlock()
			switch classify(err) {
			case won:
				winners = append(winners, w)
			case failed:
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("racing writes failed with errors that are neither success nor refusal: %v", errors.Join(errs...))
	}
	return winners
}

func payload(round, worker int) []byte {
	return []byte(fmt.Sprintf(`{"round":%d,"worker":%d,"nonce":%q}`, round, worker, rand.Text()))
}

func testRaceCreate(t *testing.T, s *store.Store, opts Options) {
	ctx := ctxFor(t)
	for r := 0; r < opts.RaceRounds; r++ {
		key := fmt.Sprintf("race/create/%04d", r)
		data := make([][]byte, opts.RaceWorkers)
		for w := range data {
			data[w] = payload(r, w)
		}
		winners := race(t, opts.RaceWorkers, func(w int) error {
			_, err := s.Put(ctx, key, data[w], store.IfAbsent())
			return err
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: %d goroutines won create-if-absent (%v); want exactly 1", r, len(winners), winners)
		}
		if got, _ := mustGet(t, s, key); !bytes.Equal(got, data[winners[0]]) {
			t.Fatalf("round %d: stored %q; the winner wrote %q", r, got, data[winners[0]])
		}
	}
}

func testRaceCAS(t *testing.T, s *store.Store, opts Options) {
	ctx := ctxFor(t)
	const key = "race/cas"
	v := mustPut(t, s, key, payload(-1, -1), store.IfAbsent())
	for r := 0; r < opts.RaceRounds; r++ {
		data := make([][]byte, opts.RaceWorkers)
		versions := make([]string, opts.RaceWorkers)
		for w := range data {
			data[w] = payload(r, w)
		}
		seen := v
		winners := race(t, opts.RaceWorkers, func(w int) error {
			nv, err := s.Put(ctx, key, data[w], store.IfMatch(seen))
			versions[w] = nv
			return err
		})
		if len(winners) != 1 {
			t.Fatalf("round %d: %d goroutines won compare-and-swap on the same version (%v); want exactly 1", r, len(winners), winners)
		}
		got, gv := mustGet(t, s, key)
		if !bytes.Equal(got, data[winners[0]]) || gv != versions[winners[0]] {
			t.Fatalf("round %d: stored %q (version %q); the winner wrote %q (version %q)", r, got, gv, data[winners[0]], versions[winners[0]])
		}
		v = gv
	}
}
