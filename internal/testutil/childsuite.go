package testutil

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// RunChildSuite runs the top-level test named test of the current test
// binary in a child process, with env added to the environment, and holds
// the outcome of each of its direct subtests against known, which maps a
// subtest's name to the reason it is expected to fail (a defect of the
// server, not of the code under test).
//
// t fails for a subtest that fails and is not known, for a known one that
// passes (the defect was fixed: remove the entry), for a known one that did
// not run, and if the race detector fired in the child. A child whose test
// skipped skips t. A child process, because a subtest that fails marks every
// test above it failed: in one process, a known defect could not be told
// from a new one.
//
// The child's test must skip unless it finds env in its environment, so that
// a plain `go test` does not run it twice.
func RunChildSuite(t *testing.T, test string, env []string, known map[string]string) {
	t.Helper()
	args := []string{"-test.run=^" + regexp.QuoteMeta(test) + "$", "-test.v", "-test.count=1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	out, runErr := cmd.CombinedOutput()
	res := parseVerbose(out)

	switch res.result[test] {
	case "SKIP":
		t.Skipf("%s", strings.TrimSpace(res.log[test]))
	case "":
		t.Fatalf("the child process did not run %s (%v); its output:\n%s", test, runErr, out)
	}
	if bytes.Contains(out, []byte("WARNING: DATA RACE")) {
		t.Errorf("the race detector fired in the child process:\n%s", out)
	}
	cases := map[string]string{}
	for name, r := range res.result {
		if c, ok := strings.CutPrefix(name, test+"/"); ok && !strings.Contains(c, "/") {
			cases[c] = r
		}
	}
	if len(cases) == 0 {
		t.Fatalf("no subtests of %s ran (%v); output:\n%s", test, runErr, out)
	}
	names := make([]string, 0, len(cases))
	for c := range cases {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		reason, isKnown := known[c]
		switch {
		case cases[c] == "FAIL" && isKnown:
			t.Logf("%s: known defect: %s\n%s", c, reason, indent(res.caseLog(test+"/"+c)))
		case cases[c] == "FAIL":
			t.Errorf("%s fails:\n%s", c, indent(res.caseLog(test+"/"+c)))
		case isKnown:
			t.Errorf("%s now passes: remove it from the known defects and update the package documentation", c)
		default:
			t.Logf("%s: %s", c, strings.ToLower(cases[c]))
		}
	}
	for c := range known {
		if _, ran := cases[c]; !ran {
			t.Errorf("known defect %q names no subtest of %s", c, test)
		}
	}
}

// verbose is what parseVerbose reads from `go test -v` output: the result
// of each test and the lines it logged.
type verbose struct {
	result map[string]string // "PASS", "FAIL" or "SKIP"
	log    map[string]string
}

var (
	verboseMarker = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	verboseResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
)

func parseVerbose(out []byte) verbose {
	v := verbose{result: map[string]string{}, log: map[string]string{}}
	current := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if m := verboseMarker.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := verboseResult.FindStringSubmatch(line); m != nil {
			v.result[m[2]] = m[1]
			current = m[2]
			continue
		}
		if current != "" {
			v.log[current] += line + "\n"
		}
	}
	return v
}

// caseLog returns what a test and its subtests logged.
func (v verbose) caseLog(name string) string {
	var names []string
	for n := range v.log {
		if n == name || strings.HasPrefix(n, name+"/") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(v.log[n])
	}
	return b.String()
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
