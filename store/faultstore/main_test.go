package faultstore_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines behind: a hung call,
// an HTTP connection or a server that was not closed.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m, "net/http") }
