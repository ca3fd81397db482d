package election_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// sample returns the value of the series of name whose labels include
// labels (a counter, gauge, or a histogram's count), summed, and whether
// any matched.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
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
			found = true
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, found
}

// waitLeading waits, a minute at most, for e to lead.
func waitLeading(t *testing.T, e *election.Elector) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.WaitForLeadership(ctx); err != nil {
		t.Fatal(err)
	}
}

func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := sample(t, g, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

func series(id string, more ...string) map[string]string {
	m := map[string]string{"lock": "leader.json", "id": id}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i]] = more[i+1]
	}
	return m
}

// The metrics follow the behaviour: is_leader goes to 1 with the
// acquisition and back to 0 on Stop, the term is the one taken, each term
// counts a start and a stop, renewals are counted and timed.
func TestMetricsFollowLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		e := newElector(t, store.New(memstore.New()), "a", func(c *election.Config) { c.Registerer = reg })
		a := series("a")
		if v := value(t, reg, "tenure_election_is_leader", a); v != 0 {
			t.Fatalf("is_leader %v before Start", v)
		}
		if v := value(t, reg, "tenure_election_transitions_total", series("a", "kind", "started")); v != 0 {
			t.Fatalf("started %v before Start", v)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitLeading(t, e)
		if v := value(t, reg, "tenure_election_is_leader", a); v != 1 {
			t.Errorf("is_leader %v while leading", v)
		}
		if v := value(t, reg, "tenure_election_term", a); v != 1 {
			t.Errorf("term %v; want 1", v)
		}
		if v := value(t, reg, "tenure_election_transitions_total", series("a", "kind", "started")); v != 1 {
			t.Errorf("started %v; want 1", v)
		}
		time.Sleep(3*election.DefaultFrequentInterval + time.Second)
		if v := value(t, reg, "tenure_election_renewals_total", series("a", "result", "ok")); v != 3 {
			t.Errorf("renewals ok %v after three frequent intervals; want 3", v)
		}
		if v := value(t, reg, "tenure_election_renew_duration_seconds", a); v != 4 {
			t.Errorf("%v timed writes; want 4 (the acquisition and three renewals)", v)
		}
		if err := e.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if v := value(t, reg, "tenure_election_is_leader", a); v != 0 {
			t.Errorf("is_leader %v after Stop", v)
		}
		if v := value(t, reg, "tenure_election_transitions_total", series("a", "kind", "stopped")); v != 1 {
			t.Errorf("stopped %v after Stop; want 1", v)
		}
		if v := value(t, reg, "tenure_election_record_problem", a); v != 0 {
			t.Errorf("record_problem %v", v)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", err, problems)
		}
	})
}

// A renewal the store fails counts as an error; one another member's
// write refuses counts as lost, and ends the term.
func TestMetricsCountFailedAndLostRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		inner := memstore.New()
		fs := faultstore.New(inner)
		st := store.New(fs)
		e := newElector(t, st, "a", func(c *election.Config) { c.Registerer = reg })
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer e.Stop(t.Context())
		waitLeading(t, e)
		fs.FailRate(faultstore.OpPutCAS, driver.Transient, 1)
		// The renewal at 5 s fails after its retries (0, 100 ms, 1 s).
		time.Sleep(election.DefaultFrequentInterval + 2500*time.Millisecond)
		if v := value(t, reg, "tenure_election_renewals_total", series("a", "result", "error")); v < 1 {
			t.Errorf("renewals error %v after a renewal the store failed", v)
		}
		fs.ClearFaults()
		time.Sleep(time.Second)
		if !e.IsLeader() {
			t.Fatal("one failed renewal ended the term; the test needs it to go on")
		}
		// Another writer takes the lock under the leader.
		_, v, err := st.Get(t.Context(), election.DefaultLockfilePath)
		if err != nil {
			t.Fatal(err)
		}
		other := election.Record{LeaderID: "b", Term: 9, LeaseMillis: 15000, Session: "other", Nonce: "n"}
		if _, err := st.Put(t.Context(), election.DefaultLockfilePath, other.Encode(), store.IfMatch(v)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * election.DefaultFrequentInterval)
		if v := value(t, reg, "tenure_election_renewals_total", series("a", "result", "lost")); v != 1 {
			t.Errorf("renewals lost %v after another member took the lock; want 1", v)
		}
		if v := value(t, reg, "tenure_election_transitions_total", series("a", "kind", "stopped")); v != 1 {
			t.Errorf("stopped %v after the lock was lost; want 1", v)
		}
		if v := value(t, reg, "tenure_election_is_leader", series("a")); v != 0 {
			t.Errorf("is_leader %v after the lock was lost", v)
		}
		if v := value(t, reg, "tenure_election_term", series("a")); v != 9 {
			t.Errorf("term %v; want the other member's 9", v)
		}
	})
}

// Electors share a Registerer: each has its own series, labelled by lock
// and id; a later Elector with the same lock and id takes the series over
// once the first has stopped (its counters go on from its predecessor's),
// and is refused while it runs; a Registerer wrapped with const labels
// works too. None of it panics.
func TestMetricsElectorsShareARegisterer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		st := store.New(memstore.New())
		withReg := func(c *election.Config) { c.Registerer = reg }
		a := newElector(t, st, "a", withReg)
		b := newElector(t, st, "b", withReg)
		other := newElector(t, st, "a", func(c *election.Config) { c.Registerer = reg; c.LockfilePath = "other.json" })
		// a leads its lock before b starts, and alone on other.json.
		for _, e := range []*election.Elector{a, other, b} {
			if err := e.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			if e != b {
				waitLeading(t, e)
			}
		}
		time.Sleep(time.Second)
		if v := value(t, reg, "tenure_election_is_leader", series("a")); v != 1 {
			t.Errorf("a: is_leader %v", v)
		}
		if v := value(t, reg, "tenure_election_is_leader", series("b")); v != 0 {
			t.Errorf("b: is_leader %v", v)
		}
		if v := value(t, reg, "tenure_election_is_leader", map[string]string{"lock": "other.json", "id": "a"}); v != 1 {
			t.Errorf("a on other.json: is_leader %v", v)
		}
		if n := testutil.CollectAndCount(reg, "tenure_election_is_leader"); n != 3 {
			t.Errorf("%d is_leader series; want 3", n)
		}
		for _, e := range []*election.Elector{a, b, other} {
			if err := e.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		again := newElector(t, st, "a", withReg)
		if err := again.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitLeading(t, again)
		// While it runs, another Elector for the same lock and id (on
		// another store) would hide it: New refuses.
		_, err := election.New(t.Context(), election.Config{Store: store.New(memstore.New()), ServerID: "a", Registerer: reg, Logger: quietLogger(t)})
		if err == nil || !strings.Contains(err.Error(), "is running on this Registerer already") {
			t.Errorf("New beside a running Elector with the same lock and id = %v; want a registration error", err)
		}
		if v := value(t, reg, "tenure_election_is_leader", series("a")); v != 1 {
			t.Errorf("a again: is_leader %v", v)
		}
		if v := value(t, reg, "tenure_election_transitions_total", series("a", "kind", "started")); v != 2 {
			t.Errorf("a again: started %v; want 2 (one per elector)", v)
		}
		if err := again.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}

		// Label names must agree on one registry: the wrapped Registerer
		// gets a registry of its own.
		reg = prometheus.NewPedanticRegistry()
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"app": "x"}, reg)
		for _, id := range []string{"c", "d"} {
			if _, err := election.New(t.Context(), election.Config{Store: st, ServerID: id, Registerer: wrapped, Logger: quietLogger(t)}); err != nil {
				t.Fatalf("New on a wrapped Registerer: %v", err)
			}
		}
		if _, ok := sample(t, reg, "tenure_election_is_leader", map[string]string{"app": "x", "id": "d"}); !ok {
			t.Error("no series for d on the wrapped Registerer")
		}
	})
}

// A collector of another kind under one of the names is reported by New,
// not a panic.
func TestMetricsConflictIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "tenure_election_term", Help: "x"}))
	_, err := election.New(t.Context(), election.Config{Store: store.New(memstore.New()), ServerID: "a", Registerer: reg})
	if err == nil || !strings.Contains(err.Error(), "election: register metrics") {
		t.Fatalf("New = %v; want a registration error", err)
	}
}

// The store an elector opens from its URL is counted on its Registerer; a
// store passed in is not (its opener counts it), so nothing is counted
// twice.
func TestMetricsCountTheStoreItOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, opened := range []bool{true, false} {
			reg := prometheus.NewPedanticRegistry()
			cfg := election.Config{ServerID: "a", Registerer: reg, Logger: quietLogger(t)}
			if opened {
				cfg.StoreURL = "mem://" + t.Name()
			} else {
				cfg.Store = store.New(memstore.New())
			}
			e, err := election.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			waitLeading(t, e)
			if err := e.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			n, _ := sample(t, reg, "tenure_store_requests_total", map[string]string{"op": "put", "result": "ok"})
			switch {
			case opened && n < 2:
				t.Errorf("store opened from a URL: %v successful writes counted; want the probe's and the acquisition's at least", n)
			case !opened && n != 0:
				t.Errorf("store passed in: %v writes counted; want none", n)
			}
		}
	})
}
