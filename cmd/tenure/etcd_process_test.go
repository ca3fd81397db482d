package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
)

// etcdctlRunner runs etcdctl against a group's client URLs.
type etcdctlRunner struct {
	t         *testing.T
	bin       string
	endpoints string
}

// exec runs etcdctl with args and stdin, and returns its stdout; it fails
// the test if etcdctl fails, unless fails is set: then it must fail, and
// run returns its stderr.
func (c etcdctlRunner) exec(stdin string, fails bool, args ...string) string {
	c.t.Helper()
	out, errs := c.execBoth(stdin, fails, args...)
	if fails {
		return errs
	}
	return out
}

// execBoth is exec returning both stdout and stderr.
func (c etcdctlRunner) execBoth(stdin string, fails bool, args ...string) (stdout, stderr string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--endpoints", c.endpoints, "--command-timeout", "30s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	switch {
	case fails && err == nil:
		c.t.Fatalf("etcdctl %s succeeded; want it to fail:\n%s", strings.Join(args, " "), out.String())
	case !fails && err != nil:
		c.t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func (c etcdctlRunner) run(args ...string) string {
	c.t.Helper()
	return c.exec("", false, args...)
}

// json runs etcdctl with -w json and decodes its output into v.
func (c etcdctlRunner) json(v any, args ...string) {
	c.t.Helper()
	out := c.run(append(args, "-w", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("etcdctl %s -w json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// watch runs etcdctl watch with args until it has printed n lines, and
// returns them.
func (c etcdctlRunner) watch(n int, args ...string) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--endpoints", c.endpoints, "watch"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for len(lines) < n && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	cancel()
	_, _ = io.Copy(io.Discard, stdout)
	_ = cmd.Wait()
	if len(lines) < n {
		c.t.Fatalf("etcdctl watch %s printed %d lines, want %d: %q\nstderr: %s", strings.Join(args, " "), len(lines), n, lines, errb.String())
	}
	return lines
}

type etcdctlKV struct {
	Key            []byte `json:"key"`
	Value          []byte `json:"value"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
}

type etcdctlGet struct {
	Header struct {
		Revision int64  `json:"revision"`
		MemberID uint64 `json:"member_id"`
	} `json:"header"`
	Kvs   []etcdctlKV `json:"kvs"`
	More  bool        `json:"more"`
	Count int64       `json:"count"`
}

// TestEtcdctl runs etcdctl 3.7, then Debian's etcdctl 3.4, against three
// tenure etcd serve processes sharing a MinIO bucket: the acceptance test
// of the etcd front end.
func TestEtcdctl(t *testing.T) {
	bin := buildTenure(t)
	minio := testutil.MinIO(t)
	for _, v := range []struct {
		name string
		find func(testing.TB) string
	}{
		{"3.7", testutil.Etcdctl},
		{"3.4", testutil.Etcdctl34},
	} {
		t.Run(v.name, func(t *testing.T) { testEtcdctl(t, bin, minio, v.find(t), v.name) })
	}
}

// testEtcdctl is TestEtcdctl's scenario on the tenure at bin, with the
// etcdctl at ctl of version (major.minor); where 3.4 prints differently
// it checks 3.4's output.
func testEtcdctl(t *testing.T, bin string, minio testutil.S3Server, ctl, version string) {
	env, storeURL := awsEnv(t, minio), minio.URL("etcdctl-"+randomSuffix())
	var eps []string
	var procs []*kvProcess
	for i := range 3 {
		client := testutil.FreeAddr(t)
		p := startProcess(t, bin, env, client, "etcd", "serve", "--store", storeURL,
			"--id", fmt.Sprintf("n%d", i), "--peer-listen", "127.0.0.1:0", "--peer-plaintext",
			"--listen-client-urls", "http://"+client, "--flush-interval", "5ms", "--log-level", "warn")
		waitProbe(t, p, "http://"+client+"/readyz", http.StatusOK, "")
		eps, procs = append(eps, client), append(procs, p)
	}
	c := etcdctlRunner{t: t, bin: ctl, endpoints: strings.Join(eps, ",")}
	v34 := version == "3.4"

	for i, kv := range [][2]string{{"foo/a", "3"}, {"foo/b", "1"}, {"foo/c", "2"}, {"zed", "z"}} {
		if out := c.run("put", kv[0], kv[1]); out != "OK\n" {
			t.Fatalf("put %d: %q", i, out)
		}
	}
	var g etcdctlGet
	c.json(&g, "get", "foo/", "--prefix")
	if g.Count != 3 || len(g.Kvs) != 3 || g.Header.Revision != 5 || g.Header.MemberID == 0 || string(g.Kvs[0].Key) != "foo/a" || g.Kvs[0].CreateRevision != 2 || g.Kvs[0].Version != 1 {
		t.Fatalf("get --prefix: %+v", g)
	}
	c.json(&g, "get", "foo/", "--prefix", "--limit", "2")
	if !g.More || g.Count != 3 || len(g.Kvs) != 2 {
		t.Fatalf("get --limit 2: %+v", g)
	}
	if v34 { // 3.4 has no --count-only
		if out := c.run("get", "foo/", "--prefix", "--keys-only", "-w", "fields"); !strings.Contains(out, `"Count" : 3`) || !strings.Contains(out, `"Key"`) {
			t.Fatalf("get --keys-only -w fields: %q", out)
		}
	} else if out := c.run("get", "foo/", "--prefix", "--count-only", "-w", "fields"); !strings.Contains(out, `"Count" : 3`) || strings.Contains(out, `"Key"`) {
		t.Fatalf("get --count-only: %q", out)
	}
	if out := c.run("get", "foo/", "--prefix", "--sort-by", "VALUE", "--order", "ASCEND", "--keys-only"); out != "foo/b\n\nfoo/c\n\nfoo/a\n\n" {
		t.Fatalf("get --sort-by VALUE --order ASCEND --keys-only: %q", out)
	}
	if out := c.run("get", "foo/", "--prefix", "--sort-by", "MODIFY", "--order", "DESCEND", "--print-value-only"); out != "2\n1\n3\n" {
		t.Fatalf("get --sort-by MODIFY --order DESCEND --print-value-only: %q", out)
	}
	if out := c.run("get", "foo/c", "--from-key", "--keys-only"); out != "foo/c\n\nzed\n\n" {
		t.Fatalf("get --from-key: %q", out)
	}
	if out := c.run("put", "foo/a", "new"); out != "OK\n" {
		t.Fatal(out)
	}
	if out := c.run("get", "foo/a", "--rev", "2", "--print-value-only"); out != "3\n" {
		t.Fatalf("get --rev 2: %q", out)
	}

	// Txn from stdin: the optimistic update Kubernetes makes.
	txn := "mod(\"foo/a\") = \"6\"\n\nput foo/a txn\n\nget foo/a\n\n"
	if out := c.exec(txn, false, "txn", "-i"); !strings.Contains(out, "SUCCESS\n\nOK\n") {
		t.Fatalf("txn -i: %q", out)
	}
	if out := c.exec(txn, false, "txn", "-i"); !strings.Contains(out, "FAILURE\n\nfoo/a\ntxn\n") {
		t.Fatalf("failing txn -i: %q", out)
	}

	// Watch from revision 1: the history, each put after the first with
	// the value before it.
	lines := c.watch(13, "--rev", "1", "--prefix", "foo/a", "--prev-kv")
	if got, want := strings.Join(lines, "|"), "PUT|foo/a|3|PUT|foo/a|3|foo/a|new|PUT|foo/a|new|foo/a|txn"; got != want {
		t.Fatalf("watch --rev 1 --prev-kv: %q, want %q", got, want)
	}

	// Delete with the previous values.
	if out := c.run("del", "foo/", "--prefix", "--prev-kv"); !strings.HasPrefix(out, "3\nfoo/a\ntxn\nfoo/b\n1\nfoo/c\n2\n") {
		t.Fatalf("del --prefix --prev-kv: %q", out)
	}

	// Leases.
	out := c.run("lease", "grant", "60")
	m := regexp.MustCompile(`^lease ([0-9a-f]+) granted with TTL\(60s\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lease grant: %q", out)
	}
	id := m[1]
	c.run("put", "leased", "v", "--lease", id)
	if out := c.run("lease", "timetolive", id, "--keys"); !strings.Contains(out, "granted with TTL(60s)") || !strings.Contains(out, "attached keys([leased])") {
		t.Fatalf("lease timetolive --keys: %q", out)
	}
	if out := c.run("lease", "keep-alive", "--once", id); !strings.Contains(out, "lease "+id+" keepalived with TTL(60)") {
		t.Fatalf("lease keep-alive --once: %q", out)
	}
	if out := c.run("lease", "list"); !strings.Contains(out, id) {
		t.Fatalf("lease list: %q", out)
	}
	if out := c.run("lease", "revoke", id); !strings.Contains(out, "lease "+id+" revoked") {
		t.Fatalf("lease revoke: %q", out)
	}
	if out := c.run("get", "leased"); out != "" {
		t.Fatalf("the revoked lease's key: %q", out)
	}

	// Compaction: a read below it fails with etcd's error.
	c.json(&g, "get", "zed")
	rev := g.Header.Revision
	if out := c.run("compaction", strconv.FormatInt(rev, 10)); out != fmt.Sprintf("compacted revision %d\n", rev) {
		t.Fatalf("compaction: %q", out)
	}
	if errs := c.exec("", true, "get", "zed", "--rev", "1"); !strings.Contains(errs, "required revision has been compacted") {
		t.Fatalf("get below the compaction: %q", errs)
	}

	// Endpoints and members: every node reports the same leader and the
	// version Kubernetes accepts.
	var st []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Version  string `json:"version"`
			Leader   uint64 `json:"leader"`
			RaftTerm uint64 `json:"raftTerm"`
			DbSize   int64  `json:"dbSize"`
		}
	}
	c.json(&st, "endpoint", "status")
	if len(st) != 3 {
		t.Fatalf("endpoint status: %+v", st)
	}
	for _, s := range st {
		if s.Status.Version != "3.7.0" || s.Status.Leader == 0 || s.Status.Leader != st[0].Status.Leader || s.Status.RaftTerm == 0 || s.Status.DbSize < 1 {
			t.Fatalf("endpoint status: %+v", st)
		}
	}
	if out := c.run("endpoint", "status", "-w", "table"); !strings.Contains(out, "3.7.0") {
		t.Fatalf("endpoint status -w table: %q", out)
	}
	// 3.4 prints the health of each endpoint on stderr.
	if out, errs := c.execBoth("", false, "endpoint", "health"); strings.Count(out+errs, "is healthy") != 3 {
		t.Fatalf("endpoint health: %q, stderr %q", out, errs)
	}
	var hashes []struct {
		Endpoint string
		HashKV   struct {
			Hash         uint32 `json:"hash"`
			HashRevision int64  `json:"hash_revision"`
		}
	}
	c.json(&hashes, "endpoint", "hashkv")
	// 3.4's HashKVResponse has no hash_revision: its nodes' hashes are
	// compared instead.
	if len(hashes) != 3 || (hashes[0].HashKV.HashRevision == 0) != v34 {
		t.Fatalf("endpoint hashkv: %+v", hashes)
	}
	if v34 && (hashes[0].HashKV.Hash == 0 || hashes[1].HashKV.Hash != hashes[0].HashKV.Hash || hashes[2].HashKV.Hash != hashes[0].HashKV.Hash) {
		t.Fatalf("endpoint hashkv: %+v", hashes)
	}
	var ml struct {
		Members []struct {
			ID         uint64   `json:"ID"`
			Name       string   `json:"name"`
			ClientURLs []string `json:"clientURLs"`
			PeerURLs   []string `json:"peerURLs"`
		} `json:"members"`
	}
	c.json(&ml, "member", "list")
	if len(ml.Members) == 0 || ml.Members[0].ID == 0 || len(ml.Members[0].ClientURLs) != 1 {
		t.Fatalf("member list: %+v", ml)
	}
	// The nodes run --peer-plaintext: their peer URLs say http://, not
	// the https:// of TLS peers.
	peers := 0
	for _, m := range ml.Members {
		for _, u := range m.PeerURLs {
			if !strings.HasPrefix(u, "http://127.0.0.1:") {
				t.Errorf("member %s has peer URL %s; its peers speak plaintext on loopback", m.Name, u)
			}
			peers++
		}
	}
	if peers == 0 {
		t.Errorf("member list gives no peer URL: %+v", ml)
	}

	// The leader stops (SIGTERM: it steps down); etcdctl goes on through
	// the others.
	leader := -1
	for _, s := range st {
		if s.Status.Header.MemberID == s.Status.Leader {
			leader = slices.Index(eps, s.Endpoint)
		}
	}
	if leader < 0 {
		t.Fatalf("no endpoint is the leader: %+v", st)
	}
	if code := procs[leader].stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("the leader exited with %d:\n%s", code, procs[leader].output())
	}
	c.endpoints = strings.Join(slices.Delete(slices.Clone(eps), leader, leader+1), ",")
	if out := c.run("put", "after", "failover"); out != "OK\n" {
		t.Fatalf("put after the leader stopped: %q", out)
	}
	if out := c.run("get", "after", "--print-value-only"); out != "failover\n" {
		t.Fatalf("get after the leader stopped: %q", out)
	}
}
