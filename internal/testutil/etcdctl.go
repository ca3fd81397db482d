package testutil

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// EtcdctlVersion is the etcdctl the acceptance tests of tenure etcd
// serve run (scripts/install-servers builds it).
const EtcdctlVersion = "3.7."

// Etcdctl returns the path of etcdctl 3.7: $TENURE_ETCDCTL_BIN, the one
// scripts/install-servers put in CacheDir, or one on PATH. It skips t if
// there is none (fails it under TENURE_REQUIRE_SERVERS=1), and fails it
// if the one found is another version.
func Etcdctl(t testing.TB) string {
	t.Helper()
	p, err := findBinary("etcdctl", "TENURE_ETCDCTL_BIN")
	if err != nil {
		fail(t, err)
		return ""
	}
	out, err := exec.Command(p, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", p, err, out)
	}
	if !strings.Contains(string(out), "etcdctl version: "+EtcdctlVersion) {
		fail(t, fmt.Errorf("%w: %s is not etcdctl %sx (%s); run scripts/install-servers, or set TENURE_ETCDCTL_BIN",
			errMissing, p, EtcdctlVersion, strings.SplitN(string(out), "\n", 2)[0]))
	}
	return p
}
