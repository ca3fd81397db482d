package route53store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/route53store"
)

// The moto server is shared by every test in the binary and stopped after
// them.
func TestMain(m *testing.M) { testutil.Main(m) }

func ctx(t testing.TB) context.Context { return t.Context() }

var seq atomic.Int64

// prefixLen is the length of every prefix newPrefix returns, so that one
// MaxKeyLen holds for all of them.
const prefixLen = len("t000000")

// newPrefix returns a record name prefix no other test in this binary uses.
func newPrefix() string { return fmt.Sprintf("t%06d", seq.Add(1)) }

// unpaced are the options of stores on test servers: no pacing, so that
// the races run at full speed.
var unpaced = route53store.Options{RequestsPerSecond: -1}

// openFake returns a function that opens a fresh, empty store in the fake's
// zone.
func openFake(f *fakeRoute53) func(t testing.TB) *store.Store {
	client := f.client()
	return func(t testing.TB) *store.Store {
		t.Helper()
		d, err := route53store.New(client, f.zoneID, f.zoneName, newPrefix(), unpaced)
		if err != nil {
			t.Fatal(err)
		}
		return store.New(d)
	}
}

// motoZoneName is the name of the hosted zones tests create on moto; its
// length, with prefixLen, fixes MaxKeyLen.
const motoZoneName = "tenure-test.example."

// motoClient returns a Route 53 client for the moto server.
func motoClient(srv testutil.MotoServer) *route53.Client {
	return route53.New(route53.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
}

// motoZone creates a hosted zone on srv and returns its ID.
func motoZone(t testing.TB, srv testutil.MotoServer) string {
	t.Helper()
	out, err := motoClient(srv).CreateHostedZone(ctx(t), &route53.CreateHostedZoneInput{
		Name:            aws.String(motoZoneName),
		CallerReference: aws.String(fmt.Sprintf("tenure-%d", seq.Add(1))),
	})
	if err != nil {
		t.Fatalf("create hosted zone: %v", err)
	}
	return aws.ToString(out.HostedZone.Id)
}

// openMoto returns a function that opens a fresh, empty store in a zone of
// its own on srv.
func openMoto(t testing.TB, srv testutil.MotoServer) func(t testing.TB) *store.Store {
	client := motoClient(srv)
	zone := motoZone(t, srv)
	return func(t testing.TB) *store.Store {
		t.Helper()
		d, err := route53store.New(client, zone, motoZoneName, newPrefix(), unpaced)
		if err != nil {
			t.Fatal(err)
		}
		return store.New(d)
	}
}
