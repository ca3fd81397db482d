package gcsstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/gcsstore"
)

// The fake-gcs-server is shared by every test in the binary and stopped
// after them.
func TestMain(m *testing.M) { testutil.Main(m) }

func ctx(t testing.TB) context.Context { return t.Context() }

var prefixSeq atomic.Int64

// prefixLen is the length of every prefix newPrefix returns, so that one
// MaxKeyLen holds for all of them.
const prefixLen = len("t/000000/")

// newPrefix returns a prefix no other test in this binary uses.
func newPrefix() string { return fmt.Sprintf("t/%06d/", prefixSeq.Add(1)) }

// openOn returns a function that opens a fresh, empty store on srv through
// store.Open, as a user would.
func openOn(srv testutil.GCSServer) func(t testing.TB) *store.Store {
	return func(t testing.TB) *store.Store {
		t.Helper()
		s, err := store.Open(ctx(t), srv.URL(newPrefix()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}
