package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// EtcdctlVersion is the etcdctl the acceptance tests of tenure etcd
// serve run (scripts/install-servers builds it).
const EtcdctlVersion = "3.7."

// Etcdctl34Version is the second etcdctl they run: Debian's (apt
// package etcd-client), which scripts/install-servers installs.
const Etcdctl34Version = "3.4."

// Etcdctl34Path is where Debian's package puts etcdctl 3.4. Etcdctl 3.7
// comes first on PATH, so 3.4 is looked for here, not on PATH.
const Etcdctl34Path = "/usr/bin/etcdctl"

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

// Etcdctl34 returns the path of etcdctl 3.4: $TENURE_ETCDCTL34_BIN, or
// Etcdctl34Path if it is 3.4. Without one it skips t (fails it under
// TENURE_REQUIRE_SERVERS=1), saying how to install it; a
// $TENURE_ETCDCTL34_BIN that is not 3.4 fails t.
func Etcdctl34(t testing.TB) string {
	t.Helper()
	p, explicit := os.Getenv("TENURE_ETCDCTL34_BIN"), true
	if p == "" {
		p, explicit = Etcdctl34Path, false
	}
	if err := isExecutable(p); err != nil {
		if explicit {
			t.Fatalf("testutil: TENURE_ETCDCTL34_BIN=%s: %v", p, err)
		}
		fail(t, fmt.Errorf("%w: etcdctl 3.4 not found at %s: run scripts/install-servers (apt package etcd-client), or set TENURE_ETCDCTL34_BIN",
			errMissing, p))
		return ""
	}
	out, err := exec.Command(p, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", p, err, out)
	}
	if !strings.Contains(string(out), "etcdctl version: "+Etcdctl34Version) {
		err := fmt.Errorf("%s is not etcdctl %sx (%s); install Debian's etcd-client, or set TENURE_ETCDCTL34_BIN",
			p, Etcdctl34Version, strings.SplitN(string(out), "\n", 2)[0])
		if explicit {
			t.Fatal(err)
		}
		fail(t, fmt.Errorf("%w: %w", errMissing, err))
	}
	return p
}
