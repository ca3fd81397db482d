package dynamostore_test

import (
	"os"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/dynamostore"
)

// knownDefects are conformance cases that fail through no fault of the
// driver. TestConformance fails on any other failure, and on a known defect
// that passes.
var knownDefects = map[string]string{
	"Values": "moto counts a binary attribute by the length of its base64 text, not of its bytes " +
		"(moto/dynamodb/models/dynamo_type.py, DynamoType.size), so it refuses the largest value DynamoDB " +
		"takes with ValidationException; TestValuesOnMoto covers values up to 290 KiB on moto, and " +
		"TestLimitsAreCheckedBeforeAnyRequest the limit itself",
}

// conformanceChild is set in the child process that runs the suite.
const conformanceChild = "TENURE_DYNAMOSTORE_CONFORMANCE"

// TestConformance runs the drivertest suite against moto in a child process
// and compares the outcome of every case with knownDefects.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	testutil.RunChildSuite(t, "TestConformanceRun", []string{conformanceChild + "=1"}, knownDefects)
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process. moto is reached through a proxy that serialises requests: moto
// itself does not apply a conditional write atomically (see
// testutil.MotoServer.Serialized), and the races would test that instead of
// the driver.
func TestConformanceRun(t *testing.T) {
	if os.Getenv(conformanceChild) == "" {
		t.Skip("run by TestConformance in a child process")
	}
	open := openOn(t, testutil.Moto(t).Serialized(t))
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		// Every namespace newNamespace returns has the same length.
		MaxValueSize: maxValueSize(t),
		// Each request costs moto about 10 ms when serialised; 50 rounds
		// of 16 writers keep the races under 20 s.
		RaceRounds: 50,
	})
}

// maxValueSize is the driver's MaxValueSize for the namespaces of the
// conformance stores.
func maxValueSize(t *testing.T) int {
	d, err := dynamostore.New(clientFor(testutil.MotoServer{}), "tenure", "ns000000", dynamostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d.MaxValueSize()
}
