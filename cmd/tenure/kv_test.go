package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/bench"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// kvDirect applies to a kv machine in the calling goroutine: enough to
// test the commands against the real HTTP handler without a group.
type kvDirect struct {
	mu sync.Mutex
	m  *kv.Machine
}

func (d *kvDirect) Command(_ context.Context, _ string, cmd []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Apply(cmd), nil
}

func (d *kvDirect) Read(_ context.Context, _ string, q []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Query(q)
}

func newKVServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newKVHandler(t))
	t.Cleanup(srv.Close)
	return srv
}

func newKVHandler(t *testing.T) http.Handler {
	t.Helper()
	h, err := kv.NewHandler(kv.NewClient(&kvDirect{m: kv.New()}), kv.HandlerOptions{
		Status: func() rsm.Status {
			return rsm.Status{Group: "g", ID: "n1", State: "JOINED", Role: "LEADER", Term: 2, LeaderID: "n1", LeaderAddr: "127.0.0.1:1"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func runWithStdin(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), &env{stdout: &out, stderr: &errb, stdin: strings.NewReader(stdin)}, args)
	return code, out.String(), errb.String()
}

// TestKVClientCommands runs one script of commands against one server;
// each step sees the state the steps before it left.
func TestKVClientCommands(t *testing.T) {
	srv := newKVServer(t)
	addr := srv.URL
	steps := []struct {
		name           string
		stdin          string
		args           []string
		code           int
		stdout, stderr string // substrings; stdout "=" prefix means equal
	}{
		{"put", "", []string{"put", "a", "hello"}, 0, "=revision 1\n", ""},
		{"get prints the value exactly", "", []string{"get", "a"}, 0, "=hello", "revision 1 (created at 1), 5 bytes"},
		{"put from stdin", "line 1\nline 2\n", []string{"put", "b/c", "-"}, 0, "=revision 2\n", ""},
		{"get from stdin", "", []string{"get", "b/c"}, 0, "=line 1\nline 2\n", ""},
		{"flags after arguments", "", []string{"get", "a", "--json"}, 0, `"value": "aGVsbG8="`, ""},
		{"cas", "", []string{"cas", "a", "1", "world"}, 0, "=swapped: revision 3\n", ""},
		{"cas at a stale revision", "", []string{"cas", "a", "1", "again"}, 1, "", `cas failed: key "a" is at revision 3, not 1`},
		{"cas the value was kept", "", []string{"get", "a"}, 0, "=world", ""},
		{"cas create", "", []string{"cas", "new", "0", "v"}, 0, "=swapped: revision 4\n", ""},
		{"cas create of an existing key", "", []string{"cas", "new", "0", "v"}, 1, "", `key "new" is at revision 4, not 0`},
		{"cas of a missing key", "", []string{"cas", "nope", "3", "v"}, 1, "", `key "nope" does not exist (expected revision 3)`},
		{"cas with a bad revision", "", []string{"cas", "a", "x", "v"}, 1, "", `revision "x": want a number`},
		{"cas --json on a conflict prints and fails", "", []string{"cas", "a", "1", "v", "--json"}, 1, `"swapped": false`, "is at revision 3, not 1"},
		{"keys with slashes and dots", "", []string{"put", "x/../y//z", "dots"}, 0, "", ""},
		{"dot key", "", []string{"put", "..", "dotdot"}, 0, "", ""},
		{"dot key read back", "", []string{"get", ".."}, 0, "=dotdot", ""},
		{"list", "", []string{"list"}, 0, "KEY", ""},
		{"list prefix", "", []string{"list", "x/"}, 0, "x/../y//z", ""},
		{"list with values", "", []string{"list", "a", "--values"}, 0, `"world"`, ""},
		{"list --limit", "", []string{"list", "--limit", "1"}, 0, "..", "more keys follow"},
		{"list --json", "", []string{"list", "b/", "--json"}, 0, `"key": "b/c"`, ""},
		{"del", "", []string{"del", "a"}, 0, `=deleted "a" at revision 7` + "\n", ""},
		{"del of a missing key", "", []string{"del", "a"}, 1, "", `key "a" not found`},
		{"get of a missing key", "", []string{"get", "a"}, 1, "", `key "a" not found`},
		{"put of an empty key", "", []string{"put", "", "v"}, 1, "", "invalid key"},
		{"status", "", []string{"status"}, 0, "LEADER", ""},
		{"status --json", "", []string{"status", "--json"}, 0, `"role": "LEADER"`, ""},
		{"get without a key", "", []string{"get"}, 2, "", "tenure kv get: want KEY, got 0 argument(s)"},
		{"put without a value", "", []string{"put", "a"}, 2, "", "tenure kv put: want KEY VALUE|-, got 1 argument(s)"},
	}
	for _, s := range steps {
		args := append([]string{"kv"}, s.args...)
		args = append(args, "--server", addr)
		code, out, errs := runWithStdin(t, s.stdin, args...)
		if code != s.code {
			t.Errorf("%s: exit %d; want %d\nstdout: %s\nstderr: %s", s.name, code, s.code, out, errs)
			continue
		}
		if want, exact := strings.CutPrefix(s.stdout, "="); exact && out != want {
			t.Errorf("%s: stdout %q; want %q", s.name, out, want)
		} else if !exact && !strings.Contains(out, s.stdout) {
			t.Errorf("%s: stdout %q lacks %q", s.name, out, s.stdout)
		}
		if !strings.Contains(errs, s.stderr) {
			t.Errorf("%s: stderr %q lacks %q", s.name, errs, s.stderr)
		}
	}
}

func TestKVAddr(t *testing.T) {
	srv := newKVServer(t)
	t.Setenv("TENURE_KV_ADDR", strings.TrimPrefix(srv.URL, "http://"))
	if code, out, errs := runCmd(t, "kv", "put", "k", "v"); code != 0 || out != "revision 1\n" {
		t.Errorf("put with TENURE_KV_ADDR: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := runCmd(t, "kv", "get", "k", "--server", "ftp://x"); code != 1 || !strings.Contains(errs, "want http://HOST:PORT") {
		t.Errorf("bad --server: exit %d, stderr %q", code, errs)
	}
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if code, _, errs := runCmd(t, "kv", "get", "k", "--server", dead); code != 1 || !strings.Contains(errs, "cannot reach the kv server at http://"+dead) {
		t.Errorf("unreachable server: exit %d, stderr %q", code, errs)
	}
}

func TestKVUsage(t *testing.T) {
	dir := tempStore(t)
	cases := []struct {
		args     []string
		code     int
		mentions string
	}{
		{[]string{"kv"}, 2, "tenure kv serve"},
		{[]string{"kv", "--help"}, 0, "tenure kv cas KEY REV"},
		{[]string{"kv", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"kv", "serve"}, 2, "--store and --peer-listen are required"},
		{[]string{"kv", "serve", "--help"}, 0, "the library's default is S2C's 2s"},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", "127.0.0.1:0", "--flush-interval", "-1s"}, 1, "FlushInterval must not be negative"},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", ":0"}, 1, "--advertise"},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", "127.0.0.1:0", "--tls-cert", "x.pem"}, 1, "go together"},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", "127.0.0.1:0", "--max-value-size", "0"}, 1, "--max-value-size must be positive"},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", "127.0.0.1:0", "--gc-percent", "-2"}, 1, "--gc-percent must be -1"},
		{[]string{"kv", "list", "--limit", "0"}, 1, "--limit must be at least 1"},
		{[]string{"kv", "put", "a"}, 2, `tenure kv put: want KEY VALUE|-, got 1 argument(s) ["a"]`},
		{[]string{"kv", "get"}, 2, `tenure kv get: want KEY, got 0 argument(s) []`},
		{[]string{"kv", "status", "x"}, 2, `tenure kv status: takes no arguments, got ["x"]`},
		{[]string{"kv", "list", "a", "b"}, 2, `tenure kv list: want [PREFIX], got 2 argument(s) ["a" "b"]`},
		{[]string{"kv", "serve", "--store", dir, "--peer-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--group", "a/b"}, 1, `invalid group name "a/b"`},
		// Each kv serve is a process of its own: on mem:// each would run
		// a group of its own.
		{[]string{"kv", "serve", "--store", "mem://kv", "--peer-listen", "127.0.0.1:0"}, 1, "--store mem://kv: a mem:// store lives inside one process"},
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
			if strings.Contains(c.mentions, "argument") && strings.Count(errs, "\n") != 1 {
				t.Errorf("a wrong argument count is told in more than one line: %q", errs)
			}
			if c.code != 0 && strings.Contains(out, "HTTP API on") {
				t.Errorf("a start that failed announced its API: %s", out)
			}
		})
	}
}

// A 503 for a write that was not applied is retried; an unknown outcome
// is not, and says so.
func TestKVRetries(t *testing.T) {
	inner := newKVHandler(t)
	var calls atomic.Int32
	var mode atomic.Value
	mode.Store("busy")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case mode.Load() == "busy" && n == 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":"rsm: too many pending requests","code":"busy","outcome":"not_applied"}`)
		case mode.Load() == "unknown":
			w.WriteHeader(504)
			fmt.Fprint(w, `{"error":"kv: put \"k\": rsm: outcome unknown (outcome unknown: the write may or may not have been applied; read the key to find out)","code":"unknown_outcome","outcome":"unknown"}`)
		default:
			inner.ServeHTTP(w, r)
		}
	}))
	defer srv.Close()
	if code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", srv.URL); code != 0 || out != "revision 1\n" || calls.Load() != 2 {
		t.Errorf("put after a busy 503: exit %d, stdout %q, stderr %q, %d calls", code, out, errs, calls.Load())
	}
	mode.Store("unknown")
	calls.Store(0)
	if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", srv.URL); code != 1 || !strings.Contains(errs, "may or may not have been applied") || calls.Load() != 1 {
		t.Errorf("put with an unknown outcome: exit %d, stderr %q, %d calls; want exit 1, one call", code, errs, calls.Load())
	}
}

// startKVServe runs tenure kv serve with args until the returned stop is
// called (as SIGTERM would stop it), and returns its HTTP address.
func startKVServe(t *testing.T, args ...string) (addr string, stop func() (code int, output string)) {
	t.Helper()
	return startServe(t, regexp.MustCompile(`HTTP API on (https?://\S+),`), append([]string{"kv", "serve",
		"--http", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--flush-interval", "5ms", "--log-level", "warn"}, args...)...)
}

// startServe runs the serving command args until the returned stop is
// called (as SIGTERM would stop it), and returns the address re finds in
// its output.
func startServe(t *testing.T, re *regexp.Regexp, args ...string) (addr string, stop func() (code int, output string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, &env{stdout: &out, stderr: &errb}, args) }()
	name := strings.Join(args[:2], " ")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("%s exited with %d before serving:\nstdout: %s\nstderr: %s", name, code, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("%s printed no address:\nstdout: %s\nstderr: %s", name, out.String(), errb.String())
		}
	}
	stopped := false
	var code int
	stop = func() (int, string) {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s:\n%s%s", name, out.String(), errb.String())
			}
		}
		return code, out.String() + errb.String()
	}
	t.Cleanup(func() { stop() })
	return addr, stop
}

// TestKVServe runs a one-node group on a directory and uses it over HTTP,
// then stops it with its context (as SIGTERM does) and starts it again
// on the same store: the data is still there.
func TestKVServe(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--store", "file://" + dir, "--group", "test", "--id", "node-1"}
	addr, stop := startKVServe(t, args...)
	if code, out, errs := runCmd(t, "kv", "put", "greeting", "hello", "--server", addr); code != 0 || out != "revision 1\n" {
		t.Fatalf("put: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := runCmd(t, "kv", "cas", "greeting", "1", "hi", "--server", addr); code != 0 || out != "swapped: revision 2\n" {
		t.Fatalf("cas: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := runCmd(t, "kv", "get", "greeting", "--server", addr); code != 0 || out != "hi" {
		t.Fatalf("get: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs := runCmd(t, "kv", "status", "--server", addr, "--json")
	var st rsm.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Role != "LEADER" || st.ID != "node-1" || st.Group != "test" {
		t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, logs := stop(); code != 0 || !strings.Contains(logs, `left group "test"`) {
		t.Fatalf("kv serve exited with %d on cancel:\n%s", code, logs)
	}

	addr, _ = startKVServe(t, args...)
	if code, out, errs := runCmd(t, "kv", "get", "greeting", "--server", addr); code != 0 || out != "hi" {
		t.Fatalf("get after a restart: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestKVStatusSnapshotSizes: kv status prints the sizes of the node's
// snapshot, its base and its segments, as the JSON status gives them:
// what a cold start reads.
func TestKVStatusSnapshotSizes(t *testing.T) {
	addr, _ := startKVServe(t, "--store", tempStore(t), "--snapshot-threshold", "2")
	var st rsm.Status
	for i := 0; i < 200 && st.SnapshotSegments == 0; i++ {
		if code, _, errs := runCmd(t, "kv", "put", fmt.Sprintf("k%03d", i), "value", "--server", addr); code != 0 {
			t.Fatalf("put: exit %d, stderr %q", code, errs)
		}
		code, out, errs := runCmd(t, "kv", "status", "--server", addr, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status --json: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	}
	if st.SnapshotBaseBytes == 0 || st.SnapshotSegments == 0 || st.SnapshotSegmentBytes == 0 {
		t.Fatalf("status after 200 puts at --snapshot-threshold 2: %+v; want a base and segments", st)
	}
	// The text form, read between two JSON ones that name the same
	// snapshot (the last put's may still be being written).
	var out string
	var again rsm.Status
	for try := 0; ; try++ {
		code, text, errs := runCmd(t, "kv", "status", "--server", addr)
		_, jout, _ := runCmd(t, "kv", "status", "--server", addr, "--json")
		if code != 0 || json.Unmarshal([]byte(jout), &again) != nil {
			t.Fatalf("status: exit %d, stdout %q, stderr %q", code, text, errs)
		}
		out = text
		if again.SnapshotIndex == st.SnapshotIndex || try == 50 {
			break
		}
		st = again
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{
		"peer auth          peer keys\n", // kv serve's default
		fmt.Sprintf("snapshot index     %d\n", again.SnapshotIndex),
		fmt.Sprintf("snapshot base      %d bytes\n", again.SnapshotBaseBytes),
		fmt.Sprintf("snapshot segments  %d, %d bytes\n", again.SnapshotSegments, again.SnapshotSegmentBytes),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kv status lacks %q:\n%s", want, out)
		}
	}
}

// TestKVServeTwoNodes runs two nodes with mutual TLS between them: a
// write through either is read through the other.
func TestKVServeTwoNodes(t *testing.T) {
	ca, err := tlsutil.NewCA("kv test")
	if err != nil {
		t.Fatal(err)
	}
	store := "file://" + t.TempDir()
	var addrs []string
	for _, id := range []string{"a", "b"} {
		dir := t.TempDir()
		if _, err := ca.WriteFiles(dir, "node", "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		addr, _ := startKVServe(t, "--store", store, "--group", "two", "--id", id, "--tls-dir", dir)
		addrs = append(addrs, addr)
	}
	for i, addr := range addrs {
		key, value := fmt.Sprintf("k%d", i), fmt.Sprintf("through node %d", i)
		if code, _, errs := runCmd(t, "kv", "put", key, value, "--server", addr); code != 0 {
			t.Fatalf("put through node %d: exit %d, stderr %q", i, code, errs)
		}
		other := addrs[1-i]
		if code, out, errs := runCmd(t, "kv", "get", key, "--server", other); code != 0 || out != value {
			t.Fatalf("get through the other node: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	}
	var roles map[string]bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		roles = map[string]bool{}
		for _, addr := range addrs {
			code, out, errs := runCmd(t, "kv", "status", "--server", addr, "--json")
			var st rsm.Status
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
				t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, errs)
			}
			roles[st.Role] = true
		}
		if roles["LEADER"] && roles["FOLLOWER"] {
			return
		}
	}
	t.Errorf("roles %v; want a leader and a follower", roles)
}

// TestDemoKV runs the demo's key-value part on its own: a leader killed
// mid-write, a cold restart, every acknowledged write read back.
func TestKVPipelineDefault(t *testing.T) {
	for url, want := range map[string]int{
		"file:///var/lib/tenure":        kvFilePipelineDepth,
		"file://./data":                 kvFilePipelineDepth,
		bench.CountURL("file:///tmp/x"): kvFilePipelineDepth,
		"s3://bucket/prefix":            rsm.DefaultPipelineDepth,
		"mem://":                        rsm.DefaultPipelineDepth,
		bench.CountURL("s3://bucket/p?endpoint=http://h"): rsm.DefaultPipelineDepth,
		"::not a url": rsm.DefaultPipelineDepth,
	} {
		if got := kvPipelineDepth(url); got != want {
			t.Errorf("kvPipelineDepth(%q) = %d, want %d", url, got, want)
		}
	}
}

func TestKVGC(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	env := func(k string) (string, bool) { return "200", k == "GOGC" }
	for _, c := range []struct {
		name    string
		given   bool
		flag    int
		lookup  func(string) (string, bool)
		want    int
		applied bool
	}{
		{"default: set as the state grows", false, 0, noEnv, 0, true},
		{"GOGC in the environment wins over the default", false, 0, env, 0, false},
		{"the flag wins over GOGC", true, 50, env, 50, true},
		{"the flag, off", true, -1, noEnv, -1, true},
	} {
		got, applied := kvGC(c.given, c.flag, c.lookup)
		if got != c.want || applied != c.applied {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, applied, c.want, c.applied)
		}
	}
}
