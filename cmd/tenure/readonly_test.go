//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// dirTree lists every path under dir with its type.
func dirTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v", p, d.Type()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seedStore makes a store in dir holding a lock record and another key, with
// no .locks or .tmp (as a copied or read-only store may have).
func seedStore(t *testing.T, dir string) {
	t.Helper()
	s, err := store.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"leaderID":"n1","leaderAddr":"","lastUpdated":"2026-11-21T10:30:45Z","term":3,"leaseMillis":15000,"nonce":"a93e","released":false}`
	for k, v := range map[string]string{"leader.json": rec, "data/x": "hello"} {
		if _, err := s.Put(context.Background(), k, []byte(v), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	for _, d := range []string{".locks", ".tmp"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadOnlyCommandsOnMissingDirectory(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "typo", "sub")
	for _, args := range [][]string{
		{"status", "file://" + missing + "/leader.json"},
		{"status", "--json", "file://" + missing + "/leader.json"},
		{"store", "get", "file://" + missing, "leader.json"},
		{"store", "list", "file://" + missing},
	} {
		code, out, errs := runCmd(t, args...)
		if code != 1 || !strings.Contains(errs, missing+" does not exist") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 saying %s does not exist", args, code, out, errs, missing)
		}
		if strings.Contains(out, "nobody has led") {
			t.Errorf("%q reports an empty lock in a directory that does not exist: %q", args, out)
		}
	}
	if got := dirTree(t, parent); len(got) != 1 {
		t.Fatalf("read-only commands created %v", got[1:])
	}
}

func TestReadOnlyCommandsWriteNothing(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	before := dirTree(t, dir)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"status", "file://" + dir + "/leader.json"}, 0, "n1"},
		{[]string{"status", "file://" + dir + "/other.json"}, 0, "nobody has led yet"},
		{[]string{"store", "get", "file://" + dir, "data/x"}, 0, "hello"},
		{[]string{"store", "get", "file://" + dir, "data/missing"}, 1, `the key "data/missing" is absent from file://` + dir},
		{[]string{"store", "list", "file://" + dir}, 0, `"data/x"`},
		{[]string{"store", "list", "file://" + dir, "no/such/prefix/"}, 0, "KEY"},
	} {
		code, out, errs := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.says) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, out, errs, c.code, c.says)
		}
	}
	if after := dirTree(t, dir); !slices.Equal(before, after) {
		t.Fatalf("read-only commands changed the store's directory:\nbefore %v\nafter  %v", before, after)
	}
}

// TestReadOnlyCommandsUnwritableDirectory runs the binary on a store its
// user cannot write: as root, the binary runs as nobody, since root would
// bypass the permissions.
func TestReadOnlyCommandsUnwritableDirectory(t *testing.T) {
	// MkdirTemp, not t.TempDir: the other user must reach it.
	base, err := os.MkdirTemp("", "tenure-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(base, 0o755); os.RemoveAll(base) })
	bin := filepath.Join(base, "tenure")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(base, "store")
	seedStore(t, dir)
	if err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o444)
		if d.IsDir() || p == bin {
			mode = 0o555
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatal(err)
	}
	before := dirTree(t, dir)
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+base)
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		return cmd
	}
	// The directory is really unwritable for the user the binary runs as.
	if out, err := command("store", "probe", "file://"+dir, "--rounds", "1").CombinedOutput(); err == nil {
		t.Fatalf("store probe could write to the directory, so this test proves nothing:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"status", "file://" + dir + "/leader.json"}, "n1"},
		{[]string{"store", "get", "file://" + dir, "data/x"}, "hello"},
		{[]string{"store", "list", "file://" + dir, "data/"}, `"data/x"`},
	} {
		out, err := command(c.args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.says) {
			t.Errorf("%q on an unwritable store: %v\n%s", c.args, err, out)
		}
	}
	code := -1
	out, err := command("store", "get", "file://"+dir, "nope").CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if code != 1 || !strings.Contains(string(out), "is absent") {
		t.Errorf("store get of a missing key: exit %d (%v)\n%s", code, err, out)
	}
	if after := dirTree(t, dir); !slices.Equal(before, after) {
		t.Fatalf("read-only commands changed the store's directory:\nbefore %v\nafter  %v", before, after)
	}
}

// TestStoreProbeLeavesNothing: tenure store probe removes its scratch keys.
func TestStoreProbeLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if code, out, errs := runCmd(t, "store", "probe", "file://"+dir, "--rounds", "2"); code != 0 {
		t.Fatalf("probe: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCmd(t, "store", "list", "file://"+dir)
	if code != 0 || strings.TrimSpace(out) != "KEY  SIZE  VERSION" {
		t.Fatalf("after probe, list: exit %d, stdout %q, stderr %q; want no keys", code, out, errs)
	}
}
