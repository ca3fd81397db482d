package pack

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines of tenure's code
// behind (a Log closes dropped segments on goroutines of its own).
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m) }
