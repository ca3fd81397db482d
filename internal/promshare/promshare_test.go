package promshare

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type vec struct{ *prometheus.CounterVec }

func newVec() *vec {
	return &vec{prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tenure_test_total", Help: "test"}, []string{"id"})}
}

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Register(reg, newVec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Register(reg, newVec())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("the second registration did not return the registered collector")
	}
	// Another type describing the same series is an error, not shared.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tenure_test_total", Help: "test"}, []string{"id"})
	if _, err := Register(reg, other); err == nil {
		t.Fatal("a collector of another type was accepted")
	}
}
