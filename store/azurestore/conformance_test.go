package azurestore_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/azurestore"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
)

// knownDefects are conformance cases that fail through no fault of the
// driver's code. TestConformance fails on any other failure, and on a known
// defect that passes.
var knownDefects = map[string]string{
	"Keys": "Azure Blob Storage cannot store some of the suite's keys under their own name, so CheckKey refuses them " +
		"with ErrInvalidArgument: a backslash becomes \"/\" (Azurite copies the service: " +
		"src/blob/middlewares/blobStorageContext.middleware.ts, extractStoragePartsFromPath), path segments must not end " +
		"in \".\" (\".\", \"..\", \"...\"; \"Naming and Referencing Containers, Blobs, and Metadata\"), and a blob name " +
		"has at most 254 path segments (the suite's \"s/s/...\" key has over 500). TestKeysOnAzurite " +
		"runs the rest of the suite's keys, and checks the refusals",
}

// conformanceChild is set in the child process that runs the suite.
const conformanceChild = "TENURE_AZURESTORE_CONFORMANCE"

// TestConformance runs the drivertest suite against Azurite in a child
// process and compares the outcome of every case with knownDefects.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	testutil.RunChildSuite(t, "TestConformanceRun", []string{conformanceChild + "=1"}, knownDefects)
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process.
func TestConformanceRun(t *testing.T) {
	if os.Getenv(conformanceChild) == "" {
		t.Skip("run by TestConformance in a child process")
	}
	srv := testutil.Azurite(t)
	open := openOn(t, srv)
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
		MaxKeyLen:  azurestore.MaxBlobNameLen - prefixLen,
		LostAnswer: func(t *testing.T) (*store.Store, func()) { return openLosingAnswers(t, srv) },
	})
}

// openLosingAnswers opens a fresh store on srv whose transport, once armed,
// applies the next conditional PUT and drops its answer.
func openLosingAnswers(t *testing.T, srv testutil.AzuriteServer) (*store.Store, func()) {
	tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	client := clientFor(t, srv, &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hc}})
	d, err := azurestore.New(client, newPrefix(), azurestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return store.New(d), func() {
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.Conditional, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
			t.Fatal(err)
		}
	}
}
