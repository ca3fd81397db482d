package route53store_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/route53store"
)

// knownDefects are conformance cases that fail through no fault of the
// driver, by server. TestConformance fails on any other failure, and on a
// known defect that passes.
var knownDefects = map[string]map[string]string{
	"fake": {},
	// moto 5 (moto/route53/models.py, change_resource_record_sets) does
	// not enforce a change batch's conditions: it refuses a CREATE only if
	// an identical change (same value) is in the zone's journal of past
	// changes, and appends a second record set of the same name and type
	// otherwise; it accepts a DELETE if the journal ever held a CREATE of
	// that name with those values (rr_changes.has_insert_or_update), then
	// deletes the name whatever its current value. store.Probe reports
	// such a store as unsafe (TestProbe).
	"moto": {
		"CreateIfAbsent": "moto accepts a CREATE of an existing name with a new value (a second record set)",
		"CompareAndSwap": "moto accepts a DELETE of a stale value that was once created, and deletes the current one",
		"Delete":         "same cause as CompareAndSwap: a delete on a stale version succeeds",
		"ErrorsAreWrapped": "same causes: a second create succeeds; and a DELETE of a name never created is answered " +
			"InvalidInput (\"Expected exactly one of [AliasTarget, ...]\"), not InvalidChangeBatch \"but it was not found\"",
		"RaceCreate":         "same cause as CreateIfAbsent: every racer's CREATE succeeds",
		"RaceCompareAndSwap": "same cause as CompareAndSwap: every racer's DELETE of the same old value succeeds",
	},
}

// conformanceChild names the server that TestConformanceRun runs the suite
// against, in a child process started by TestConformance.
const conformanceChild = "TENURE_ROUTE53STORE_CONFORMANCE_SERVER"

// TestConformance runs the drivertest suite in a child process against
// each server and compares the outcome of every case with knownDefects.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	for server, known := range knownDefects {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			testutil.RunChildSuite(t, "TestConformanceRun", []string{conformanceChild + "=" + server}, known)
		})
	}
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process.
func TestConformanceRun(t *testing.T) {
	var (
		open     func(testing.TB) *store.Store
		zoneName string
		// lost opens a store whose next change batch is applied and
		// its answer dropped.
		lost func(t *testing.T) (*store.Store, func())
	)
	switch name := os.Getenv(conformanceChild); name {
	case "":
		t.Skip("run by TestConformance in a child process")
	case "fake":
		f := newFakeRoute53(t)
		open, zoneName = openFake(f), f.zoneName
		lost = func(t *testing.T) (*store.Store, func()) {
			return openLosingAnswers(t, f.srv.URL, f.zoneID, f.zoneName, "AKID", "SECRET")
		}
	case "moto":
		// Serialised: moto applies a change batch without a lock.
		srv := testutil.Moto(t).Serialized(t)
		open, zoneName = openMoto(t, srv), motoZoneName
		zone := motoZone(t, srv)
		lost = func(t *testing.T) (*store.Store, func()) {
			return openLosingAnswers(t, srv.Endpoint, zone, motoZoneName, srv.AccessKey, srv.SecretKey)
		}
	default:
		t.Fatalf("%s=%q names no server", conformanceChild, name)
	}
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		// Every store's root is "t000000." + the zone's name.
		MaxKeyLen:    route53store.MaxKeyLenFor(prefixLen + len(zoneName)),
		MaxValueSize: route53store.MaxValueSize,
		RaceRounds:   50,
		LostAnswer:   lost,
	})
}

// openLosingAnswers opens a fresh store in the zone at endpoint whose
// transport, once armed, applies the next change batch (the only POST the
// driver sends) and drops its answer.
func openLosingAnswers(t *testing.T, endpoint, zoneID, zoneName, key, secret string) (*store.Store, func()) {
	tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	client := route53.New(route53.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(key, secret, ""),
		HTTPClient:   hc,
	})
	d, err := route53store.New(client, zoneID, zoneName, newPrefix(), unpaced)
	if err != nil {
		t.Fatal(err)
	}
	return store.New(d), func() {
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPost, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
			t.Fatal(err)
		}
	}
}
