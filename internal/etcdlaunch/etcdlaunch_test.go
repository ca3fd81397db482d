package etcdlaunch

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	if v, err := Version(script(t, "echo 'etcd Version: 3.5.17'")); err != nil || v != "3.5.17" {
		t.Errorf("3.5.17: got %q, %v", v, err)
	}
	if _, err := Version(script(t, "echo 'etcd Version: 3.3.25'")); err == nil || !strings.Contains(err.Error(), "3.4 or later") {
		t.Errorf("etcd 3.3: got %v, want a refusal naming 3.4", err)
	}
	if _, err := Version(script(t, "echo hello")); err == nil || !strings.Contains(err.Error(), "no version") {
		t.Errorf("no version line: got %v", err)
	}
}

func TestFind(t *testing.T) {
	bin := script(t, "true")
	t.Setenv(BinEnv, bin)
	if got, err := Find(""); err != nil || got != bin {
		t.Errorf("Find with %s set = %q, %v; want %q", BinEnv, got, err, bin)
	}
	// A wrong explicit setting is reported, not replaced by another etcd.
	t.Setenv(BinEnv, filepath.Join(t.TempDir(), "nope"))
	if _, err := Find(""); err == nil || errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), BinEnv) {
		t.Errorf("Find with a missing %s: got %v", BinEnv, err)
	}
	t.Setenv(BinEnv, "")
	dir := filepath.Dir(script(t, "true"))
	if got, err := Find(dir); err != nil || got != filepath.Join(dir, "etcd") {
		t.Errorf("Find(%s) = %q, %v", dir, got, err)
	}
}

func TestFindNewest(t *testing.T) {
	t.Setenv(BinEnv, "")
	dir := t.TempDir()
	for _, name := range []string{"etcd", "etcd-v3.6.9", "etcd-v3.7.3", "etcd-v3.10.0-rc.1", "etcd-v3.7.10.bak"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\ntrue\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Not executable: passed over.
	if err := os.WriteFile(filepath.Join(dir, "etcd-v3.9.0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindNewest(dir); err != nil || got != filepath.Join(dir, "etcd-v3.7.3") {
		t.Errorf("FindNewest = %q, %v; want the cache's etcd-v3.7.3", got, err)
	}
	// Find, which the tests use, still takes the plain etcd.
	if got, err := Find(dir); err != nil || got != filepath.Join(dir, "etcd") {
		t.Errorf("Find = %q, %v; want the cache's etcd", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd-v3.10.1"), []byte("#!/bin/sh\ntrue\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindNewest(dir); err != nil || got != filepath.Join(dir, "etcd-v3.10.1") {
		t.Errorf("FindNewest = %q, %v; want etcd-v3.10.1, newer than 3.7.3 by number", got, err)
	}
	// An explicit binary wins over the cache.
	bin := script(t, "true")
	t.Setenv(BinEnv, bin)
	if got, err := FindNewest(dir); err != nil || got != bin {
		t.Errorf("FindNewest with %s set = %q, %v; want %q", BinEnv, got, err, bin)
	}
	// No versioned binary: Find's answer.
	t.Setenv(BinEnv, "")
	plain := filepath.Dir(script(t, "true"))
	if got, err := FindNewest(plain); err != nil || got != filepath.Join(plain, "etcd") {
		t.Errorf("FindNewest(%s) = %q, %v; want its etcd", plain, got, err)
	}
}

func TestLaunch(t *testing.T) {
	bin, err := Find("")
	if err != nil {
		t.Skip(err)
	}
	v, err := Version(bin)
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	srv, err := Launch(bin, v, Options{ParentDir: parent})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(srv.Dir) != parent || srv.Proc.PID() <= 0 {
		t.Errorf("server %+v: not under %s", srv, parent)
	}
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(t.Context(), "k", "v"); err != nil {
		t.Errorf("put: %v", err)
	}
	c.Close()
	srv.Stop()
	if !srv.Proc.Exited() {
		t.Error("process still running after Stop")
	}
	if _, err := os.Stat(srv.Dir); !os.IsNotExist(err) {
		t.Errorf("%s not removed: %v", srv.Dir, err)
	}
	if conn, err := net.Dial("tcp", srv.Endpoint); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections", srv.Endpoint)
	}
}
