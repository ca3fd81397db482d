package store_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/filestore"
	"github.com/tenure-io/tenure/store/memstore"
)

func probeSetup(t *testing.T) (*store.Store, *faultstore.Store) {
	t.Helper()
	fs := faultstore.New(memstore.New())
	s := store.New(fs)
	t.Cleanup(func() { _ = s.Close() })
	return s, fs
}

// probeLeftovers returns the scratch keys Probe left behind.
func probeLeftovers(t *testing.T, s *store.Store) []store.Item {
	t.Helper()
	items, err := s.ListAll(context.Background(), store.ProbePrefix, 100)
	if err != nil {
		t.Fatalf("list %s: %v", store.ProbePrefix, err)
	}
	return items
}

func TestProbeMemstore(t *testing.T) {
	const rounds = 4
	s, fs := probeSetup(t)
	res, err := store.Probe(context.Background(), s, rounds)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if !res.CreateIfAbsent || !res.IfMatch || !res.DeleteIfMatch || !res.OK() {
		t.Errorf("result %+v; want every condition enforced", res)
	}
	if res.Rounds != rounds {
		t.Errorf("Rounds = %d, want %d", res.Rounds, rounds)
	}
	for name, l := range map[string]store.LatencyStats{
		"get": res.Get, "create": res.CreatePut, "compare-and-swap": res.CASPut, "delete": res.DeleteMatch,
	} {
		if l.N != rounds || l.Min > l.P50 || l.P50 > l.Max {
			t.Errorf("%s latency %+v; want %d ordered samples", name, l, rounds)
		}
	}
	// Each round is refused twice: a second create and a stale swap.
	if res.RefusedPut.N != 2*rounds {
		t.Errorf("refused-put latency has %d samples, want %d", res.RefusedPut.N, 2*rounds)
	}

	// What a probe costs, per round: a create, a refused create, a swap, a
	// refused swap, a read, a refused stale delete, a delete, and a
	// refused delete of the key it removed.
	want := faultstore.Snapshot{
		{Op: faultstore.OpPutCreate, Result: faultstore.OK}:                 rounds,
		{Op: faultstore.OpPutCreate, Result: faultstore.PreconditionFailed}: rounds,
		{Op: faultstore.OpPutCAS, Result: faultstore.OK}:                    rounds,
		{Op: faultstore.OpPutCAS, Result: faultstore.PreconditionFailed}:    rounds,
		{Op: faultstore.OpGet, Result: faultstore.OK}:                       rounds,
		{Op: faultstore.OpDelete, Result: faultstore.PreconditionFailed}:    2 * rounds,
		{Op: faultstore.OpDelete, Result: faultstore.OK}:                    rounds,
	}
	if got := fs.Counts(); !maps.Equal(got, want) {
		t.Errorf("Counts =\n%vwant\n%v", got, want)
	}
	if left := probeLeftovers(t, s); len(left) != 0 {
		t.Errorf("Probe left scratch keys: %+v", left)
	}
}

func TestProbeDefaultRounds(t *testing.T) {
	s, _ := probeSetup(t)
	res, err := store.Probe(context.Background(), s, 0)
	if err != nil || res.Rounds != 5 || res.CreatePut.N != 5 {
		t.Fatalf("Probe(0) = %+v, %v; want 5 rounds", res, err)
	}
}

// refusingDeletes refuses every conditional delete as unsupported, as
// s3store does on a server that ignores If-Match on DeleteObject.
type refusingDeletes struct{ driver.Store }

func (r refusingDeletes) Delete(ctx context.Context, key string, cond driver.Cond) error {
	if cond.Kind == driver.IfMatch {
		return driver.Errorf(driver.Unsupported, "the test server ignores the condition of a conditional delete")
	}
	return r.Store.Delete(ctx, key, cond)
}

// A store whose driver refuses conditional deletes (it found the server
// ignores them) keeps the contract by failing: the probe reports it and
// accepts the store, as no tenure component makes conditional deletes.
func TestProbeAcceptsRefusedDeleteCondition(t *testing.T) {
	s := store.New(refusingDeletes{memstore.New()})
	defer s.Close()
	res, err := store.Probe(context.Background(), s, 3)
	if err != nil || !res.OK() || res.DeleteIfMatch || !strings.Contains(res.DeleteUnsupported, "ignores the condition of a conditional delete") {
		t.Fatalf("Probe = %+v, %v; want success, DeleteIfMatch false and the refusal reported", res, err)
	}
	if left := probeLeftovers(t, s); len(left) != 0 {
		t.Fatalf("Probe left scratch keys: %+v", left)
	}
}

// A store whose conditional delete deletes on a stale version, or deletes
// a missing key "successfully", breaks the Store's contract: the probe
// refuses it, naming what it ignored.
func TestProbeRefusesIgnoredDeleteCondition(t *testing.T) {
	for _, tc := range []struct {
		name string
		drv  func() driver.Store
		says string
	}{
		{"stale version", func() driver.Store {
			fs := faultstore.New(memstore.New())
			fs.IgnoreConditions(faultstore.OpDelete)
			return fs
		}, "a delete on a stale version succeeded"},
		{"missing key", func() driver.Store { return missingDeleted{memstore.New()} }, "a delete of a missing key succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store.New(tc.drv())
			defer s.Close()
			res, err := store.Probe(context.Background(), s, 3)
			if !errors.Is(err, store.ErrConditionsIgnored) || res.OK() || res.DeleteIfMatch {
				t.Fatalf("Probe = %+v, %v; want ErrConditionsIgnored", res, err)
			}
			if !strings.Contains(err.Error(), tc.says) || strings.Count(err.Error(), tc.says) != 1 {
				t.Fatalf("error %q does not say %q once", err, tc.says)
			}
			if !res.CreateIfAbsent || !res.IfMatch {
				t.Fatalf("result %+v: the writes' conditions were kept", res)
			}
			if left := probeLeftovers(t, s); len(left) != 0 {
				t.Fatalf("Probe left scratch keys: %+v", left)
			}
		})
	}
}

// missingDeleted answers a conditional delete of a missing key with
// success, as versitygw does.
type missingDeleted struct{ driver.Store }

func (m missingDeleted) Delete(ctx context.Context, key string, cond driver.Cond) error {
	err := m.Store.Delete(ctx, key, cond)
	if cond.Kind == driver.IfMatch && err != nil {
		if _, _, gerr := m.Store.Get(ctx, key); driver.Classify(m.Store, gerr) == driver.NotFound {
			return nil
		}
	}
	return err
}

func TestProbeRefusesIgnoredConditions(t *testing.T) {
	const (
		create = "a second create-if-absent on an existing key succeeded"
		swap   = "a compare-and-swap on a stale version succeeded"
		del    = "a delete on a stale version succeeded"
	)
	tests := []struct {
		name   string
		ignore faultstore.Op
		// which checks pass, and which complaints the error makes
		createOK, swapOK, deleteOK bool
		says                       []string
	}{
		{"create-if-absent", faultstore.OpPutCreate, false, true, true, []string{create}},
		{"compare-and-swap", faultstore.OpPutCAS, true, false, true, []string{swap}},
		{"every write", faultstore.Writes, false, false, false, []string{create, swap, del}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fs := probeSetup(t)
			fs.IgnoreConditions(tt.ignore)
			res, err := store.Probe(context.Background(), s, 3)
			if !errors.Is(err, store.ErrConditionsIgnored) {
				t.Fatalf("Probe: %v, want ErrConditionsIgnored", err)
			}
			if res.OK() || res.CreateIfAbsent != tt.createOK || res.IfMatch != tt.swapOK || res.DeleteIfMatch != tt.deleteOK {
				t.Errorf("result: create %v, swap %v, delete %v; want %v, %v, %v",
					res.CreateIfAbsent, res.IfMatch, res.DeleteIfMatch, tt.createOK, tt.swapOK, tt.deleteOK)
			}
			for _, complaint := range []string{create, swap, del} {
				want := false
				for _, s := range tt.says {
					want = want || s == complaint
				}
				if got := strings.Contains(err.Error(), complaint); got != want {
					t.Errorf("error %q: mentions %q = %v, want %v", err, complaint, got, want)
				}
				// Said once, not once per round.
				if n := strings.Count(err.Error(), complaint); n > 1 {
					t.Errorf("error repeats %q %d times", complaint, n)
				}
			}
			fs.IgnoreConditions(0)
			if left := probeLeftovers(t, s); len(left) != 0 {
				t.Errorf("Probe left scratch keys: %+v", left)
			}
		})
	}
}

// TestProbeRemovesScratchKeyOnFailure fails the probe at each step, with the
// store also failing the first attempt to clean up, and checks that no
// scratch key is left, on memory and on a directory.
func TestProbeRemovesScratchKeyOnFailure(t *testing.T) {
	fail := func(ops faultstore.Op, skip int, kind driver.Kind) faultstore.Rule {
		return faultstore.Rule{Ops: ops, Skip: skip, P: 1, Times: 1, Action: faultstore.Fail, Kind: kind}
	}
	steps := []struct {
		name  string
		fault faultstore.Rule
		// deletes the round makes before its clean-up that the clean-up
		// rule sees (those the fault hits are not counted)
		deletesBefore int
	}{
		{"create lands but its answer is lost", faultstore.Rule{Ops: faultstore.OpPutCreate, P: 1, Times: 1, Action: faultstore.ApplyThenFail}, 0},
		{"second create fails", fail(faultstore.OpPutCreate, 1, driver.Transient), 0},
		{"swap fails", fail(faultstore.OpPutCAS, 0, driver.Transient), 0},
		{"get fails", fail(faultstore.OpGet, 0, driver.Transient), 0},
		{"stale delete fails", fail(faultstore.OpDelete, 0, driver.Permanent), 0},
		{"last delete fails", fail(faultstore.OpDelete, 1, driver.Transient), 1},
	}
	drivers := map[string]func(t *testing.T) driver.Store{
		"mem":  func(*testing.T) driver.Store { return memstore.New() },
		"file": func(t *testing.T) driver.Store { return newFileDriver(t, t.TempDir()) },
	}
	for dname, newDrv := range drivers {
		for _, step := range steps {
			t.Run(dname+"/"+step.name, func(t *testing.T) {
				fs := faultstore.New(newDrv(t))
				s := store.New(fs)
				defer s.Close()
				if _, err := fs.AddRule(step.fault); err != nil {
					t.Fatal(err)
				}
				// The clean-up's first delete fails too.
				if _, err := fs.AddRule(fail(faultstore.OpDelete, step.deletesBefore, driver.Transient)); err != nil {
					t.Fatal(err)
				}
				if _, err := store.Probe(t.Context(), s, 2); err == nil {
					t.Fatal("Probe succeeded despite the injected fault")
				}
				fs.ClearFaults()
				if left := probeLeftovers(t, s); len(left) != 0 {
					t.Errorf("Probe left scratch keys: %+v", left)
				}
			})
		}
	}
}

func newFileDriver(t *testing.T, dir string) driver.Store {
	t.Helper()
	d, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestProbeFileLeavesNothing: after a probe of a directory, listing it
// finds no key.
func TestProbeFileLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := store.Probe(t.Context(), s, 3); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if items, err := s.ListAll(t.Context(), "", 100); err != nil || len(items) != 0 {
		t.Fatalf("after Probe the store lists %+v, %v; want nothing", items, err)
	}
}
