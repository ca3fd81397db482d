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
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return openOn(t, srv) }, drivertest.Options{
		// Through a proxy that, once armed, cuts the connection at the
		// next answer, after etcd applied the request.
		LostAnswer: func(t *testing.T) (*store.Store, func()) {
			proxy := newCutProxy(t, srv.Endpoint)
			s, err := store.Open(t.Context(), "etcd://"+proxy.addr()+newPrefix())
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { proxy.armed.Store(true) }
		},
	})
}
