package lease_test

import (
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// TestMain fails the run if a test leaves goroutines behind: a
// coordinator, a shard's election or an OnChange delivery that was not
// stopped.
func TestMain(m *testing.M) { testutil.ExitLeakChecked(m) }
