package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/store"
)

// storeMetrics count the store calls of one command (tenure elect, tenure
// kv serve), fed by store.WithObserver.
type storeMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newStoreMetrics() *storeMetrics {
	return &storeMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_store_requests_total", Help: "Store requests by operation, condition and result.",
		}, []string{"op", "cond", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_store_request_duration_seconds", Help: "Store request latency by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"op"}),
	}
}

func (m *storeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency}
}

// observe records one call; result is "ok" or the error's kind.
func (m *storeMetrics) observe(c store.Call) {
	result := "ok"
	if c.Err != nil {
		result = store.KindOf(c.Err).String()
	}
	m.requests.WithLabelValues(c.Op, c.Cond.String(), result).Inc()
	m.latency.WithLabelValues(c.Op).Observe(c.Duration.Seconds())
}
