package s3store_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/s3store"
)

// knownDefects are conformance cases that a server fails through no fault
// of the driver, each with its cause as found in the server's source.
// (Conditional deletes are not among them: MinIO ignores If-Match on
// DeleteObject, cmd/object-handlers.go DeleteObjectHandler, and versitygw
// deletes a missing key "successfully", backend/posix/posix.go
// DeleteObject; the driver finds that out and refuses them, which the
// case Delete accepts.)
// TestConformance fails on any other failure, and on a known defect that
// passes (the server was fixed: remove the entry, and update doc.go).
var knownDefects = map[string]map[string]string{
	"minio": {
		"Keys": "MinIO refuses keys with empty, \".\" or \"..\" path segments (400 XMinioInvalidObjectName, " +
			"XMinioInvalidResourceName) and path segments over 255 bytes",
		"ListOrder": "MinIO accepts both \"a\" and \"a/b\" but its listing does not descend below an object's name " +
			"(cmd/metacache-walk.go), so \"a/b\" is missing from List",
		"ListPaging": "same cause as ListOrder: the suite writes \"log\" beside \"log/...\"",
	},
	"versitygw": {
		"Keys": "posix backend: a key ending in \"/\" is a directory and cannot hold data (400 DirectoryObjectContainsData); " +
			"\"..\" and path segments over 255 bytes are refused; \"//\", \"/./\" and \"/../\" are collapsed by the " +
			"file system, so the object is stored and listed under another name",
		"ListOrder":  "posix backend: a key cannot also be a prefix of another (\"a\" and \"a/b\": 409 ObjectParentIsFile)",
		"ListPaging": "same cause as ListOrder: \"log\" beside \"log/...\" (409 ExistingObjectIsDirectory)",
	},
}

// conformanceChild names the server that TestConformanceRun runs the suite
// against, in a child process started by TestConformance.
const conformanceChild = "TENURE_S3STORE_CONFORMANCE_SERVER"

// TestConformance runs the drivertest suite against each server in a child
// process and compares the outcome of every case with knownDefects.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			testutil.RunChildSuite(t, "TestConformanceRun", []string{conformanceChild + "=" + server.name}, knownDefects[server.name])
		})
	}
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process.
func TestConformanceRun(t *testing.T) {
	name := os.Getenv(conformanceChild)
	if name == "" {
		t.Skip("run by TestConformance in a child process")
	}
	for _, server := range servers {
		if server.name == name {
			srv := server.start(t)
			open := openOn(srv)
			drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
				MaxKeyLen:  s3store.MaxObjectKeyLen - prefixLen,
				LostAnswer: func(t *testing.T) (*store.Store, func()) { return openLosingAnswers(t, srv) },
			})
			return
		}
	}
	t.Fatalf("%s=%q names no server", conformanceChild, name)
}

// openLosingAnswers opens a fresh store on srv whose transport, once armed,
// applies the next conditional PUT and drops its answer.
func openLosingAnswers(t *testing.T, srv testutil.S3Server) (*store.Store, func()) {
	tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	d, err := s3store.New(clientFor(srv, hc), srv.Bucket, newPrefix(), s3store.Options{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return store.New(d), func() {
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.Conditional, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
			t.Fatal(err)
		}
	}
}
