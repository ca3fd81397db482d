package store_test

import (
	"context"
	"errors"
	"maps"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// resolveNoBackoff keeps PutResolved's retries immediate.
var resolveNoBackoff = store.ResolveOptions{Backoff: func(int) time.Duration { return 0 }}

// resolveSetup returns a portable store over faultstore over memstore, the
// faultstore, the memstore (for writes and reads behind the store's back),
// and the calls faultstore saw, in order.
func resolveSetup(t *testing.T) (*store.Store, *faultstore.Store, *memstore.Store, *[]faultstore.Call) {
	t.Helper()
	mem := memstore.New()
	fs := faultstore.New(mem, faultstore.WithSeed(1))
	s := store.New(fs)
	t.Cleanup(func() { _ = s.Close() })
	var calls []faultstore.Call
	fs.SetObserver(func(c faultstore.Call) { calls = append(calls, c) })
	return s, fs, mem, &calls
}

// resolveMemPut writes behind the store's back, as another writer would.
func resolveMemPut(t *testing.T, mem *memstore.Store, key, data string, cond driver.Cond) string {
	t.Helper()
	v, err := mem.Put(context.Background(), key, []byte(data), cond)
	if err != nil {
		t.Fatalf("memstore put %q: %v", key, err)
	}
	return v
}

func resolveMemGet(t *testing.T, mem *memstore.Store, key string) (string, string) {
	t.Helper()
	data, v, err := mem.Get(context.Background(), key)
	if err != nil {
		if driver.Classify(mem, err) == driver.NotFound {
			return "", ""
		}
		t.Fatalf("memstore get %q: %v", key, err)
	}
	return string(data), v
}

// resolveStep is one call faultstore saw: what it was and how it ended.
type resolveStep struct {
	op       faultstore.Op
	result   faultstore.Result
	injected bool
}

func resolveSteps(calls []faultstore.Call) []resolveStep {
	out := make([]resolveStep, len(calls))
	for i, c := range calls {
		out[i] = resolveStep{c.Op, c.Result, c.Injected}
	}
	return out
}

func checkResolveSteps(t *testing.T, got, want []resolveStep) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("calls %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("call %d is %+v, want %+v (all: %+v)", i, got[i], want[i], got)
		}
	}
}

// The write landed, its response was lost, and the retry got 412 because
// of that very write: PutResolved must report success with the version of
// the write, not a precondition failure.
func TestPutResolvedLandedRetryGot412(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		op   faultstore.Op
		// prepare seeds the key and returns the condition of the write
		prepare func(t *testing.T, mem *memstore.Store) store.Cond
	}{
		{"create", faultstore.OpPutCreate, func(*testing.T, *memstore.Store) store.Cond { return store.IfAbsent() }},
		{"compare-and-swap", faultstore.OpPutCAS, func(t *testing.T, mem *memstore.Store) store.Cond {
			return store.IfMatch(resolveMemPut(t, mem, "lock", `{"term":6,"nonce":"old"}`, driver.Cond{Kind: driver.IfAbsent}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs, mem, calls := resolveSetup(t)
			cond := tt.prepare(t, mem)
			data := []byte(`{"term":7,"nonce":"a93e"}`)

			// First attempt: applied, then the connection breaks. The read
			// back fails too, so PutResolved has to write again.
			fs.AmbiguousNext(tt.op, 1)
			fs.FailNext(faultstore.OpGet, driver.Transient, 1)

			version, err := store.PutResolved(ctx, s, "lock", data, cond, resolveNoBackoff)
			if err != nil {
				t.Fatalf("PutResolved: %v, want success", err)
			}
			stored, storedVersion := resolveMemGet(t, mem, "lock")
			if stored != string(data) || version != storedVersion || version != memstore.Version(data) {
				t.Fatalf("PutResolved returned version %q; the store holds %q at %q", version, stored, storedVersion)
			}

			checkResolveSteps(t, resolveSteps(*calls), []resolveStep{
				{tt.op, faultstore.Transient, true},            // landed, response lost
				{faultstore.OpGet, faultstore.Transient, true}, // read-back failed
				{tt.op, faultstore.PreconditionFailed, false},  // the retry meets our own write
				{faultstore.OpGet, faultstore.OK, false},       // read-back finds our bytes
			})
			first := (*calls)[0]
			if !first.Reached || !errors.Is(first.Err, syscall.ECONNRESET) || driver.Classify(fs, first.Err) != driver.Transient {
				t.Errorf("first attempt: %+v; want a transient reset connection after reaching the store", first)
			}
			want := faultstore.Snapshot{
				{Op: tt.op, Result: faultstore.Transient}:            1,
				{Op: tt.op, Result: faultstore.PreconditionFailed}:   1,
				{Op: faultstore.OpGet, Result: faultstore.Transient}: 1,
				{Op: faultstore.OpGet, Result: faultstore.OK}:        1,
			}
			if got := fs.Counts(); !maps.Equal(got, want) {
				t.Errorf("Counts =\n%vwant\n%v", got, want)
			}
		})
	}

	// What the caller would see without PutResolved.
	t.Run("raw put", func(t *testing.T) {
		s, fs, mem, _ := resolveSetup(t)
		fs.AmbiguousNext(faultstore.OpPutCreate, 1)
		data := []byte(`{"nonce":"b"}`)
		_, err := s.Put(ctx, "lock", data, store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
			t.Fatalf("Put: %v, want an ambiguous transient error", err)
		}
		if got, _ := resolveMemGet(t, mem, "lock"); got != string(data) {
			t.Fatalf("the write did not land: %q", got)
		}
		_, err = s.Put(ctx, "lock", data, store.IfAbsent())
		if !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("naive retry: %v, want the 412 that PutResolved must see through", err)
		}
	})
}

// The write did not land and, meanwhile, another writer changed the key:
// the outcome is a definite precondition failure, after one read.
func TestPutResolvedLostToAnotherWriter(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		op      faultstore.Op
		prepare func(t *testing.T, mem *memstore.Store) store.Cond
		other   func(t *testing.T, mem *memstore.Store) // the other writer's write
	}{
		{
			name:    "create",
			op:      faultstore.OpPutCreate,
			prepare: func(*testing.T, *memstore.Store) store.Cond { return store.IfAbsent() },
			other: func(t *testing.T, mem *memstore.Store) {
				resolveMemPut(t, mem, "lock", "theirs", driver.Cond{Kind: driver.IfAbsent})
			},
		},
		{
			name: "compare-and-swap",
			op:   faultstore.OpPutCAS,
			prepare: func(t *testing.T, mem *memstore.Store) store.Cond {
				return store.IfMatch(resolveMemPut(t, mem, "lock", "old", driver.Cond{Kind: driver.IfAbsent}))
			},
			other: func(t *testing.T, mem *memstore.Store) {
				_, v := resolveMemGet(t, mem, "lock")
				resolveMemPut(t, mem, "lock", "theirs", driver.Cond{Kind: driver.IfMatch, Version: v})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs, mem, calls := resolveSetup(t)
			cond := tt.prepare(t, mem)
			fs.FailNext(tt.op, driver.Transient, 1)
			// The other writer gets in while our request is lost.
			fs.SetObserver(func(c faultstore.Call) {
				*calls = append(*calls, c)
				if c.Op == tt.op && c.Injected {
					tt.other(t, mem)
				}
			})

			_, err := store.PutResolved(ctx, s, "lock", []byte("ours"), cond, resolveNoBackoff)
			if !errors.Is(err, store.ErrPreconditionFailed) || store.IsAmbiguous(err) {
				t.Fatalf("PutResolved: %v, want a definite precondition failure", err)
			}
			var se *store.Error
			if !errors.As(err, &se) || se.Op != "put" || se.Key != "lock" {
				t.Errorf("error %v is not a *store.Error for put %q", err, "lock")
			}
			if got, _ := resolveMemGet(t, mem, "lock"); got != "theirs" {
				t.Errorf("store holds %q, want the other writer's value", got)
			}
			checkResolveSteps(t, resolveSteps(*calls), []resolveStep{
				{tt.op, faultstore.Transient, true},
				{faultstore.OpGet, faultstore.OK, false},
			})
		})
	}
}

// The write did not land and its condition still holds: PutResolved writes
// again and succeeds.
func TestPutResolvedRetriesWhenConditionHolds(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		op      faultstore.Op
		kind    driver.Kind // of the first attempt's error
		prepare func(t *testing.T, mem *memstore.Store) store.Cond
		readOne faultstore.Result // what the read-back found
	}{
		{"create after a 5xx", faultstore.OpPutCreate, driver.Transient, func(*testing.T, *memstore.Store) store.Cond { return store.IfAbsent() }, faultstore.NotFound},
		{"create after throttling", faultstore.OpPutCreate, driver.Throttled, func(*testing.T, *memstore.Store) store.Cond { return store.IfAbsent() }, faultstore.NotFound},
		{"create after a conflict", faultstore.OpPutCreate, driver.Conflict, func(*testing.T, *memstore.Store) store.Cond { return store.IfAbsent() }, faultstore.NotFound},
		{"compare-and-swap after a 5xx", faultstore.OpPutCAS, driver.Transient, func(t *testing.T, mem *memstore.Store) store.Cond {
			return store.IfMatch(resolveMemPut(t, mem, "lock", "old", driver.Cond{Kind: driver.IfAbsent}))
		}, faultstore.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs, mem, calls := resolveSetup(t)
			cond := tt.prepare(t, mem)
			fs.FailNext(tt.op, tt.kind, 1)
			data := []byte("ours")
			version, err := store.PutResolved(ctx, s, "lock", data, cond, resolveNoBackoff)
			if err != nil {
				t.Fatalf("PutResolved: %v", err)
			}
			if got, v := resolveMemGet(t, mem, "lock"); got != "ours" || v != version {
				t.Errorf("store holds %q at %q; PutResolved returned %q", got, v, version)
			}
			checkResolveSteps(t, resolveSteps(*calls), []resolveStep{
				{tt.op, faultstore.ResultOf(tt.kind), true},
				{faultstore.OpGet, tt.readOne, false},
				{tt.op, faultstore.OK, false},
			})
		})
	}
}

// When no attempt can be settled, the error says the write may have landed.
func TestPutResolvedUnresolved(t *testing.T) {
	t.Run("partitioned", func(t *testing.T) {
		ctx := context.Background()
		s, fs, mem, _ := resolveSetup(t)
		fs.SetPartition(faultstore.Partitioned)
		_, err := store.PutResolved(ctx, s, "lock", []byte("ours"), store.IfAbsent(), store.ResolveOptions{Attempts: 3, Backoff: resolveNoBackoff.Backoff})
		if err == nil || !store.IsAmbiguous(err) || !errors.Is(err, store.ErrTransient) {
			t.Fatalf("PutResolved: %v, want an ambiguous transient error", err)
		}
		want := faultstore.Snapshot{
			{Op: faultstore.OpPutCreate, Result: faultstore.Transient}: 3,
			{Op: faultstore.OpGet, Result: faultstore.Transient}:       3,
		}
		if got := fs.Counts(); !maps.Equal(got, want) {
			t.Errorf("Counts =\n%vwant\n%v", got, want)
		}
		if got, _ := resolveMemGet(t, mem, "lock"); got != "" {
			t.Errorf("a write crossed the partition: %q", got)
		}
	})

	t.Run("black-holed until the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, fs, _, _ := resolveSetup(t)
			fs.SetPartition(faultstore.BlackHoled)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := store.PutResolved(ctx, s, "lock", []byte("ours"), store.IfAbsent(), resolveNoBackoff)
			if err == nil || !store.IsAmbiguous(err) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("PutResolved: %v, want an ambiguous error after the deadline", err)
			}
			if n := fs.Counts().OpTotal(faultstore.OpPutCreate); n != 1 {
				t.Errorf("%d write attempts after the context ended, want 1", n)
			}
		})
	})
}

// A 412 on the first attempt is definite: no read-back, no retry.
func TestPutResolvedFirst412IsFinal(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		op   faultstore.Op
		cond func(v string) store.Cond
	}{
		{"create on an existing key", faultstore.OpPutCreate, func(string) store.Cond { return store.IfAbsent() }},
		{"compare-and-swap on a stale version", faultstore.OpPutCAS, func(string) store.Cond { return store.IfMatch("stale") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs, mem, _ := resolveSetup(t)
			v := resolveMemPut(t, mem, "lock", "theirs", driver.Cond{Kind: driver.IfAbsent})
			_, err := store.PutResolved(ctx, s, "lock", []byte("ours"), tt.cond(v), resolveNoBackoff)
			if !errors.Is(err, store.ErrPreconditionFailed) {
				t.Fatalf("PutResolved: %v, want precondition failed", err)
			}
			want := faultstore.Snapshot{{Op: tt.op, Result: faultstore.PreconditionFailed}: 1}
			if got := fs.Counts(); !maps.Equal(got, want) || got.OpTotal(faultstore.OpGet) != 0 {
				t.Errorf("Counts =\n%vwant\n%v", got, want)
			}
		})
	}
}

// An attempt that may have landed must not be forgotten because a later
// attempt got a definite answer that is about something else. In both cases
// below the first write lands and its response is lost, and every read-back
// fails; PutResolved must then return an error for which IsAmbiguous is
// true, since the write is in the store.
func TestPutResolvedKeepsAmbiguityAcrossAttempts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		faults func(fs *faultstore.Store)
	}{
		{
			// Credentials that expired between attempts, say.
			name:   "retry refused with a permanent error",
			faults: func(fs *faultstore.Store) { fs.FailNext(faultstore.OpPutCreate, driver.Permanent, 1) },
		},
		{
			// The 412 is most likely our own first write, but no read-back
			// got through to tell: PutResolved returns the 412 as if the
			// write had not landed.
			name:   "retry got 412 and no read-back succeeded",
			faults: func(*faultstore.Store) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs, mem, _ := resolveSetup(t)
			fs.AmbiguousNext(faultstore.OpPutCreate, 1)
			fs.FailRate(faultstore.OpGet, driver.Transient, 1)
			tt.faults(fs)
			data := []byte("ours")
			_, err := store.PutResolved(ctx, s, "lock", data, store.IfAbsent(), store.ResolveOptions{Attempts: 2, Backoff: resolveNoBackoff.Backoff})
			if got, _ := resolveMemGet(t, mem, "lock"); got != string(data) {
				t.Fatalf("setup: the first attempt did not land")
			}
			if err == nil || !store.IsAmbiguous(err) {
				t.Fatalf("PutResolved: %v (IsAmbiguous %v); the write landed, so the error must be ambiguous", err, store.IsAmbiguous(err))
			}
		})
	}
}
