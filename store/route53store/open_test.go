package route53store_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/route53store"
)

func TestOpenRefusesBadURLs(t *testing.T) {
	testutil.IsolateAWSConfig(t)
	cases := []struct{ name, url, want string }{
		{"no zone", "route53:///tenure", "no hosted zone ID"},
		{"no zone, no slash", "route53:", "no hosted zone ID"},
		{"no name", "route53://Z123", "no record name prefix"},
		{"bad name", "route53://Z123/Tenure", "a-z, 0-9"},
		{"empty label", "route53://Z123/a..b", "labels are 1 to 63"},
		{"bad zone ID", "route53://Z1_23/tenure", "not a hosted zone ID"},
		{"port in the zone", "route53://Z123:443/tenure", "?endpoint="},
		{"credentials in the URL", "route53://AKID:hunter2@Z123/tenure", "credentials do not belong in the URL"},
		{"unknown parameter", "route53://Z123/tenure?regoin=x", `unknown parameter "regoin"`},
		{"repeated parameter", "route53://Z123/tenure?rate=1&rate=2", "given 2 times"},
		{"bad rate", "route53://Z123/tenure?rate=0", "rate"},
		{"endpoint without scheme", "route53://Z123/tenure?endpoint=127.0.0.1:5000", "http:// or https://"},
		{"no credentials", "route53://Z123/tenure?endpoint=http://127.0.0.1:1", "no usable AWS credentials"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(ctx(t), c.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			if !errors.Is(err, store.ErrPermanent) {
				t.Errorf("error %v does not match ErrPermanent", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

func motoURL(srv testutil.MotoServer, zone, name string) string {
	q := url.Values{}
	q.Set("endpoint", srv.Endpoint)
	q.Set("rate", "50")
	return "route53://" + strings.TrimPrefix(zone, "/hostedzone/") + "/" + name + "?" + q.Encode()
}

// Open against moto looks up the zone's name (no region needed: Route 53
// is global); a missing zone is a clear permanent error.
func TestOpen(t *testing.T) {
	srv := testutil.Moto(t)
	testutil.IsolateAWSConfig(t)
	srv.SetEnv(t)
	zone := motoZone(t, srv)
	s, err := store.Open(ctx(t), motoURL(srv, zone, "prod.tenure"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	d := s.Driver().(*route53store.Store)
	if d.Root() != "prod.tenure."+motoZoneName {
		t.Errorf("Root() = %q", d.Root())
	}
	v, err := s.Put(ctx(t), "k", []byte("owner with spaces"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if data, gv, err := s.Get(ctx(t), "k"); err != nil || string(data) != "owner with spaces" || gv != v {
		t.Errorf("Get = %q, %q, %v", data, gv, err)
	}
	_, err = store.Open(ctx(t), motoURL(srv, "ZNOSUCHZONE0", "tenure"))
	if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open of a missing zone: %v", err)
	}
}

// The probe passes on Route 53's semantics (the fake) and fails closed on
// moto, whose Route 53 does not enforce a change batch's conditions.
func TestProbe(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		s := openFake(newFakeRoute53(t))(t)
		defer s.Close()
		res, err := store.Probe(ctx(t), s, 3)
		if err != nil || !res.OK() || !res.DeleteIfMatch {
			t.Errorf("probe: %+v, %v; want every condition enforced", res, err)
		}
	})
	t.Run("moto", func(t *testing.T) {
		s := openMoto(t, testutil.Moto(t))(t)
		defer s.Close()
		res, err := store.Probe(ctx(t), s, 1)
		if !errors.Is(err, store.ErrConditionsIgnored) || res.OK() {
			t.Errorf("probe on moto: %+v, %v; want ErrConditionsIgnored", res, err)
		}
	})
}
