package rsmtest_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines behind: a node or a
// client that was not stopped.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m) }
