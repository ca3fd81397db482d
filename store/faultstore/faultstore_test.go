package faultstore_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// setup returns a faultstore over a fresh memstore, the portable store on
// top of it, and the memstore itself, for reading behind faultstore's back.
func setup(t *testing.T, opts ...faultstore.Option) (*faultstore.Store, *store.Store, *memstore.Store) {
	t.Helper()
	mem := memstore.New()
	fs := faultstore.New(mem, opts...)
	s := store.New(fs)
	t.Cleanup(func() { _ = s.Close() })
	return fs, s, mem
}

// seed writes key=data directly to mem and returns its version.
func seed(t *testing.T, mem *memstore.Store, key, data string) string {
	t.Helper()
	v, err := mem.Put(context.Background(), key, []byte(data), driver.Cond{Kind: driver.IfAbsent})
	if err != nil {
		t.Fatalf("seed %q: %v", key, err)
	}
	return v
}

// stored returns what mem holds under key, or "" if nothing.
func stored(t *testing.T, mem *memstore.Store, key string) string {
	t.Helper()
	data, _, err := mem.Get(context.Background(), key)
	if err != nil {
		if driver.Classify(mem, err) == driver.NotFound {
			return ""
		}
		t.Fatalf("get %q from memstore: %v", key, err)
	}
	return string(data)
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		run  func(t *testing.T, fs *faultstore.Store, s *store.Store, mem *memstore.Store)
		want faultstore.Snapshot
	}{
		{
			name: "nothing",
			run:  func(*testing.T, *faultstore.Store, *store.Store, *memstore.Store) {},
			want: faultstore.Snapshot{},
		},
		{
			name: "get hit and miss",
			run: func(t *testing.T, _ *faultstore.Store, s *store.Store, mem *memstore.Store) {
				seed(t, mem, "a", "1")
				_, _, _ = s.Get(ctx, "a")
				_, _, _ = s.Get(ctx, "missing")
			},
			want: faultstore.Snapshot{{faultstore.OpGet, faultstore.OK}: 1, {faultstore.OpGet, faultstore.NotFound}: 1},
		},
		{
			name: "create and refused create",
			run: func(_ *testing.T, _ *faultstore.Store, s *store.Store, _ *memstore.Store) {
				_, _ = s.Put(ctx, "a", []byte("1"), store.IfAbsent())
				_, _ = s.Put(ctx, "a", []byte("2"), store.IfAbsent())
			},
			want: faultstore.Snapshot{{faultstore.OpPutCreate, faultstore.OK}: 1, {faultstore.OpPutCreate, faultstore.PreconditionFailed}: 1},
		},
		{
			name: "compare-and-swap current and stale",
			run: func(t *testing.T, _ *faultstore.Store, s *store.Store, mem *memstore.Store) {
				v := seed(t, mem, "a", "1")
				_, _ = s.Put(ctx, "a", []byte("2"), store.IfMatch(v))
				_, _ = s.Put(ctx, "a", []byte("3"), store.IfMatch(v))
			},
			want: faultstore.Snapshot{{faultstore.OpPutCAS, faultstore.OK}: 1, {faultstore.OpPutCAS, faultstore.PreconditionFailed}: 1},
		},
		{
			name: "delete conditional and not",
			run: func(t *testing.T, _ *faultstore.Store, s *store.Store, mem *memstore.Store) {
				seed(t, mem, "a", "1")
				_ = s.Delete(ctx, "a", store.IfMatch("stale"))
				_ = s.Delete(ctx, "a", store.Cond{})
				_ = s.Delete(ctx, "a", store.Cond{})
			},
			want: faultstore.Snapshot{{faultstore.OpDelete, faultstore.OK}: 2, {faultstore.OpDelete, faultstore.PreconditionFailed}: 1},
		},
		{
			name: "list",
			run: func(_ *testing.T, _ *faultstore.Store, s *store.Store, _ *memstore.Store) {
				_, _ = s.List(ctx, "p/", "", 10)
			},
			want: faultstore.Snapshot{{faultstore.OpList, faultstore.OK}: 1},
		},
		{
			name: "cancelled context reaches the inner store",
			run: func(_ *testing.T, _ *faultstore.Store, s *store.Store, _ *memstore.Store) {
				_, _, _ = s.Get(cancelled, "a")
			},
			want: faultstore.Snapshot{{faultstore.OpGet, faultstore.Canceled}: 1},
		},
		{
			name: "refused by the portable layer is not a call",
			run: func(_ *testing.T, _ *faultstore.Store, s *store.Store, _ *memstore.Store) {
				_, _ = s.Put(ctx, "a", []byte("1"), store.Cond{})
				_, _, _ = s.Get(ctx, "")
			},
			want: faultstore.Snapshot{},
		},
		{
			name: "injected faults are counted",
			run: func(_ *testing.T, fs *faultstore.Store, s *store.Store, _ *memstore.Store) {
				fs.FailNext(faultstore.OpGet, driver.Throttled, 1)
				fs.FailNext(faultstore.OpPutCreate, driver.Conflict, 1)
				_, _, _ = s.Get(ctx, "a")
				_, _ = s.Put(ctx, "a", []byte("1"), store.IfAbsent())
				fs.SetPartition(faultstore.Partitioned)
				_, _ = s.List(ctx, "", "", 1)
			},
			want: faultstore.Snapshot{
				{faultstore.OpGet, faultstore.Throttled}:      1,
				{faultstore.OpPutCreate, faultstore.Conflict}: 1,
				{faultstore.OpList, faultstore.Transient}:     1,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, mem := setup(t)
			tt.run(t, fs, s, mem)
			if got := fs.Counts(); !maps.Equal(got, tt.want) {
				t.Errorf("Counts() =\n%vwant\n%v", got, tt.want)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	snap := faultstore.Snapshot{
		{faultstore.OpGet, faultstore.OK}:                       5,
		{faultstore.OpGet, faultstore.NotFound}:                 1,
		{faultstore.OpPutCreate, faultstore.OK}:                 2,
		{faultstore.OpPutCreate, faultstore.PreconditionFailed}: 3,
		{faultstore.OpPutCAS, faultstore.Throttled}:             4,
		{faultstore.OpList, faultstore.OK}:                      7,
	}
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"Get single", snap.Get(faultstore.OpGet, faultstore.OK), 5},
		{"Get set", snap.Get(faultstore.Reads, faultstore.OK), 12},
		{"Get writes refused", snap.Get(faultstore.Writes, faultstore.PreconditionFailed), 3},
		{"Get none", snap.Get(faultstore.OpDelete, faultstore.OK), 0},
		{"OpTotal get", snap.OpTotal(faultstore.OpGet), 6},
		{"OpTotal writes", snap.OpTotal(faultstore.Writes), 9},
		{"OpTotal all", snap.OpTotal(faultstore.AllOps), 22},
		{"ResultTotal ok", snap.ResultTotal(faultstore.OK), 14},
		{"ResultTotal throttled", snap.ResultTotal(faultstore.Throttled), 4},
		{"Total", snap.Total(), 22},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}

	t.Run("Sub", func(t *testing.T) {
		earlier := faultstore.Snapshot{
			{faultstore.OpGet, faultstore.OK}:    5,
			{faultstore.OpList, faultstore.OK}:   2,
			{faultstore.OpDelete, faultstore.OK}: 1,
		}
		want := faultstore.Snapshot{
			{faultstore.OpGet, faultstore.NotFound}:                 1,
			{faultstore.OpPutCreate, faultstore.OK}:                 2,
			{faultstore.OpPutCreate, faultstore.PreconditionFailed}: 3,
			{faultstore.OpPutCAS, faultstore.Throttled}:             4,
			{faultstore.OpList, faultstore.OK}:                      5,
			{faultstore.OpDelete, faultstore.OK}:                    -1,
		}
		if got := snap.Sub(earlier); !maps.Equal(got, want) {
			t.Errorf("Sub =\n%vwant\n%v", got, want)
		}
	})

	t.Run("String", func(t *testing.T) {
		want := "get ok=5 not_found=1\n" +
			"put-create ok=2 precondition_failed=3\n" +
			"put-cas throttled=4\n" +
			"list ok=7\n" +
			"total 22\n"
		if got := snap.String(); got != want {
			t.Errorf("String() =\n%s\nwant\n%s", got, want)
		}
		if got := (faultstore.Snapshot{}).String(); got != "total 0\n" {
			t.Errorf("empty String() = %q", got)
		}
	})
}

func TestReset(t *testing.T) {
	ctx := context.Background()
	fs, s, _ := setup(t)
	fs.FailRate(faultstore.OpGet, driver.Transient, 1)
	_, _, _ = s.Get(ctx, "a")
	_, _ = s.Put(ctx, "a", []byte("1"), store.IfAbsent())
	if got := fs.Counts().Total(); got != 2 {
		t.Fatalf("Total before Reset = %d, want 2", got)
	}
	fs.Reset()
	if got := fs.Counts(); len(got) != 0 {
		t.Fatalf("Counts after Reset = %v, want none", got)
	}
	// Reset leaves the faults alone.
	if _, _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrTransient) {
		t.Fatalf("Get after Reset: %v, want the injected transient error", err)
	}
	if got := fs.Counts(); !maps.Equal(got, faultstore.Snapshot{{faultstore.OpGet, faultstore.Transient}: 1}) {
		t.Fatalf("Counts = %v", got)
	}
}

// calls runs one call of each operation on key "k" and returns their errors.
func calls(ctx context.Context, s *store.Store, version string) map[faultstore.Op]error {
	errs := map[faultstore.Op]error{}
	_, _, errs[faultstore.OpGet] = s.Get(ctx, "k")
	_, errs[faultstore.OpPutCreate] = s.Put(ctx, "new", []byte("x"), store.IfAbsent())
	_, errs[faultstore.OpPutCAS] = s.Put(ctx, "k", []byte("y"), store.IfMatch(version))
	_, errs[faultstore.OpList] = s.List(ctx, "", "", 10)
	errs[faultstore.OpDelete] = s.Delete(ctx, "other", store.Cond{})
	return errs
}

func TestFailRate(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		kind     driver.Kind
		sentinel error
		result   faultstore.Result
	}{
		{driver.NotFound, store.ErrNotFound, faultstore.NotFound},
		{driver.PreconditionFailed, store.ErrPreconditionFailed, faultstore.PreconditionFailed},
		{driver.Conflict, store.ErrConflict, faultstore.Conflict},
		{driver.Throttled, store.ErrThrottled, faultstore.Throttled},
		{driver.Transient, store.ErrTransient, faultstore.Transient},
		{driver.Permanent, store.ErrPermanent, faultstore.Permanent},
		{driver.Unknown, nil, faultstore.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			fs, s, mem := setup(t)
			v := seed(t, mem, "k", "v")
			fs.FailRate(faultstore.OpGet|faultstore.OpPutCAS, tt.kind, 1)
			var reached []faultstore.Op
			fs.SetObserver(func(c faultstore.Call) {
				if c.Reached {
					reached = append(reached, c.Op)
				}
			})
			errs := calls(ctx, s, v)
			for _, op := range []faultstore.Op{faultstore.OpGet, faultstore.OpPutCAS} {
				err := errs[op]
				if err == nil {
					t.Fatalf("%v: no error", op)
				}
				if got := store.KindOf(err); got != tt.kind {
					t.Errorf("%v: kind %v, want %v (%v)", op, got, tt.kind, err)
				}
				if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
					t.Errorf("%v: %v does not match %v", op, err, tt.sentinel)
				}
				if !strings.Contains(err.Error(), "faultstore: injected") {
					t.Errorf("%v: %q does not say it was injected", op, err)
				}
			}
			for _, op := range []faultstore.Op{faultstore.OpPutCreate, faultstore.OpList, faultstore.OpDelete} {
				if errs[op] != nil {
					t.Errorf("%v (not in the rule): %v", op, errs[op])
				}
			}
			if want := []faultstore.Op{faultstore.OpPutCreate, faultstore.OpList, faultstore.OpDelete}; !slices.Equal(reached, want) {
				t.Errorf("calls that reached the inner store: %v, want %v", reached, want)
			}
			if got := stored(t, mem, "k"); got != "v" {
				t.Errorf("a failed CAS changed the key to %q", got)
			}
			if got := fs.Counts().Get(faultstore.OpGet|faultstore.OpPutCAS, tt.result); got != 2 {
				t.Errorf("counted %d calls with result %v, want 2", got, tt.result)
			}
		})
	}

	t.Run("set again replaces, zero removes", func(t *testing.T) {
		fs, s, _ := setup(t)
		fs.FailRate(faultstore.OpGet, driver.Transient, 1)
		fs.FailRate(faultstore.OpGet, driver.Transient, 1) // replaces, does not stack
		fs.FailRate(faultstore.OpGet, driver.Transient, 0)
		if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after FailRate(0): %v, want not found from the store", err)
		}
	})

	t.Run("another kind is another rate", func(t *testing.T) {
		fs, s, _ := setup(t)
		fs.FailRate(faultstore.OpGet, driver.Conflict, 1)
		fs.FailRate(faultstore.OpGet, driver.Permanent, 1)
		fs.FailRate(faultstore.OpGet, driver.Conflict, 0)
		if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrPermanent) {
			t.Fatalf("Get: %v, want the permanent rate that is still set", err)
		}
	})
}

func TestThrottle(t *testing.T) {
	ctx := context.Background()
	fs, s, _ := setup(t)
	fs.Throttle(faultstore.Writes, 1)
	_, err := s.Put(ctx, "k", []byte("x"), store.IfAbsent())
	if !errors.Is(err, store.ErrThrottled) || !store.IsRetryable(err) {
		t.Fatalf("Put: %v, want a retryable throttled error", err)
	}
	if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get (not throttled): %v, want not found", err)
	}
	fs.Throttle(faultstore.Writes, 0)
	if _, err := s.Put(ctx, "k", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatalf("Put after Throttle(0): %v", err)
	}
	want := faultstore.Snapshot{
		{faultstore.OpPutCreate, faultstore.Throttled}: 1,
		{faultstore.OpPutCreate, faultstore.OK}:        1,
		{faultstore.OpGet, faultstore.NotFound}:        1,
	}
	if got := fs.Counts(); !maps.Equal(got, want) {
		t.Fatalf("Counts =\n%vwant\n%v", got, want)
	}
}

func TestFailNext(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		ops  faultstore.Op
		n    int
		// results of five Gets in a row
		want []faultstore.Result
	}{
		{"two gets", faultstore.OpGet, 2, []faultstore.Result{faultstore.Transient, faultstore.Transient, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound}},
		{"reads", faultstore.Reads, 1, []faultstore.Result{faultstore.Transient, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound}},
		{"writes only", faultstore.Writes, 3, []faultstore.Result{faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound}},
		{"zero", faultstore.OpGet, 0, []faultstore.Result{faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound}},
		{"no ops", 0, 2, []faultstore.Result{faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound, faultstore.NotFound}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, _ := setup(t)
			var got []faultstore.Result
			fs.SetObserver(func(c faultstore.Call) { got = append(got, c.Result) })
			fs.FailNext(tt.ops, driver.Transient, tt.n)
			for range 5 {
				_, _, _ = s.Get(ctx, "k")
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("results %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRules(t *testing.T) {
	ctx := context.Background()
	type get struct {
		key  string
		want faultstore.Result
	}
	nf, tr := faultstore.NotFound, faultstore.Transient
	tests := []struct {
		name  string
		rules []faultstore.Rule
		gets  []get
	}{
		{
			name:  "prefix",
			rules: []faultstore.Rule{{Ops: faultstore.OpGet, Prefix: "lock/", P: 1, Kind: driver.Transient}},
			gets:  []get{{"lock/a", tr}, {"log/1", nf}, {"lock/b", tr}, {"lock", nf}},
		},
		{
			name:  "skip then every call",
			rules: []faultstore.Rule{{Ops: faultstore.OpGet, P: 1, Skip: 2, Kind: driver.Transient}},
			gets:  []get{{"a", nf}, {"a", nf}, {"a", tr}, {"a", tr}},
		},
		{
			name:  "skip and times: only the third call",
			rules: []faultstore.Rule{{Ops: faultstore.OpGet, P: 1, Skip: 2, Times: 1, Kind: driver.Transient}},
			gets:  []get{{"a", nf}, {"a", nf}, {"a", tr}, {"a", nf}},
		},
		{
			name:  "skip counts only matching calls",
			rules: []faultstore.Rule{{Ops: faultstore.OpGet, Prefix: "x", P: 1, Skip: 1, Times: 1, Kind: driver.Transient}},
			gets:  []get{{"a", nf}, {"x1", nf}, {"a", nf}, {"x2", tr}, {"x3", nf}},
		},
		{
			name:  "other ops untouched",
			rules: []faultstore.Rule{{Ops: faultstore.Writes, P: 1, Kind: driver.Transient}},
			gets:  []get{{"a", nf}},
		},
		{
			name:  "zero chance never fires",
			rules: []faultstore.Rule{{Ops: faultstore.OpGet, P: 0, Kind: driver.Transient}},
			gets:  []get{{"a", nf}, {"a", nf}},
		},
		{
			name: "first rule that fires wins",
			rules: []faultstore.Rule{
				{Ops: faultstore.OpGet, P: 1, Times: 1, Kind: driver.Conflict},
				{Ops: faultstore.OpGet, P: 1, Times: 1, Kind: driver.Permanent},
			},
			gets: []get{{"a", faultstore.Conflict}, {"a", faultstore.Permanent}, {"a", nf}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, _ := setup(t)
			for _, r := range tt.rules {
				if _, err := fs.AddRule(r); err != nil {
					t.Fatalf("AddRule: %v", err)
				}
			}
			var got faultstore.Result
			fs.SetObserver(func(c faultstore.Call) { got = c.Result })
			for i, g := range tt.gets {
				_, _, _ = s.Get(ctx, g.key)
				if got != g.want {
					t.Errorf("get %d (%q): %v, want %v", i, g.key, got, g.want)
				}
			}
		})
	}

	t.Run("remove", func(t *testing.T) {
		fs, s, _ := setup(t)
		remove, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpGet, P: 1, Kind: driver.Transient})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrTransient) {
			t.Fatalf("Get with the rule: %v", err)
		}
		remove()
		remove()
		if _, _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after remove: %v", err)
		}
	})

	t.Run("custom error", func(t *testing.T) {
		fs, s, _ := setup(t)
		cause := &sdkError{Code: "AccessDenied"}
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpGet, P: 1, Kind: driver.Permanent, Err: cause}); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Get(ctx, "a")
		var got *sdkError
		if !errors.As(err, &got) || got != cause || !errors.Is(err, store.ErrPermanent) {
			t.Fatalf("Get: %v, want a permanent error wrapping the sdkError", err)
		}
	})
}

type sdkError struct{ Code string }

func (e *sdkError) Error() string { return "sdk: " + e.Code }

func TestAddRuleInvalid(t *testing.T) {
	tests := []struct {
		name string
		rule faultstore.Rule
		want string // the field the error names
	}{
		{"no ops", faultstore.Rule{P: 1}, "Rule.Ops"},
		{"unknown ops", faultstore.Rule{Ops: 0x80, P: 1}, "Rule.Ops"},
		{"NaN chance", faultstore.Rule{Ops: faultstore.OpGet, P: nan()}, "Rule.P"},
		{"negative skip", faultstore.Rule{Ops: faultstore.OpGet, P: 1, Skip: -1}, "Rule.Skip"},
		{"negative times", faultstore.Rule{Ops: faultstore.OpGet, P: 1, Times: -1}, "Rule.Times"},
		{"negative delay", faultstore.Rule{Ops: faultstore.OpGet, P: 1, Delay: -time.Second}, "Rule.Delay"},
		{"unknown action", faultstore.Rule{Ops: faultstore.OpGet, P: 1, Action: 99}, "Rule.Action"},
		{"kind with another action", faultstore.Rule{Ops: faultstore.OpGet, P: 1, Action: faultstore.Hang, Kind: driver.Throttled}, "Rule.Kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, _ := setup(t)
			remove, err := fs.AddRule(tt.rule)
			if err == nil || remove != nil {
				t.Fatalf("AddRule(%+v) = (%v, %v), want an error", tt.rule, remove != nil, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
			// Nothing was added.
			if _, _, err := s.Get(context.Background(), "a"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get after a refused rule: %v", err)
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func TestSeedIsDeterministic(t *testing.T) {
	ctx := context.Background()
	// results returns the outcomes of 200 gets under a 30% failure rate,
	// with latency drawn from the same source in between.
	results := func(seed uint64) []faultstore.Result {
		fs, s, _ := setup(t, faultstore.WithSeed(seed))
		fs.FailRate(faultstore.OpGet, driver.Transient, 0.3)
		fs.SetLatency(faultstore.OpList, faultstore.Uniform(0, time.Nanosecond))
		var out []faultstore.Result
		fs.SetObserver(func(c faultstore.Call) {
			if c.Op == faultstore.OpGet {
				out = append(out, c.Result)
			}
		})
		for range 200 {
			_, _, _ = s.Get(ctx, "k")
			_, _ = s.List(ctx, "", "", 1)
		}
		return out
	}
	a, b, c := results(1), results(1), results(2)
	if !slices.Equal(a, b) {
		t.Errorf("the same seed gave different faults")
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 gave the same 200 outcomes")
	}
	failed := 0
	for _, r := range a {
		if r == faultstore.Transient {
			failed++
		}
	}
	if failed < 30 || failed > 90 {
		t.Errorf("%d of 200 calls failed at a rate of 0.3", failed)
	}
}

func TestApplyThenFail(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		op   faultstore.Op
		call func(s *store.Store, v string) error
		// what the memstore holds under "k" afterwards
		want string
	}{
		{"create", faultstore.OpPutCreate, func(s *store.Store, _ string) error {
			_, err := s.Put(ctx, "k2", []byte("new"), store.IfAbsent())
			return err
		}, "old"},
		{"compare-and-swap", faultstore.OpPutCAS, func(s *store.Store, v string) error {
			_, err := s.Put(ctx, "k", []byte("new"), store.IfMatch(v))
			return err
		}, "new"},
		{"delete", faultstore.OpDelete, func(s *store.Store, v string) error {
			return s.Delete(ctx, "k", store.IfMatch(v))
		}, ""},
		{"failed write is hidden too", faultstore.OpPutCAS, func(s *store.Store, _ string) error {
			_, err := s.Put(ctx, "k", []byte("new"), store.IfMatch("stale"))
			return err
		}, "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, mem := setup(t)
			v := seed(t, mem, "k", "old")
			fs.AmbiguousNext(faultstore.Writes, 1)
			var call faultstore.Call
			fs.SetObserver(func(c faultstore.Call) { call = c })
			err := tt.call(s, v)
			if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
				t.Fatalf("error %v, want an ambiguous transient error", err)
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("error %v does not match ECONNRESET", err)
			}
			if !call.Injected || !call.Reached || call.Op != tt.op {
				t.Errorf("observed %+v, want an injected %v that reached the store", call, tt.op)
			}
			if got := stored(t, mem, "k"); got != tt.want {
				t.Errorf("store holds %q, want %q", got, tt.want)
			}
			if tt.op == faultstore.OpPutCreate {
				if got := stored(t, mem, "k2"); got != "new" {
					t.Errorf("the create did not land: k2 = %q", got)
				}
			}
			// One shot: the next write is answered.
			if _, err := s.Put(ctx, "k3", []byte("x"), store.IfAbsent()); err != nil {
				t.Errorf("next write: %v", err)
			}
		})
	}

	t.Run("rate", func(t *testing.T) {
		fs, s, mem := setup(t)
		fs.AmbiguousRate(faultstore.OpPutCreate, 1)
		_, err := s.Put(ctx, "a", []byte("1"), store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || stored(t, mem, "a") != "1" {
			t.Fatalf("Put: %v, stored %q; want applied and transient", err, stored(t, mem, "a"))
		}
		fs.AmbiguousRate(faultstore.OpPutCreate, 0)
		if _, err := s.Put(ctx, "b", []byte("1"), store.IfAbsent()); err != nil {
			t.Fatalf("Put after AmbiguousRate(0): %v", err)
		}
	})

	t.Run("get", func(t *testing.T) {
		fs, s, mem := setup(t)
		seed(t, mem, "k", "old")
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpGet, P: 1, Action: faultstore.ApplyThenFail}); err != nil {
			t.Fatal(err)
		}
		data, _, err := s.Get(ctx, "k")
		if !errors.Is(err, store.ErrTransient) || data != nil {
			t.Fatalf("Get = %q, %v; want no data and a transient error", data, err)
		}
	})
}

// TestWaits checks the faults that make the caller wait, in a synctest
// bubble so that waits take no real time and their length is exact.
func TestWaits(t *testing.T) {
	const timeout = time.Minute
	tests := []struct {
		name     string
		rule     faultstore.Rule
		elapsed  time.Duration
		result   faultstore.Result
		deadline bool // the error wraps context.DeadlineExceeded
		timeout  bool // the error wraps os.ErrDeadlineExceeded
		applied  bool
	}{
		{
			name:    "fail after a delay",
			rule:    faultstore.Rule{Action: faultstore.Fail, Kind: driver.Throttled, Delay: 3 * time.Second},
			elapsed: 3 * time.Second, result: faultstore.Throttled,
		},
		{
			name:    "fail after a delay longer than the context",
			rule:    faultstore.Rule{Action: faultstore.Fail, Kind: driver.Throttled, Delay: time.Hour},
			elapsed: timeout, result: faultstore.Transient, deadline: true,
		},
		{
			name:    "hang for a while",
			rule:    faultstore.Rule{Action: faultstore.Hang, Delay: 10 * time.Second},
			elapsed: 10 * time.Second, result: faultstore.Transient, timeout: true,
		},
		{
			name:    "hang until the context ends",
			rule:    faultstore.Rule{Action: faultstore.Hang},
			elapsed: timeout, result: faultstore.Transient, deadline: true,
		},
		{
			name:    "ambiguous after a delay",
			rule:    faultstore.Rule{Action: faultstore.ApplyThenFail, Delay: 2 * time.Second},
			elapsed: 2 * time.Second, result: faultstore.Transient, applied: true,
		},
		{
			name:    "response lost after a while",
			rule:    faultstore.Rule{Action: faultstore.ApplyThenHang, Delay: 30 * time.Second},
			elapsed: 30 * time.Second, result: faultstore.Transient, timeout: true, applied: true,
		},
		{
			name:    "response lost until the context ends",
			rule:    faultstore.Rule{Action: faultstore.ApplyThenHang},
			elapsed: timeout, result: faultstore.Transient, deadline: true, applied: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs, s, mem := setup(t)
				tt.rule.Ops, tt.rule.P = faultstore.OpPutCreate, 1
				if _, err := fs.AddRule(tt.rule); err != nil {
					t.Fatal(err)
				}
				var call faultstore.Call
				fs.SetObserver(func(c faultstore.Call) { call = c })
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				start := time.Now()
				_, err := s.Put(ctx, "k", []byte("v"), store.IfAbsent())
				if got := time.Since(start); got != tt.elapsed {
					t.Errorf("the call took %v, want %v", got, tt.elapsed)
				}
				if err == nil {
					t.Fatal("no error")
				}
				if call.Result != tt.result || store.KindOf(err) != kindOf(tt.result) {
					t.Errorf("result %v, kind %v, want %v (%v)", call.Result, store.KindOf(err), tt.result, err)
				}
				if got := errors.Is(err, context.DeadlineExceeded); got != tt.deadline {
					t.Errorf("errors.Is(%v, context.DeadlineExceeded) = %v", err, got)
				}
				if got := errors.Is(err, os.ErrDeadlineExceeded); got != tt.timeout {
					t.Errorf("errors.Is(%v, os.ErrDeadlineExceeded) = %v", err, got)
				}
				if got := stored(t, mem, "k") == "v"; got != tt.applied || call.Reached != tt.applied {
					t.Errorf("applied = %v, observed reached = %v; want %v", got, call.Reached, tt.applied)
				}
			})
		})
	}
}

// kindOf maps a result back to the driver kind, for comparing with KindOf.
func kindOf(r faultstore.Result) driver.Kind {
	for k := driver.Unknown; k <= driver.Canceled; k++ {
		if faultstore.ResultOf(k) == r {
			return k
		}
	}
	return driver.Unknown
}

func TestLatency(t *testing.T) {
	t.Run("per operation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			fs, s, _ := setup(t)
			fs.SetLatency(faultstore.AllOps, faultstore.Fixed(5*time.Millisecond))
			fs.SetLatency(faultstore.OpPutCAS|faultstore.OpPutCreate, faultstore.Fixed(20*time.Millisecond))
			tests := []struct {
				name string
				call func() error
				want time.Duration
			}{
				{"get", func() error { _, _, err := s.Get(ctx, "k"); return err }, 5 * time.Millisecond},
				{"create", func() error { _, err := s.Put(ctx, "k", []byte("1"), store.IfAbsent()); return err }, 20 * time.Millisecond},
				{"list", func() error { _, err := s.List(ctx, "", "", 1); return err }, 5 * time.Millisecond},
			}
			for _, tt := range tests {
				start := time.Now()
				_ = tt.call()
				if got := time.Since(start); got != tt.want {
					t.Errorf("%s took %v, want %v", tt.name, got, tt.want)
				}
			}
			fs.SetLatency(faultstore.AllOps, nil)
			start := time.Now()
			_, _, _ = s.Get(ctx, "k")
			if got := time.Since(start); got != 0 {
				t.Errorf("get without latency took %v", got)
			}
		})
	})

	t.Run("cancelled context returns at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs, s, _ := setup(t)
			fs.SetLatency(faultstore.AllOps, faultstore.Fixed(time.Hour))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			start := time.Now()
			_, _, err := s.Get(ctx, "k")
			if got := time.Since(start); got != 0 {
				t.Errorf("took %v", got)
			}
			var se *store.Error
			if !errors.As(err, &se) || se.Err != context.Canceled {
				t.Fatalf("Get: %v, want a store error around ctx.Err() itself", err)
			}
			if got := fs.Counts(); !maps.Equal(got, faultstore.Snapshot{{faultstore.OpGet, faultstore.Canceled}: 1}) {
				t.Errorf("Counts = %v", got)
			}
		})
	})

	t.Run("deadline during the delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs, s, mem := setup(t)
			fs.SetLatency(faultstore.AllOps, faultstore.Fixed(time.Hour))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			_, err := s.Put(ctx, "k", []byte("v"), store.IfAbsent())
			if got := time.Since(start); got != time.Second {
				t.Errorf("took %v, want the context's second", got)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, store.ErrTransient) {
				t.Errorf("Put: %v, want a transient deadline error", err)
			}
			if got := stored(t, mem, "k"); got != "" {
				t.Errorf("a write cut short in its latency landed: %q", got)
			}
		})
	})
}

func TestLatencyFuncs(t *testing.T) {
	const n = 10001
	tests := []struct {
		name     string
		l        faultstore.Latency
		min, max time.Duration // bounds of every draw
		median   [2]time.Duration
	}{
		{"fixed", faultstore.Fixed(7 * time.Millisecond), 7 * time.Millisecond, 7 * time.Millisecond, [2]time.Duration{7 * time.Millisecond, 7 * time.Millisecond}},
		{"uniform", faultstore.Uniform(10*time.Millisecond, 20*time.Millisecond), 10 * time.Millisecond, 20 * time.Millisecond, [2]time.Duration{14 * time.Millisecond, 16 * time.Millisecond}},
		{"uniform empty", faultstore.Uniform(5*time.Millisecond, time.Millisecond), 5 * time.Millisecond, 5 * time.Millisecond, [2]time.Duration{5 * time.Millisecond, 5 * time.Millisecond}},
		// The median of an exponential is mean·ln 2.
		{"exponential", faultstore.Exponential(10 * time.Millisecond), 0, time.Second, [2]time.Duration{6 * time.Millisecond, 8 * time.Millisecond}},
		{"log-normal", faultstore.LogNormal(20*time.Millisecond, 0.5), 0, 10 * time.Second, [2]time.Duration{19 * time.Millisecond, 21 * time.Millisecond}},
		{"sum", faultstore.Sum(faultstore.Fixed(10*time.Millisecond), faultstore.Fixed(-time.Hour), faultstore.Uniform(0, 2*time.Millisecond)), 10 * time.Millisecond, 12 * time.Millisecond, [2]time.Duration{10500 * time.Microsecond, 11500 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			ds := make([]time.Duration, n)
			for i := range ds {
				ds[i] = tt.l(r)
				if ds[i] < tt.min || ds[i] > tt.max {
					t.Fatalf("draw %d = %v, outside [%v, %v]", i, ds[i], tt.min, tt.max)
				}
			}
			slices.Sort(ds)
			if med := ds[n/2]; med < tt.median[0] || med > tt.median[1] {
				t.Errorf("median %v, want within %v", med, tt.median)
			}
		})
	}
}

func TestPartition(t *testing.T) {
	tests := []struct {
		name      string
		partition faultstore.Partition
		ctxErr    error // what the error wraps, besides being transient
	}{
		{"partitioned", faultstore.Partitioned, nil},
		{"black-holed", faultstore.BlackHoled, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs, s, mem := setup(t)
				v := seed(t, mem, "k", "old")
				var reached int
				fs.SetObserver(func(c faultstore.Call) {
					if c.Reached {
						reached++
					}
				})
				fs.SetPartition(tt.partition)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				for op, err := range calls(ctx, s, v) {
					if !errors.Is(err, store.ErrTransient) {
						t.Errorf("%v: %v, want transient", op, err)
					}
					if tt.ctxErr != nil && !errors.Is(err, tt.ctxErr) {
						t.Errorf("%v: %v does not wrap %v", op, err, tt.ctxErr)
					}
				}
				if reached != 0 || stored(t, mem, "k") != "old" || stored(t, mem, "new") != "" {
					t.Errorf("calls reached the store through a partition")
				}
				if got := fs.Counts(); got.ResultTotal(faultstore.Transient) != 5 || got.Total() != 5 {
					t.Errorf("Counts =\n%v", got)
				}

				fs.SetPartition(faultstore.Connected)
				for op, err := range calls(context.Background(), s, v) {
					if err != nil {
						t.Errorf("%v after healing: %v", op, err)
					}
				}
			})
		})
	}
}

// TestKnobsWhileRunning flips every knob while goroutines call the store;
// run with -race, it shows the knobs are safe to change mid-test.
func TestKnobsWhileRunning(t *testing.T) {
	ctx := context.Background()
	fs, s, _ := setup(t, faultstore.WithSeed(7))
	const workers, perWorker = 8, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 6 {
			case 0:
				fs.SetPartition(faultstore.Partitioned)
			case 1:
				fs.SetPartition(faultstore.Connected)
			case 2:
				fs.FailRate(faultstore.AllOps, driver.Transient, float64(i%3)/4)
			case 3:
				fs.IgnoreConditions(faultstore.Writes * faultstore.Op(i/6%2))
			case 4:
				fs.SetLatency(faultstore.Reads, faultstore.Uniform(0, time.Microsecond))
			case 5:
				remove, _ := fs.AddRule(faultstore.Rule{Ops: faultstore.Writes, P: 0.5, Action: faultstore.ApplyThenFail})
				_ = fs.Counts().Total()
				remove()
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + w))
			for i := range perWorker {
				switch i % 4 {
				case 0:
					_, _ = s.Put(ctx, key, []byte{byte(i)}, store.IfAbsent())
				case 1:
					_, v, _ := s.Get(ctx, key)
					if v != "" {
						_, _ = s.Put(ctx, key, []byte{byte(i)}, store.IfMatch(v))
					} else {
						_, _ = s.List(ctx, "", "", 5)
					}
				case 2:
					_ = s.Delete(ctx, key, store.Cond{})
				case 3:
					_, _ = s.List(ctx, "", "", 5)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	// Each worker makes perWorker calls plus one per round of case 1.
	got := fs.Counts()
	if want := int64(workers * perWorker * 5 / 4); got.Total() != want {
		t.Errorf("counted %d calls, want %d:\n%v", got.Total(), want, got)
	}
}

func TestIgnoreConditions(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		ignore faultstore.Op
		// whether each write with a false condition succeeds
		create, cas, del bool
	}{
		{"none", 0, false, false, false},
		{"create", faultstore.OpPutCreate, true, false, false},
		{"compare-and-swap", faultstore.OpPutCAS, false, true, false},
		{"delete", faultstore.OpDelete, false, false, true},
		{"all writes", faultstore.Writes, true, true, true},
		{"reads do not matter", faultstore.Reads, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, s, mem := setup(t)
			fs.IgnoreConditions(tt.ignore)
			seed(t, mem, "c", "old")
			seed(t, mem, "s", "old")
			seed(t, mem, "d", "old")

			_, err := s.Put(ctx, "c", []byte("new"), store.IfAbsent())
			check(t, "create on an existing key", err, tt.create, stored(t, mem, "c") == "new")
			_, err = s.Put(ctx, "s", []byte("new"), store.IfMatch("stale"))
			check(t, "compare-and-swap on a stale version", err, tt.cas, stored(t, mem, "s") == "new")
			_, err = s.Put(ctx, "missing", []byte("new"), store.IfMatch("stale"))
			check(t, "compare-and-swap on a missing key", err, tt.cas, stored(t, mem, "missing") == "new")
			err = s.Delete(ctx, "d", store.IfMatch("stale"))
			check(t, "delete on a stale version", err, tt.del, stored(t, mem, "d") == "")

			// Writes whose condition holds work either way.
			v, err := s.Put(ctx, "fresh", []byte("1"), store.IfAbsent())
			if err != nil {
				t.Fatalf("create on a fresh key: %v", err)
			}
			if _, err := s.Put(ctx, "fresh", []byte("2"), store.IfMatch(v)); err != nil {
				t.Fatalf("compare-and-swap on the current version: %v", err)
			}

			fs.IgnoreConditions(0)
			if _, err := s.Put(ctx, "fresh", []byte("3"), store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
				t.Fatalf("create after IgnoreConditions(0): %v, want precondition failed", err)
			}
		})
	}
}

func check(t *testing.T, what string, err error, wantOK, applied bool) {
	t.Helper()
	switch {
	case wantOK && (err != nil || !applied):
		t.Errorf("%s: err %v, applied %v; want it to succeed as on a store that ignores conditions", what, err, applied)
	case !wantOK && (!errors.Is(err, store.ErrPreconditionFailed) || applied):
		t.Errorf("%s: err %v, applied %v; want it refused", what, err, applied)
	}
}

func TestObserver(t *testing.T) {
	ctx := context.Background()
	fs, s, _ := setup(t)
	var got []faultstore.Call
	fs.SetObserver(func(c faultstore.Call) { got = append(got, c) })
	fs.FailNext(faultstore.OpGet, driver.Conflict, 1)
	_, _, _ = s.Get(ctx, "a")
	_, _ = s.Put(ctx, "b", []byte("1"), store.IfAbsent())
	_, _ = s.List(ctx, "p/", "", 3)
	fs.SetObserver(nil)
	_, _, _ = s.Get(ctx, "ignored")

	want := []faultstore.Call{
		{Op: faultstore.OpGet, Key: "a", Result: faultstore.Conflict, Injected: true},
		{Op: faultstore.OpPutCreate, Key: "b", Result: faultstore.OK, Reached: true},
		{Op: faultstore.OpList, Key: "p/", Result: faultstore.OK, Reached: true},
	}
	if len(got) != len(want) {
		t.Fatalf("observed %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		if (g.Err != nil) != (g.Result != faultstore.OK) {
			t.Errorf("call %d: result %v with error %v", i, g.Result, g.Err)
		}
		g.Err = nil
		if g != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, g, want[i])
		}
	}
}

func TestClearFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs, s, _ := setup(t)
		fs.FailRate(faultstore.OpGet, driver.Transient, 1)
		fs.FailNext(faultstore.OpList, driver.Transient, 5)
		fs.SetLatency(faultstore.AllOps, faultstore.Fixed(time.Second))
		fs.IgnoreConditions(faultstore.Writes)
		fs.SetPartition(faultstore.Partitioned)
		var calls int
		fs.SetObserver(func(faultstore.Call) { calls++ })
		fs.ClearFaults()

		start := time.Now()
		if _, _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get: %v", err)
		}
		if _, err := s.List(ctx, "", "", 1); err != nil {
			t.Errorf("List: %v", err)
		}
		if _, err := s.Put(ctx, "k", []byte("1"), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "k", []byte("2"), store.IfAbsent()); !errors.Is(err, store.ErrPreconditionFailed) {
			t.Errorf("conditions still ignored: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("latency still set: %v", d)
		}
		if calls != 4 || fs.Counts().Total() != 4 {
			t.Errorf("observer saw %d calls, counts %d; want both kept and 4", calls, fs.Counts().Total())
		}
	})
}

// limited is a driver with key limits and a Close that can be seen.
type limited struct {
	*memstore.Store
	closed int
}

func (l *limited) CheckKey(key string) error {
	if len(key) > 4 {
		return errors.New("keys are at most 4 bytes")
	}
	return nil
}

func (l *limited) Close() error { l.closed++; return nil }

func TestLimitsAndClose(t *testing.T) {
	ctx := context.Background()
	inner := &limited{Store: memstore.New()}
	fs := faultstore.New(inner)
	s := store.New(fs)
	if _, _, err := s.Get(ctx, "too-long"); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("Get of a key the inner store refuses: %v, want invalid argument", err)
	}
	if got := fs.Counts().Total(); got != 0 {
		t.Errorf("a refused key was counted: %d", got)
	}
	if err := fs.CheckKey("ok"); err != nil {
		t.Errorf("CheckKey(ok): %v", err)
	}
	if err := faultstore.New(memstore.New()).CheckKey("any length at all"); err != nil {
		t.Errorf("CheckKey without inner limits: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if inner.closed != 1 {
		t.Errorf("inner store closed %d times, want 1", inner.closed)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{faultstore.OpGet.String(), "get"},
		{faultstore.Writes.String(), "put-create|put-cas|delete"},
		{faultstore.Op(0).String(), "none"},
		{(faultstore.OpList | 0x80).String(), "list|Op(0x80)"},
		{faultstore.PreconditionFailed.String(), "precondition_failed"},
		{faultstore.Result(200).String(), "Result(200)"},
		{faultstore.ApplyThenHang.String(), "apply-then-hang"},
		{faultstore.Action(9).String(), "Action(9)"},
		{faultstore.BlackHoled.String(), "black-holed"},
		{faultstore.HTTPApplyThenDrop.String(), "apply-then-drop"},
		{faultstore.HTTPAction(-1).String(), "HTTPAction(-1)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	for k := driver.Unknown; k <= driver.Canceled; k++ {
		if r := faultstore.ResultOf(k); k != driver.Unknown && r == faultstore.Unknown {
			t.Errorf("ResultOf(%v) = unknown", k)
		}
	}
}
