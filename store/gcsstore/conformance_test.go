package gcsstore_test

import (
	"os"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// knownDefects are conformance cases that fake-gcs-server fails through no
// fault of the driver, each with its cause as found in the server's source
// (v1.56.1). TestConformance fails on any other failure, and on a known
// defect that passes (the server was fixed: remove the entry, and update
// doc.go). TestWireConditions checks that the driver sends the condition.
var knownDefects = map[string]string{
	"Delete": "fake-gcs-server ignores ifGenerationMatch on an object delete, so a delete on a stale generation " +
		"succeeds (fakestorage/object.go, Server.deleteObject reads only the generation parameter)",
}

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
	open := openOn(testutil.FakeGCS(t))
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		MaxKeyLen: gcsstore.MaxObjectNameLen - prefixLen,
	})
}
