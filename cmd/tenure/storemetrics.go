package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/store"
)

// storeMetrics count the store calls of one command (tenure elect, tenure
// kv serve), fed by store.WithObserver: the store package's series
// (store.Metrics), registered on the command's registry.
type storeMetrics struct {
	m *store.Metrics
}

func newStoreMetrics() *storeMetrics {
	// Without a Registerer, NewMetrics cannot fail.
	m, _ := store.NewMetrics(nil, nil)
	return &storeMetrics{m: m}
}

func (m *storeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.m}
}

// observe records one call; result is "ok" or the error's kind.
func (m *storeMetrics) observe(c store.Call) { m.m.Observe(c) }
