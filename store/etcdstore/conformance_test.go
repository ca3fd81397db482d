package etcdstore_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
)

func TestConformance(t *testing.T) {
	srv := testutil.Etcd(t)
	t.Logf("etcd %s at %s", srv.Version, srv.ClientURL)
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return openOn(t, srv) }, drivertest.Options{})
}
