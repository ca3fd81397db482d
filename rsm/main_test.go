package rsm_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines behind: a node, a
// leader's loop, a stream to a peer or a host that was not closed.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m, "google.golang.org/grpc") }
