package lease_test

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// gauge returns the value of the series name{prefix="shards/",owner=owner}.
func gauge(t *testing.T, g prometheus.Gatherer, name, owner string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if have["owner"] != owner || have["prefix"] != lease.DefaultPrefix {
				continue
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// In both modes the metrics follow what the member holds: acquisitions as
// it takes the shards, a loss per shard removed or released at Stop, the
// held and known counts, and in MemberLeases mode the live members and the
// assignment's epoch.
func TestMetricsFollowTheShards(t *testing.T) {
	for _, mode := range []lease.Mode{lease.ShardLeases, lease.MemberLeases} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewPedanticRegistry()
				c, err := lease.New(lease.Config{Store: store.New(memstore.New()), OwnerID: "m", Mode: mode,
					ShardIDs: []string{"a", "b", "c"}, Registerer: reg,
					Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: testLogLevel}))})
				if err != nil {
					t.Fatal(err)
				}
				want := func(name string, v float64) {
					t.Helper()
					got, ok := gauge(t, reg, name, "m")
					if !ok || got != v {
						t.Errorf("%s = %v (present %v); want %v", name, got, ok, v)
					}
				}
				want("tenure_lease_acquisitions_total", 0)
				want("tenure_lease_shards_held", 0)
				if err := c.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				for end := time.Now().Add(time.Minute); len(c.Held()) < 3; time.Sleep(100 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatalf("held %v after a minute", c.Held())
					}
				}
				want("tenure_lease_shards_held", 3)
				want("tenure_lease_shards", 3)
				want("tenure_lease_acquisitions_total", 3)
				want("tenure_lease_losses_total", 0)
				if mode == lease.MemberLeases {
					want("tenure_lease_members", 1)
					if e, _ := gauge(t, reg, "tenure_lease_assignment_epoch", "m"); e < 1 {
						t.Errorf("tenure_lease_assignment_epoch = %v after the first assignment", e)
					}
				} else if _, ok := gauge(t, reg, "tenure_lease_members", "m"); ok {
					t.Error("tenure_lease_members in ShardLeases mode")
				}
				if err := c.RemoveShard("a"); err != nil {
					t.Fatal(err)
				}
				for end := time.Now().Add(time.Minute); len(c.Held()) > 2; time.Sleep(100 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatalf("held %v a minute after RemoveShard", c.Held())
					}
				}
				time.Sleep(time.Second)
				want("tenure_lease_shards_held", 2)
				want("tenure_lease_losses_total", 1)
				if err := c.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				want("tenure_lease_shards_held", 0)
				want("tenure_lease_losses_total", 3)
				want("tenure_lease_acquisitions_total", 3)
				if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
					t.Errorf("lint: %v %v", err, problems)
				}
			})
		})
	}
}

// Coordinators share a Registerer without a conflict, each with its own
// series, but two running ones with one prefix and owner are refused; a
// collector of another kind under one of the names is an error
// from New.
func TestMetricsCoordinatorsShareARegisterer(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	st := store.New(memstore.New())
	for _, owner := range []string{"x", "y", "x"} {
		if _, err := lease.New(lease.Config{Store: st, OwnerID: owner, ShardIDs: []string{"a"}, Registerer: reg}); err != nil {
			t.Fatalf("New(%s): %v", owner, err)
		}
	}
	if n := testutil.CollectAndCount(reg, "tenure_lease_shards_held"); n != 2 {
		t.Errorf("%d tenure_lease_shards_held series; want 2 (x and y)", n)
	}
	// A running Coordinator's series are not taken over by another with
	// the same prefix and owner (on another store): New refuses, until
	// it has stopped.
	running, err := lease.New(lease.Config{Store: st, OwnerID: "z", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := running.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = lease.New(lease.Config{Store: store.New(memstore.New()), OwnerID: "z", Registerer: reg})
	if err == nil || !strings.Contains(err.Error(), "is running on this Registerer already") {
		t.Errorf("New beside a running Coordinator with the same prefix and owner = %v; want a registration error", err)
	}
	if err := running.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.New(lease.Config{Store: store.New(memstore.New()), OwnerID: "z", Registerer: reg}); err != nil {
		t.Errorf("New after the other stopped: %v", err)
	}
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "tenure_lease_shards_held", Help: "x"}))
	_, err = lease.New(lease.Config{Store: st, OwnerID: "x", Registerer: other})
	if err == nil || !strings.Contains(err.Error(), "lease: register metrics") {
		t.Errorf("New beside a foreign collector = %v; want a registration error", err)
	}
}
