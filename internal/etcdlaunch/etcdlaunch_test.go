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
