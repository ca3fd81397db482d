package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// runMainEnv makes this test binary act as the tenure command when set:
// a test that runs the command as a child process re-executes
// os.Executable(), which in a test is the test binary.
const runMainEnv = "TENURE_TEST_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits
	}
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	return runCmdCtx(t, t.Context(), args...)
}

func runCmdCtx(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// Locked: a command that runs a child (tenure run) writes its output
	// from the child's copying goroutine beside its own log.
	var out, errb lockedBuffer
	code = run(ctx, &env{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		mentions string
	}{
		{nil, 2, "Usage: tenure <command>"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help"}, 0, "store"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"store"}, 2, "tenure store probe URL"},
		{[]string{"store", "--help"}, 0, "tenure store probe URL"},
		{[]string{"store", "nope"}, 2, `unknown subcommand "nope"`},
		{[]string{"store", "probe"}, 2, "Usage: tenure store probe URL"},
		{[]string{"store", "probe", "--help"}, 0, "-json"},
		{[]string{"store", "probe", "mem://", "--rounds", "0"}, 2, "--rounds must be at least 1"},
		{[]string{"store", "probe", "mem://", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"version"}, 0, ", go1."},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, c.args...)
			if code != c.code {
				t.Errorf("exit code %d; want %d (stderr %q)", code, c.code, errs)
			}
			if !strings.Contains(out+errs, c.mentions) {
				t.Errorf("output does not mention %q:\nstdout: %s\nstderr: %s", c.mentions, out, errs)
			}
		})
	}
}

func TestProbeMem(t *testing.T) {
	code, out, errs := runCmd(t, "store", "probe", "mem://")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"create-if-absent             enforced", "compare-and-swap (If-Match)  enforced", "delete if match              enforced", "ok: this store enforces"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestProbeJSON(t *testing.T) {
	code, out, errs := runCmd(t, "store", "probe", "--rounds", "3", "mem://", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		OK             bool `json:"ok"`
		CreateIfAbsent bool `json:"createIfAbsentEnforced"`
		Rounds         int  `json:"rounds"`
		Get            struct {
			N int `json:"n"`
		} `json:"get"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if !res.OK || !res.CreateIfAbsent || res.Rounds != 3 || res.Get.N != 3 {
		t.Fatalf("unexpected result %+v from %s", res, out)
	}
}

func TestProbeBadURL(t *testing.T) {
	code, _, errs := runCmd(t, "store", "probe", "ftp://example/x")
	if code != 1 || !strings.Contains(errs, `unknown URL scheme "ftp"`) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

func TestGetAndList(t *testing.T) {
	code, _, errs := runCmd(t, "store", "get", "mem://", "missing")
	if code != 1 || !strings.Contains(errs, "not found") {
		t.Fatalf("get of a missing key: exit %d, stderr %q", code, errs)
	}
	code, out, errs := runCmd(t, "store", "list", "mem://")
	if code != 0 || !strings.HasPrefix(out, "KEY") {
		t.Fatalf("list: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// "--" ends the flags: what follows is positional, even if it looks like a
// flag; flags may still follow positional arguments before it.
func TestParseDoubleDash(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
		json bool
	}{
		{[]string{"put", "--", "neg", "-5"}, []string{"put", "neg", "-5"}, false},
		{[]string{"put", "k", "--json", "--", "--json"}, []string{"put", "k", "--json"}, true},
		{[]string{"--", "-x"}, []string{"-x"}, false},
		{[]string{"a", "--json", "b"}, []string{"a", "b"}, true},
	} {
		e := &env{stdout: &strings.Builder{}, stderr: &strings.Builder{}}
		fs := newFlags(e, "t", "t")
		j := fs.Bool("json", false, "")
		got, err := parse(fs, c.args)
		if err != nil || strings.Join(got, "|") != strings.Join(c.want, "|") || *j != c.json {
			t.Errorf("parse(%q) = %q, %v, json %v; want %q, json %v", c.args, got, err, *j, c.want, c.json)
		}
	}
}

// The top help names every store scheme the binary can open.
func TestHelpListsEveryScheme(t *testing.T) {
	_, out, _ := runCmd(t, "help")
	for _, s := range store.Schemes() {
		if _, ok := schemeHelp[s]; !ok {
			t.Errorf("scheme %q has no line in schemeHelp", s)
		}
		if !strings.Contains(out, s+"://") {
			t.Errorf("the help does not show %s:// URLs:\n%s", s, out)
		}
	}
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("the help does not list %q", c.name)
		}
	}
}
