package gcsstore_test

import (
	"net/http"
	"os"
	"testing"

	"google.golang.org/api/option"
	"google.golang.org/api/storage/v1"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// knownDefects are conformance cases that fake-gcs-server fails through no
// fault of the driver, each with its cause as found in the server's source
// (v1.56.1). TestConformance fails on any other failure, and on a known
// defect that passes (the server was fixed: remove the entry, and update
// doc.go). TestWireConditions checks that the driver sends the condition.
// It is empty: fake-gcs-server ignores ifGenerationMatch on an object
// delete (fakestorage/object.go, Server.deleteObject reads only the
// generation parameter), and the driver finds that out and refuses
// conditional deletes there, which the case Delete accepts.
var knownDefects = map[string]string{}

// conformanceChild is set in the child process that runs the suite.
const conformanceChild = "TENURE_GCSSTORE_CONFORMANCE"

// TestConformance runs the drivertest suite against fake-gcs-server in a
// child process and compares the outcome of every case with knownDefects.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	testutil.RunChildSuite(t, "TestConformanceRun", []string{conformanceChild + "=1"}, knownDefects)
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process. Requests reach fake-gcs-server directly, not serialised: its
// memory backend checks ifGenerationMatch under the lock that applies the
// upload, and the races (16 writers, 200 rounds) hold it to that.
func TestConformanceRun(t *testing.T) {
	if os.Getenv(conformanceChild) == "" {
		t.Skip("run by TestConformance in a child process")
	}
	srv := testutil.FakeGCS(t)
	open := openOn(srv)
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		MaxKeyLen:  gcsstore.MaxObjectNameLen - prefixLen,
		LostAnswer: func(t *testing.T) (*store.Store, func()) { return openLosingAnswers(t, srv) },
	})
}

// openLosingAnswers opens a fresh store on srv whose transport, once armed,
// applies the next upload and drops its answer.
func openLosingAnswers(t *testing.T, srv testutil.GCSServer) (*store.Store, func()) {
	tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	service, err := storage.NewService(ctx(t), append(gcsstore.ClientOptions(srv.Endpoint), option.WithHTTPClient(hc))...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := gcsstore.New(service, srv.Bucket, newPrefix(), gcsstore.Options{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return store.New(d), func() {
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPost, Path: "/upload/", P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
			t.Fatal(err)
		}
	}
}
