package s3store_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/s3store"
)

// Servers are shared by every test in the binary and stopped after them.
func TestMain(m *testing.M) { testutil.Main(m) }

// servers lists the real servers integration tests run against.
var servers = []struct {
	name  string
	start func(testing.TB) testutil.S3Server
}{
	{"minio", testutil.MinIO},
	{"versitygw", testutil.VersityGW},
}

// clientFor returns an S3 client for srv, configured as OpenURL configures
// its own.
func clientFor(srv testutil.S3Server, hc *http.Client) *s3.Client {
	o := s3.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	}
	if hc != nil {
		o.HTTPClient = hc
	}
	s3store.ConfigureChecksums(&o)
	return s3.New(o)
}

var prefixSeq atomic.Int64

// prefixLen is the length of every prefix newPrefix returns, so that one
// MaxKeyLen holds for all of them.
const prefixLen = len("t/000000/")

// newPrefix returns a prefix no other test in this binary uses.
func newPrefix() string { return fmt.Sprintf("t/%06d/", prefixSeq.Add(1)) }

// openOn returns a function that opens a fresh, empty store on srv.
func openOn(srv testutil.S3Server) func(t testing.TB) *store.Store {
	client := clientFor(srv, nil)
	return func(t testing.TB) *store.Store {
		t.Helper()
		d, err := s3store.New(client, srv.Bucket, newPrefix(), s3store.Options{Endpoint: srv.Endpoint})
		if err != nil {
			t.Fatal(err)
		}
		return store.New(d)
	}
}

func ctx(t testing.TB) context.Context { return t.Context() }
