package bench

import (
	"os/exec"
	"path/filepath"
	"testing"

	_ "github.com/tenure-io/tenure/store/all" // the benchmarks open stores by URL
)

// buildTenure builds the tenure command, which the benchmarks run as
// child processes.
func buildTenure(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tenure-io/tenure/cmd/tenure").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
