package lease

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/internal/promshare"
)

// collector holds the lease families of one Registerer, registered once;
// the Coordinators that follow add their series to it, labelled by prefix
// and owner, so that several can share a Registerer and a new Coordinator
// for the same prefix and OwnerID takes its predecessor's series over (as
// the election package does); two running ones with the same prefix and
// OwnerID (on two stores) are refused.
type collector struct {
	acquisitions *prometheus.CounterVec
	losses       *prometheus.CounterVec

	held, shards, members, epoch *prometheus.Desc

	mu     sync.Mutex
	coords map[coordKey]*Coordinator
}

type coordKey struct{ prefix, owner string }

var coordLabels = []string{"prefix", "owner"}

func newCollector() *collector {
	return &collector{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_lease_acquisitions_total", Help: "Shards this member started to lead.",
		}, coordLabels),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_lease_losses_total", Help: "Shards this member stopped leading: released (Stop, RemoveShard, a rebalance) or lost (a renewal that failed or was refused).",
		}, coordLabels),
		held: prometheus.NewDesc("tenure_lease_shards_held",
			"Shards this member leads now (Held at scrape time).", coordLabels, nil),
		shards: prometheus.NewDesc("tenure_lease_shards",
			"Shards this member knows of.", coordLabels, nil),
		members: prometheus.NewDesc("tenure_lease_members",
			"Live members this member sees (MemberLeases mode).", coordLabels, nil),
		epoch: prometheus.NewDesc("tenure_lease_assignment_epoch",
			"Epoch of the assignment record this member last applied (MemberLeases mode): it grows with every change of the assignment.", coordLabels, nil),
		coords: map[coordKey]*Coordinator{},
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.acquisitions.Describe(ch)
	c.losses.Describe(ch)
	ch <- c.held
	ch <- c.shards
	ch <- c.members
	ch <- c.epoch
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.acquisitions.Collect(ch)
	c.losses.Collect(ch)
	c.mu.Lock()
	coords := make(map[coordKey]*Coordinator, len(c.coords))
	for k, co := range c.coords {
		coords[k] = co
	}
	c.mu.Unlock()
	for k, co := range coords {
		st := co.Status()
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(len(st.Held)), k.prefix, k.owner)
		ch <- prometheus.MustNewConstMetric(c.shards, prometheus.GaugeValue, float64(len(st.Shards)), k.prefix, k.owner)
		if co.cfg.Mode == MemberLeases {
			ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(len(st.Members)), k.prefix, k.owner)
			ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(st.Epoch), k.prefix, k.owner)
		}
	}
}

// metrics are one Coordinator's counters. A nil *metrics records nothing.
type metrics struct {
	acquired, lost prometheus.Counter
}

func registerMetrics(reg prometheus.Registerer, co *Coordinator) (*metrics, error) {
	c, err := promshare.Register(reg, newCollector())
	if err != nil {
		return nil, fmt.Errorf("lease: register metrics: %w", err)
	}
	k := coordKey{prefix: co.cfg.Prefix, owner: co.cfg.OwnerID}
	c.mu.Lock()
	if prev := c.coords[k]; prev != nil && prev.running() {
		c.mu.Unlock()
		return nil, fmt.Errorf("lease: register metrics: a Coordinator for prefix %q with OwnerID %q is running on this Registerer already; give one of them a Registerer of its own", k.prefix, k.owner)
	}
	c.coords[k] = co
	c.mu.Unlock()
	return &metrics{
		acquired: c.acquisitions.WithLabelValues(k.prefix, k.owner),
		lost:     c.losses.WithLabelValues(k.prefix, k.owner),
	}, nil
}

// leading records that this member started (true) or stopped leading a
// shard.
func (m *metrics) leading(started bool) {
	switch {
	case m == nil:
	case started:
		m.acquired.Inc()
	default:
		m.lost.Inc()
	}
}
