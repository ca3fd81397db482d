package azurestore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/azurestore"
)

// Azurite is shared by every test in the binary and stopped after them.
func TestMain(m *testing.M) { testutil.Main(m) }

// clientFor returns a container client for srv's container, authorised
// with the account's shared key, as OpenURL builds one.
func clientFor(t testing.TB, srv testutil.AzuriteServer, opts *container.ClientOptions) *container.Client {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(srv.Account, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(srv.Endpoint+"/"+srv.Container, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var prefixSeq atomic.Int64

// prefixLen is the length of every prefix newPrefix returns, so that one
// MaxKeyLen holds for all of them.
const prefixLen = len("t/000000/")

// newPrefix returns a prefix no other test in this binary uses.
func newPrefix() string { return fmt.Sprintf("t/%06d/", prefixSeq.Add(1)) }

// openOn returns a function that opens a fresh, empty store on srv.
func openOn(t testing.TB, srv testutil.AzuriteServer) func(t testing.TB) *store.Store {
	client := clientFor(t, srv, nil)
	return func(t testing.TB) *store.Store {
		t.Helper()
		d, err := azurestore.New(client, newPrefix(), azurestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return store.New(d)
	}
}

func ctx(t testing.TB) context.Context { return t.Context() }
