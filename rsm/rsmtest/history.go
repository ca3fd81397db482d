package rsmtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Pending is the Return time of an operation whose outcome is unknown: it
// may take effect at any time after its call, or never. porcupine
// linearizes it anywhere after its call, including after every other
// operation, where it changes nothing that was observed.
const Pending int64 = 1 << 62

// History records operations for porcupine. Times are nanoseconds on the
// monotonic clock since NewHistory. It is safe for concurrent use.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewHistory returns an empty history whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock: call it just before invoking an operation
// and just after it returns.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records an operation. ret is Pending if its outcome is unknown.
// meta is shown in the visualization and saved with the history.
func (h *History) Add(client int, input any, call int64, output any, ret int64, meta any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: input, Call: call, Output: output, Return: ret, Metadata: meta})
}

// Operations returns a copy of the operations recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// ArtifactsDir returns the directory for t's artifacts: $TENURE_ARTIFACTS
// joined with the test's name, or else a new directory under the system's
// temporary directory, which is left behind so the artifacts outlive the
// test. It creates the directory.
func ArtifactsDir(t testing.TB) (string, error) {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if base := os.Getenv("TENURE_ARTIFACTS"); base != "" {
		dir := filepath.Join(base, name)
		return dir, os.MkdirAll(dir, 0o755)
	}
	return os.MkdirTemp("", "tenure-"+name+"-")
}

// Check checks ops against model within timeout. On Illegal or Unknown it
// writes the history as JSON (history.json) and porcupine's visualization
// (history.html) to ArtifactsDir(t) and fails t, naming the files. It
// returns the result.
func Check(t testing.TB, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	t.Helper()
	return check(t, model, ops, timeout, nil)
}

// CheckKV checks a history of the kv machine: CheckKVRevisions, then
// porcupine with KVModel, as Check does. Any violation fails t and saves
// the history.
func CheckKV(t testing.TB, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	t.Helper()
	return check(t, KVModel, ops, timeout, CheckKVRevisions(ops))
}

func check(t testing.TB, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, bad []string) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	t.Logf("porcupine: %s on %d operations in %v", res, len(ops), time.Since(start).Round(time.Millisecond))
	for _, b := range bad {
		t.Errorf("%s", b)
	}
	if res == porcupine.Ok && len(bad) == 0 {
		return res
	}
	dir, err := SaveHistory(t, model, ops, info)
	if err != nil {
		t.Errorf("saving the history: %v", err)
	}
	switch res {
	case porcupine.Ok:
		t.Errorf("history passes porcupine but breaks the checks above; history and visualization in %s", dir)
	case porcupine.Illegal:
		t.Errorf("history is not linearizable; history and visualization in %s", dir)
	default:
		t.Errorf("linearizability check timed out after %v (result %s); history and visualization in %s", timeout, res, dir)
	}
	return res
}

// SaveHistory writes ops as JSON and, with info from porcupine, as an HTML
// visualization, to ArtifactsDir(t), and returns the directory.
func SaveHistory(t testing.TB, model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) (string, error) {
	dir, err := ArtifactsDir(t)
	if err != nil {
		return "", err
	}
	type jsonOp struct {
		Client   int    `json:"client"`
		Call     int64  `json:"call"`
		Return   int64  `json:"return"` // Pending: outcome unknown
		Input    any    `json:"input"`
		Output   any    `json:"output"`
		Metadata any    `json:"metadata,omitempty"`
		Describe string `json:"describe"`
	}
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	out := make([]jsonOp, len(sorted))
	for i, op := range sorted {
		d := ""
		if model.DescribeOperation != nil {
			d = model.DescribeOperation(op.Input, op.Output)
		}
		out[i] = jsonOp{Client: op.ClientId, Call: op.Call, Return: op.Return, Input: op.Input, Output: op.Output, Metadata: op.Metadata, Describe: d}
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return dir, err
	}
	f, err := os.Create(filepath.Join(dir, "history.html"))
	if err != nil {
		return dir, err
	}
	verr := porcupine.Visualize(model, info, f)
	if err := f.Close(); verr == nil {
		verr = err
	}
	if verr != nil {
		return dir, fmt.Errorf("visualization: %w", verr)
	}
	return dir, nil
}
