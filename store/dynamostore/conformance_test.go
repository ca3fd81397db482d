package dynamostore_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/dynamostore"
	"github.com/tenure-io/tenure/store/faultstore"
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
	srv := testutil.Moto(t).Serialized(t)
	open := openOn(t, srv)
	table := motoTable(t, srv)
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		LostAnswer: func(t *testing.T) (*store.Store, func()) { return openLosingAnswers(t, srv, table) },
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

// openLosingAnswers opens a fresh store on srv whose transport, once armed,
// applies the next PutItem and drops its answer. Every DynamoDB request is
// a POST to "/", so PutItem is told apart by its X-Amz-Target header.
func openLosingAnswers(t *testing.T, srv testutil.MotoServer, table string) (*store.Store, func()) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	tr := faultstore.NewTransport(base)
	client := dynamodb.New(dynamodb.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutItem") {
				return tr.RoundTrip(r)
			}
			return base.RoundTrip(r)
		})},
	})
	d, err := dynamostore.New(client, table, newNamespace(), dynamostore.Options{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return store.New(d), func() {
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPost, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
			t.Fatal(err)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
