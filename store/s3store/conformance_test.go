package s3store_test

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

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/s3store"
)

// knownDefects are conformance cases that a server fails through no fault
// of the driver, each with its cause as found in the server's source.
// TestConformance fails on any other failure, and on a known defect that
// passes (the server was fixed: remove the entry, and update doc.go).
var knownDefects = map[string]map[string]string{
	"minio": {
		"Delete": "MinIO ignores If-Match on DeleteObject: a delete on a stale version succeeds " +
			"(cmd/object-handlers.go DeleteObjectHandler; delOpts in cmd/object-api-options.go reads no conditional header)",
		"ErrorsAreWrapped": "same cause: a conditional delete of a missing key succeeds, so there is no error to inspect",
		"Keys": "MinIO refuses keys with empty, \".\" or \"..\" path segments (400 XMinioInvalidObjectName, " +
			"XMinioInvalidResourceName) and path segments over 255 bytes",
		"ListOrder": "MinIO accepts both \"a\" and \"a/b\" but its listing does not descend below an object's name " +
			"(cmd/metacache-walk.go), so \"a/b\" is missing from List",
		"ListPaging": "same cause as ListOrder: the suite writes \"log\" beside \"log/...\"",
	},
	"versitygw": {
		"Delete": "versitygw answers a conditional delete of a missing key with 204 " +
			"(backend/posix/posix.go DeleteObject: evalPreconditions returns nil when the file does not exist)",
		"ErrorsAreWrapped": "same cause as Delete",
		"Keys": "posix backend: a key ending in \"/\" is a directory and cannot hold data (400 DirectoryObjectContainsData); " +
			"\"..\" and path segments over 255 bytes are refused; \"//\", \"/./\" and \"/../\" are collapsed by the " +
			"file system, so the object is stored and listed under another name",
		"ListOrder":  "posix backend: a key cannot also be a prefix of another (\"a\" and \"a/b\": 409 ObjectParentIsFile)",
		"ListPaging": "same cause as ListOrder: \"log\" beside \"log/...\" (409 ExistingObjectIsDirectory)",
	},
}

// conformanceChild names the server that TestConformanceRun runs the suite
// against, in a child process started by TestConformance.
const conformanceChild = "TENURE_S3STORE_CONFORMANCE_SERVER"

// TestConformance runs the drivertest suite against each server in a child
// process and compares the outcome of every case with knownDefects. A child
// process, because a case that fails marks every test above it failed: in
// one process, a known server defect could not be told from a new one.
func TestConformance(t *testing.T) {
	if os.Getenv(conformanceChild) != "" {
		t.Skip("this is the child process")
	}
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"-test.run=^TestConformanceRun$", "-test.v", "-test.count=1"}
			if d, ok := t.Deadline(); ok {
				args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
			cmd.Env = append(os.Environ(), conformanceChild+"="+server.name)
			out, runErr := cmd.CombinedOutput()
			res := parseVerbose(out)

			switch res.result["TestConformanceRun"] {
			case "SKIP":
				t.Skipf("%s", strings.TrimSpace(res.log["TestConformanceRun"]))
			case "":
				t.Fatalf("the child process did not run the suite (%v); its output:\n%s", runErr, out)
			}
			if bytes.Contains(out, []byte("WARNING: DATA RACE")) {
				t.Errorf("the race detector fired in the child process:\n%s", out)
			}
			cases := map[string]string{}
			for name, r := range res.result {
				if c, ok := strings.CutPrefix(name, "TestConformanceRun/"); ok && !strings.Contains(c, "/") {
					cases[c] = r
				}
			}
			if len(cases) == 0 {
				t.Fatalf("no conformance cases ran (%v); output:\n%s", runErr, out)
			}
			known := knownDefects[server.name]
			names := make([]string, 0, len(cases))
			for c := range cases {
				names = append(names, c)
			}
			slices.Sort(names)
			for _, c := range names {
				reason, isKnown := known[c]
				switch {
				case cases[c] == "FAIL" && isKnown:
					t.Logf("%s: known %s defect: %s\n%s", c, server.name, reason, indent(res.caseLog("TestConformanceRun/"+c)))
				case cases[c] == "FAIL":
					t.Errorf("%s fails on %s:\n%s", c, server.name, indent(res.caseLog("TestConformanceRun/"+c)))
				case isKnown:
					t.Errorf("%s now passes on %s: remove it from knownDefects and update doc.go", c, server.name)
				default:
					t.Logf("%s: %s", c, strings.ToLower(cases[c]))
				}
			}
			for c := range known {
				if _, ran := cases[c]; !ran {
					t.Errorf("known defect %q names no case of the suite", c)
				}
			}
		})
	}
}

// TestConformanceRun is the suite itself, run by TestConformance in a child
// process.
func TestConformanceRun(t *testing.T) {
	name := os.Getenv(conformanceChild)
	if name == "" {
		t.Skip("run by TestConformance in a child process")
	}
	for _, server := range servers {
		if server.name == name {
			open := openOn(server.start(t))
			drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store { return open(t) }, drivertest.Options{
				MaxKeyLen: s3store.MaxObjectKeyLen - prefixLen,
			})
			return
		}
	}
	t.Fatalf("%s=%q names no server", conformanceChild, name)
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

// caseLog returns what a case and its subtests logged.
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
