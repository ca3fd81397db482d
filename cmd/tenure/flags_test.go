package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
)

// flagCommands are the commands the flag table of docs/cli.md covers: every
// command with flags but the benchmarks (docs/BENCHMARKS.md).
var flagCommands = []string{
	"elect", "run", "shards", "status", "lock repair", "store probe", "store get", "store list",
	"kv serve", "etcd serve", "kv get", "kv put", "kv del", "kv cas", "kv list", "kv status", "demo", "version",
}

// helpFlags returns the flags command's --help lists.
func helpFlags(t *testing.T, command string) []string {
	t.Helper()
	code, out, errs := runCmd(t, append(strings.Fields(command), "--help")...)
	if code != 0 {
		t.Fatalf("tenure %s --help: exit %d\n%s", command, code, errs)
	}
	var flags []string
	re := regexp.MustCompile(`^  -([a-z0-9-]+)`)
	sc := bufio.NewScanner(strings.NewReader(out + errs))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// flagTable reads the flag table of docs/cli.md: for each flag, the
// commands the table names it for.
func flagTable(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- flag table -->\n")
	if !ok {
		t.Fatal("docs/cli.md has no <!-- flag table --> marker")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	table = strings.TrimRight(table, "\n")
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)[^`]*` \\| ([^|]+) \\|")
	out := map[string][]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/cli.md flag table: a row not of the form | `--flag ARG` | commands | meaning |: %q", line)
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/cli.md flag table: --%s has two rows; one flag, one meaning", m[1])
		}
		for _, c := range strings.Split(m[2], ",") {
			out[m[1]] = append(out[m[1]], strings.TrimSpace(c))
		}
	}
	return out
}

// TestFlagTable: every flag a command's --help lists is in the
// table of docs/cli.md under that command, and every flag the table names for a
// command is one its --help lists.
func TestFlagTable(t *testing.T) {
	table := flagTable(t)
	inHelp := map[string]map[string]bool{}
	for _, c := range flagCommands {
		inHelp[c] = map[string]bool{}
		for _, f := range helpFlags(t, c) {
			inHelp[c][f] = true
			if !slices.Contains(table[f], c) {
				t.Errorf("tenure %s --help lists --%s; the flag table of docs/cli.md does not name it for %s (it has %q)", c, f, c, table[f])
			}
		}
	}
	var names []string
	for f := range table {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		for _, c := range table[f] {
			switch {
			case inHelp[c] == nil:
				t.Errorf("the flag table of docs/cli.md names --%s for %q, which is not a command the table covers", f, c)
			case !inHelp[c][f]:
				t.Errorf("the flag table of docs/cli.md names --%s for %s; tenure %s --help does not list it", f, c, c)
			}
		}
	}
}

// The spellings of earlier releases still work, with a one-line warning
// naming the new one.
func TestDeprecatedFlags(t *testing.T) {
	srv := httptest.NewServer(newKVHandler(t))
	defer srv.Close()
	code, out, errs := runCmd(t, "kv", "put", "k", "v", "--addr", srv.URL)
	if code != 0 || out != "revision 1\n" || errs != "tenure kv put: warning: --addr is deprecated; use --server\n" {
		t.Errorf("kv put --addr: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := runCmd(t, "kv", "put", "k", "v", "--server", srv.URL); code != 0 || errs != "" {
		t.Errorf("kv put --server: exit %d, stderr %q; want no warning", code, errs)
	}
	// kv serve's --peer is --peer-listen: the address is checked as such.
	code, _, errs = runCmd(t, "kv", "serve", "--store", tempStore(t), "--peer", ":0", "--http", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errs, "--peer is deprecated; use --peer-listen") || !strings.Contains(errs, "--peer-listen :0 listens on every interface") {
		t.Errorf("kv serve --peer :0: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCmd(t, "lock", "repair", "--term-floor", "5", "--lease", "0s", "mem://x/leader.json")
	if code != 2 || !strings.Contains(errs, "--lease is deprecated; use --leader-timeout") || !strings.Contains(errs, "--leader-timeout must be positive") {
		t.Errorf("lock repair --lease 0s: exit %d, stderr %q", code, errs)
	}
}

// Every command that prints data prints it as JSON with --json.
func TestJSONOutputs(t *testing.T) {
	url := uniqueMem(t, "json")
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "a/k", []byte("v1"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Key, Version string
		Size         int
		Value        []byte
		Items        []struct {
			Key  string
			Size int64
		}
	}
	decode := func(name, out string) {
		t.Helper()
		got.Items = nil
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s --json: %v\n%s", name, err, out)
		}
	}
	code, out, errs := runCmd(t, "store", "get", url, "a/k", "--json")
	if decode("store get", out); code != 0 || got.Key != "a/k" || string(got.Value) != "v1" || got.Size != 2 || got.Version == "" || errs != "" {
		t.Errorf("store get --json: exit %d, %+v, stderr %q", code, got, errs)
	}
	code, out, _ = runCmd(t, "store", "list", url, "a/", "--json")
	if decode("store list", out); code != 0 || len(got.Items) != 1 || got.Items[0].Key != "a/k" || got.Items[0].Size != 2 {
		t.Errorf("store list --json: exit %d, %+v", code, got)
	}
	code, out, _ = runCmd(t, "store", "list", url, "none/", "--json")
	if code != 0 || !strings.Contains(out, `"items": []`) {
		t.Errorf("store list --json of nothing: exit %d, %s", code, out)
	}
	code, out, _ = runCmd(t, "version", "--json")
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !strings.Contains(v.Version, "go1.") {
		t.Errorf("version --json: exit %d, %s", code, out)
	}
}

// tenure shards --json prints one JSON line per change, and a last one
// once it has released every shard.
func TestShardsJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: out, stderr: errb},
			[]string{"shards", "--store", tempStore(t), "--shards", "3", "--lease", "1s", "--renew", "250ms", "--log-level", "error", "--json"})
	}()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && !strings.Contains(out.String(), `"held":["shard-0000","shard-0001","shard-0002"]`); {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last shardsChange
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("a line that is not JSON: %q", l)
		}
	}
	if !strings.Contains(out.String(), `"held":["shard-0000","shard-0001","shard-0002"]`) || !last.Stopped || len(last.Held) != 0 {
		t.Fatalf("output:\n%s", out.String())
	}
}
