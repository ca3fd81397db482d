package election_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines behind: an elector, a
// term's work, a peer server or a poll that was not stopped.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m, "net/http") }
