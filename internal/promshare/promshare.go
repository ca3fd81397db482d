// Package promshare registers a collector that several instances of a
// component share on one Registerer.
package promshare

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it; if reg already has a
// collector of c's type describing the same series, it returns that one
// instead, so that instances sharing a Registerer add their labelled
// series to one collector. Any other registration error is returned.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, err
}
