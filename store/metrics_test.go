package store_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func requests(t *testing.T, reg prometheus.Gatherer, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "tenure_store_requests_total" {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Each call is counted under its operation, condition and outcome, a
// fault from the store included, and timed.
func TestMetricsCountCallsByOutcome(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := store.NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(memstore.New())
	s := store.New(fs, store.WithObserver(m.Observe))
	defer s.Close()
	ctx := t.Context()
	v, err := s.Put(ctx, "k", []byte("x"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Put(ctx, "k", []byte("y"), store.IfAbsent())
	_, _, _ = s.Get(ctx, "k")
	_, _, _ = s.Get(ctx, "absent")
	fs.FailNext(faultstore.OpPutCAS, driver.Transient, 1)
	if _, err := s.Put(ctx, "k", []byte("z"), store.IfMatch(v)); !store.IsAmbiguous(err) {
		t.Fatalf("the injected fault did not fail the write: %v", err)
	}
	_, _ = s.List(ctx, "", "", 10)
	_, _, _ = s.Get(ctx, "") // refused before the driver: not counted

	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"op": "put", "cond": "if-absent", "result": "ok"}, 1},
		{map[string]string{"op": "put", "cond": "if-absent", "result": "precondition failed"}, 1},
		{map[string]string{"op": "get", "cond": "unconditional", "result": "ok"}, 1},
		{map[string]string{"op": "get", "cond": "unconditional", "result": "not found"}, 1},
		{map[string]string{"op": "put", "cond": "if-match", "result": "transient"}, 1},
		{map[string]string{"op": "list", "cond": "unconditional", "result": "ok"}, 1},
		{nil, 6},
	} {
		if got := requests(t, reg, c.labels); got != c.want {
			t.Errorf("tenure_store_requests_total%v = %v; want %v", c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "tenure_store_request_duration_seconds"); n != 3 {
		t.Errorf("%d latency series; want one per operation used (get, put, list)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// Two stores observed on one Registerer with the same const labels share
// the series instead of failing to register; distinct values keep them
// apart.
func TestMetricsShareARegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	var stores []*store.Store
	for _, labels := range []prometheus.Labels{{"store": "a"}, {"store": "a"}, {"store": "b"}} {
		m, err := store.NewMetrics(reg, labels)
		if err != nil {
			t.Fatalf("NewMetrics(%v): %v", labels, err)
		}
		s := store.New(memstore.New(), store.WithObserver(m.Observe))
		defer s.Close()
		stores = append(stores, s)
	}
	for _, s := range stores {
		if _, err := s.Put(t.Context(), "k", []byte("x"), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests(t, reg, map[string]string{"store": "a"}); got != 2 {
		t.Errorf("the two stores labelled a counted %v writes; want 2 on one series", got)
	}
	if got := requests(t, reg, map[string]string{"store": "b"}); got != 1 {
		t.Errorf("the labelled store counted %v writes; want 1", got)
	}
	// Another collector under the same name is a conflict, reported.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_store_requests_total", Help: "x"}))
	if _, err := store.NewMetrics(other, nil); err == nil || !strings.Contains(err.Error(), "store: register metrics") {
		t.Errorf("NewMetrics beside a foreign collector of the same name = %v; want an error", err)
	}
}

// Without a Registerer a Metrics still counts, and is a Collector its
// caller may register.
func TestMetricsWithoutRegisterer(t *testing.T) {
	m, err := store.NewMetrics(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(memstore.New(), store.WithObserver(m.Observe))
	defer s.Close()
	if _, err := s.Put(t.Context(), "k", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if got := requests(t, reg, map[string]string{"op": "put", "result": "ok"}); got != 1 {
		t.Errorf("the registered Metrics shows %v writes; want 1", got)
	}
}

// Observers given in several options all see each call.
func TestSeveralObservers(t *testing.T) {
	var a, b int
	s := store.New(memstore.New(), store.WithObserver(func(store.Call) { a++ }), store.WithObserver(func(store.Call) { b++ }), store.WithObserver(nil))
	defer s.Close()
	_, _, _ = s.Get(t.Context(), "k")
	if a != 1 || b != 1 {
		t.Errorf("observers saw %d and %d calls; want 1 each", a, b)
	}
}
