package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Etcd3Version is the version of the npm etcd3 package (the Node.js etcd
// client) that the acceptance test of tenure etcd serve runs. Its
// package.json and package-lock.json, which pin it and its dependencies,
// are in cmd/tenure/testdata/etcd3; scripts/install-servers installs them
// with npm ci.
const Etcd3Version = "1.1.2"

// Etcd3Dir is where scripts/install-servers installs the npm etcd3
// package: ${TENURE_CACHE:-$HOME/.cache/tenure}/etcd3.
func Etcd3Dir() string {
	if d := os.Getenv("TENURE_CACHE"); d != "" {
		return filepath.Join(d, "etcd3")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "tenure", "etcd3")
}

// Etcd3 returns the path of node and the node_modules directory that holds
// the npm etcd3 package at Etcd3Version, for NODE_PATH. The directory is
// $TENURE_ETCD3_MODULES, or Etcd3Dir's node_modules. It skips t if node
// or the package is missing, or the package is another version (fails it
// under TENURE_REQUIRE_SERVERS=1); a $TENURE_ETCD3_MODULES without the
// package, or with another version, fails t.
func Etcd3(t testing.TB) (node, modules string) {
	t.Helper()
	node, modules, err := findEtcd3()
	if err != nil {
		fail(t, err)
		return "", ""
	}
	return node, modules
}

// findEtcd3 is Etcd3's search; its error wraps errMissing when the test
// is to be skipped.
func findEtcd3() (node, modules string, err error) {
	const envVar = "TENURE_ETCD3_MODULES"
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("%w: node (Node.js), which runs the etcd3 client, is not on PATH", errMissing)
	}
	modules, explicit := os.Getenv(envVar), true
	if modules == "" {
		modules, explicit = filepath.Join(Etcd3Dir(), "node_modules"), false
	}
	pj := filepath.Join(modules, "etcd3", "package.json")
	b, err := os.ReadFile(pj)
	if err != nil {
		if explicit {
			return "", "", fmt.Errorf("testutil: %s=%s: %w", envVar, modules, err)
		}
		return "", "", fmt.Errorf("%w: the npm etcd3 package is not in %s: run scripts/install-servers (or set %s)", errMissing, modules, envVar)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", "", fmt.Errorf("testutil: %s: %w", pj, err)
	}
	if pkg.Version != Etcd3Version {
		err := fmt.Errorf("the npm etcd3 package in %s is %s, not %s: run scripts/install-servers (or set %s)", modules, pkg.Version, Etcd3Version, envVar)
		if explicit {
			return "", "", fmt.Errorf("testutil: %w", err)
		}
		return "", "", fmt.Errorf("%w: %w", errMissing, err)
	}
	return node, modules, nil
}
