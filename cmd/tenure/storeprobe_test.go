package main

import (
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
)

// On MinIO, which ignores If-Match on DeleteObject, the probe passes the
// store and says that conditional deletes are refused there, and why.
func TestProbeMinIORefusesConditionalDeletes(t *testing.T) {
	srv := testutil.MinIO(t)
	srv.SetEnv(t)
	code, out, errs := runCmd(t, "store", "probe", "--rounds", "2", srv.URL("probe-cli"))
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	for _, want := range []string{
		"delete if match              refused",
		"conditional deletes fail with store.ErrUnsupported here:",
		"a delete on a stale version succeeded",
		"ok: this store enforces",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
