package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/internal/promshare"
)

// Metrics counts a Store's calls in Prometheus form. Feed it with
// WithObserver(m.Observe). The series:
//
//	tenure_store_requests_total{op, cond, result}   counter
//	tenure_store_request_duration_seconds{op}       histogram
//
// op is get, put, delete or list; cond is unconditional, if-absent or
// if-match; result is "ok" or the error's Kind ("not found", "precondition
// failed", "conflict", "throttled", "transient", "permanent", "invalid
// argument", "canceled", "too large", "unknown"). Calls refused before they
// reach the driver (a bad key, a closed or read-only store) are not counted.
//
// A Metrics is safe for concurrent use.
type Metrics struct {
	c *storeCollector
}

// storeCollector holds the families; it is what is registered, so that a
// second NewMetrics on the same Registerer finds it and shares it.
type storeCollector struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	c.requests.Describe(ch)
	c.latency.Describe(ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	c.requests.Collect(ch)
	c.latency.Collect(ch)
}

// NewMetrics registers the store families on reg, with constLabels (nil
// for none) on every series, and returns a Metrics to observe calls with.
// Stores whose Metrics share reg and constLabels share the series: a second
// NewMetrics returns a Metrics that adds to the first's counters, so that
// every store of a process can be counted on one registry without an
// error. Give stores distinct constLabels values to count them apart (the
// label names must be the same on one registry, as Prometheus requires:
// {"store": "a"} and {"store": "b"}, not nil and {"store": "b"}). A nil reg
// registers nothing: register the Metrics (a prometheus.Collector) where
// it should be exposed, or not at all.
// NewMetrics fails if reg holds other collectors with the same names.
func NewMetrics(reg prometheus.Registerer, constLabels prometheus.Labels) (*Metrics, error) {
	c := &storeCollector{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_store_requests_total", Help: "Store requests by operation, condition and result.",
			ConstLabels: constLabels,
		}, []string{"op", "cond", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_store_request_duration_seconds", Help: "Store request latency by operation.",
			ConstLabels: constLabels,
			Buckets:     prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"op"}),
	}
	if reg == nil {
		return &Metrics{c: c}, nil
	}
	c, err := promshare.Register(reg, c)
	if err != nil {
		return nil, fmt.Errorf("store: register metrics: %w", err)
	}
	return &Metrics{c: c}, nil
}

// Describe and Collect make a Metrics a prometheus.Collector, for a caller
// that registers it itself (made with a nil Registerer).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { m.c.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) { m.c.Collect(ch) }

// Observe records one call. It is an observer for WithObserver.
func (m *Metrics) Observe(c Call) {
	result := "ok"
	if c.Err != nil {
		result = KindOf(c.Err).String()
	}
	m.c.requests.WithLabelValues(c.Op, c.Cond.String(), result).Inc()
	m.c.latency.WithLabelValues(c.Op).Observe(c.Duration.Seconds())
}
