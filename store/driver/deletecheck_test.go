package driver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// checked is a driver over inner that guards its conditional deletes with a
// DeleteCheck, as s3store and gcsstore do.
type checked struct {
	driver.Store
	check   driver.DeleteCheck
	scratch atomic.Int64 // scratch keys the check created
}

func (c *checked) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if strings.HasPrefix(key, driver.ScratchPrefix) && cond.Kind == driver.IfAbsent {
		c.scratch.Add(1)
	}
	return c.Store.Put(ctx, key, data, cond)
}

func (c *checked) Delete(ctx context.Context, key string, cond driver.Cond) error {
	if cond.Kind == driver.IfMatch {
		if err := c.check.Check(ctx, c, "the test store", c.Store.Delete); err != nil {
			return err
		}
	}
	return c.Store.Delete(ctx, key, cond)
}

// missingIgnored deletes a missing key "successfully" under any condition,
// as versitygw does; it enforces If-Match on a key that exists.
type missingIgnored struct{ driver.Store }

func (m missingIgnored) Delete(ctx context.Context, key string, cond driver.Cond) error {
	err := m.Store.Delete(ctx, key, cond)
	if cond.Kind == driver.IfMatch && err != nil {
		if _, _, gerr := m.Store.Get(ctx, key); driver.Classify(m.Store, gerr) == driver.NotFound {
			return nil
		}
	}
	return err
}

func wantNoScratch(t *testing.T, s *store.Store) {
	t.Helper()
	if items, err := s.List(t.Context(), driver.ScratchPrefix, "", 10); err != nil || len(items) != 0 {
		t.Fatalf("scratch keys left behind: %v, %v", items, err)
	}
}

// TestDeleteCheckRefusesIgnoredConditions: on a store that ignores the
// condition of a delete, on a stale version or on a missing key, every
// conditional delete is refused with ErrUnsupported naming the store, and
// nothing is deleted; the check runs once and leaves nothing behind.
func TestDeleteCheckRefusesIgnoredConditions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func() driver.Store
		what  string
	}{
		{"stale version ignored", func() driver.Store {
			f := faultstore.New(memstore.New())
			f.IgnoreConditions(faultstore.OpDelete)
			return f
		}, "a delete on a stale version succeeded"},
		{"missing key ignored", func() driver.Store { return missingIgnored{memstore.New()} }, "a delete of a missing key succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &checked{Store: tc.inner()}
			s := store.New(d)
			defer s.Close()
			ctx := t.Context()
			v1, err := s.Put(ctx, "k", []byte("one"), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			v2, err := s.Put(ctx, "k", []byte("two"), store.IfMatch(v1))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ key, version string }{{"k", v1}, {"k", v2}, {"absent", v2}} {
				err := s.Delete(ctx, c.key, store.IfMatch(c.version))
				if !errors.Is(err, store.ErrUnsupported) || store.IsAmbiguous(err) || store.IsRetryable(err) {
					t.Fatalf("Delete(%q, IfMatch(%q)) = %v; want ErrUnsupported, neither ambiguous nor retryable", c.key, c.version, err)
				}
				if msg := err.Error(); !strings.Contains(msg, "the test store") || !strings.Contains(msg, tc.what) {
					t.Fatalf("the error does not name the store and what it ignores: %v", err)
				}
			}
			if data, v, err := s.Get(ctx, "k"); err != nil || string(data) != "two" || v != v2 {
				t.Fatalf("after refused deletes k = %q, %q, %v; want \"two\" at %q", data, v, err, v2)
			}
			if n := d.scratch.Load(); n != 1 {
				t.Fatalf("the check ran %d times; want once", n)
			}
			wantNoScratch(t, s)
			// Unconditional deletes are not affected.
			if err := s.Delete(ctx, "k", store.Cond{}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after an unconditional delete: %v", err)
			}
		})
	}
}

// TestDeleteCheckPassesEnforcedConditions: on a store that enforces them,
// conditional deletes keep their contract after the check, run once however
// many callers race to the first.
func TestDeleteCheckPassesEnforcedConditions(t *testing.T) {
	d := &checked{Store: memstore.New()}
	s := store.New(d)
	defer s.Close()
	ctx := t.Context()
	const n = 8
	versions := make([]string, n)
	for i := range versions {
		v, err := s.Put(ctx, string(rune('a'+i)), []byte("x"), store.IfAbsent())
		if err != nil {
			t.Fatal(err)
		}
		versions[i] = v
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.Delete(ctx, string(rune('a'+i)), store.IfMatch(versions[i])) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("delete %d on its current version: %v", i, err)
		}
	}
	if got := d.scratch.Load(); got != 1 {
		t.Fatalf("the check ran %d times; want once", got)
	}
	v, err := s.Put(ctx, "k", []byte("one"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "k", []byte("two"), store.IfMatch(v)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k", store.IfMatch(v)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("delete on a stale version: %v; want ErrPreconditionFailed", err)
	}
	if err := s.Delete(ctx, "absent", store.IfMatch(v)); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("delete of a missing key: %v; want ErrPreconditionFailed", err)
	}
	wantNoScratch(t, s)
}

// TestDeleteCheckRetriesAfterItsOwnFailure: a check that the store's error
// cut short settles nothing; the caller gets that error, and the next
// conditional delete checks again.
func TestDeleteCheckRetriesAfterItsOwnFailure(t *testing.T) {
	f := faultstore.New(memstore.New())
	d := &checked{Store: f}
	s := store.New(d)
	defer s.Close()
	ctx := t.Context()
	v, err := s.Put(ctx, "k", []byte("one"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	f.FailNext(faultstore.OpPutCreate, driver.Permanent, 1)
	if err := s.Delete(ctx, "k", store.IfMatch(v)); !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "checking whether the test store enforces conditional deletes") {
		t.Fatalf("delete whose check failed: %v; want the check's error", err)
	}
	if _, gv, err := s.Get(ctx, "k"); err != nil || gv != v {
		t.Fatalf("k after a failed check: %q, %v", gv, err)
	}
	if err := s.Delete(ctx, "k", store.IfMatch(v)); err != nil {
		t.Fatalf("delete after the store recovered: %v", err)
	}
	wantNoScratch(t, s)
	// A cancelled caller gets its context's error and settles nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	d2 := &checked{Store: memstore.New()}
	if err := d2.check.Check(cctx, d2, "the test store", d2.Store.Delete); !errors.Is(err, context.Canceled) {
		t.Fatalf("check with a cancelled context: %v", err)
	}
	if err := d2.check.Check(ctx, d2, "the test store", d2.Store.Delete); err != nil || d2.scratch.Load() != 1 {
		t.Fatalf("check after a cancelled one: %v, %d runs; want nil, 1", err, d2.scratch.Load())
	}
}

// The conformance suite passes on stores whose service ignores the
// condition of a delete, in either way, once their driver guards its
// conditional deletes with a DeleteCheck; and on one that keeps it.
func TestConformanceWithDeleteCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func() driver.Store
	}{
		{"enforced", func() driver.Store { return memstore.New() }},
		{"stale version ignored", func() driver.Store {
			f := faultstore.New(memstore.New())
			f.IgnoreConditions(faultstore.OpDelete)
			return f
		}},
		{"missing key ignored", func() driver.Store { return missingIgnored{memstore.New()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store {
				return store.New(&checked{Store: tc.inner()})
			}, drivertest.Options{RaceRounds: 20, RaceWorkers: 4})
		})
	}
}
