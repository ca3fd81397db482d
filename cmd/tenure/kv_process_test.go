//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store/filestore"
)

// TestKVServeProcess runs `tenure kv serve` as an OS process, as an
// orchestrator would, and checks what it sees: the probes, the token, the
// metrics, the logs, and the exit status.
func TestKVServeProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tenure")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// A node on a directory, logging JSON, with a token: ready once it
	// leads; every line of its output is JSON; SIGTERM logs nothing above
	// INFO and exits 0.
	t.Run("probes token metrics and JSON logs", func(t *testing.T) {
		dir := t.TempDir()
		token := "s3cr3t-t0ken-0123456789"
		tokenFile := filepath.Join(dir, "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startKVProcess(t, bin, nil, "--store", "file://"+filepath.Join(dir, "data"), "--group", "p", "--id", "n1",
			"--log-format", "json", "--token-file", tokenFile)
		base := "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		if code, _ := httpGet(t, base+"/livez", ""); code != http.StatusOK {
			t.Errorf("/livez: %d; want 200", code)
		}
		for _, c := range []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"wrong token", token + "x", http.StatusUnauthorized},
			{"right token", token, http.StatusOK},
		} {
			if code, body := httpGet(t, base+"/v1/status", c.token); code != c.want {
				t.Errorf("/v1/status with %s: %d %s; want %d", c.name, code, body, c.want)
			}
		}
		if code, _ := httpGet(t, base+"/metrics", ""); code != http.StatusUnauthorized {
			t.Errorf("/metrics without the token: %d; want 401", code)
		}
		t.Setenv("TENURE_KV_TOKEN", token)
		code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", base)
		if code != 0 || out != "revision 1\n" {
			t.Fatalf("put with TENURE_KV_TOKEN: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		code, body := httpGet(t, base+"/metrics", token)
		for _, want := range []string{`tenure_store_requests_total{cond="if-absent",op="put",result="ok"}`, "tenure_store_request_duration_seconds", "tenure_rsm_"} {
			if code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("/metrics: %d, lacks %s", code, want)
			}
		}
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("exit %d after SIGTERM; want 0\n%s", code, p.output())
		}
		lines := p.jsonLines(t)
		var levels []string
		left := false
		for _, l := range lines {
			levels = append(levels, l["level"].(string))
			if l["level"] != "INFO" && l["level"] != "DEBUG" {
				t.Errorf("a line above INFO: %v", l)
			}
			left = left || l["msg"] == "left the group"
		}
		if !left {
			t.Errorf("no \"left the group\" line in %d lines (levels %v)", len(lines), levels)
		}
	})

	// A store that refuses connections: the process stays up, alive and
	// not ready, saying why; once the store answers it joins and is ready;
	// when the store goes away again it stops being ready.
	t.Run("store unreachable", func(t *testing.T) {
		minio := testutil.MinIO(t)
		proxy := testutil.NewProxy(t, strings.TrimPrefix(minio.Endpoint, "http://"))
		s3 := minio
		s3.Endpoint = "http://" + proxy.Addr()
		p := startKVProcess(t, bin, awsEnv(t, minio), "--store", s3.URL("kvops-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"+randomSuffix()),
			"--id", "n1", "--request-timeout", "3s", "--heartbeat", "500ms")
		base := "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusServiceUnavailable, "store unreachable")
		if code, _ := httpGet(t, base+"/livez", ""); code != http.StatusOK {
			t.Errorf("/livez while the store is unreachable: %d; want 200", code)
		}
		proxy.SetUp(t, true)
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		if code, out, errs := runCmd(t, "kv", "put", "k", "v", "--server", base); code != 0 || out != "revision 1\n" {
			t.Fatalf("put: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		proxy.SetUp(t, false)
		// A write makes the leader call the store.
		_, _, _ = runCmd(t, "kv", "put", "k", "w", "--server", base, "--timeout", "5s")
		waitProbe(t, p, base+"/readyz", http.StatusServiceUnavailable, "")
		if code, _ := httpGet(t, base+"/livez", ""); code != http.StatusOK {
			t.Errorf("/livez after the store went away: %d; want 200", code)
		}
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("exit %d after SIGTERM; want 0\n%s", code, p.output())
		}
	})

	// A node on a directory writes a new base every few snapshots, each
	// in a directory of its own under snap/; the old ones, deleted, leave
	// no directory behind, nor does anything else the node deleted. The
	// store's URL is the README's kind: file:// and a path.
	t.Run("base rewrites leave no directories behind", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		p := startKVProcess(t, bin, nil, "--store", "file://"+data, "--group", "p", "--id", "n1", "--snapshot-threshold", "2")
		base := "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		for i := range 300 {
			httpPut(t, fmt.Sprintf("%s/v1/kv/k%d", base, i%5), fmt.Sprintf("v%d", i))
		}
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("exit %d after SIGTERM; want 0\n%s", code, p.output())
		}
		bases, err := filepath.Glob(filepath.Join(data, "p.d", "snap.d", "b*.d"))
		if err != nil {
			t.Fatal(err)
		}
		// The first base is written at the first snapshot, at index 2 or
		// so; one written after 300 puts of 5 keys is a rewrite.
		rewritten := false
		for _, b := range bases {
			var index uint64
			if _, err := fmt.Sscanf(filepath.Base(b), "b%020d", &index); err == nil && index > 100 {
				rewritten = true
			}
		}
		if !rewritten {
			t.Fatalf("no base was written again after 300 puts (bases %v): nothing tested", bases)
		}
		emptyDirs := func() []string {
			var empty []string
			err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() || filepath.Base(path) == ".tmp" {
					return err
				}
				entries, err := os.ReadDir(path)
				if err == nil && len(entries) == 0 {
					empty = append(empty, strings.TrimPrefix(path, data))
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return empty
		}
		// The stop may come between a delete and the removal of its
		// directory: one may be left, not one per rewrite.
		if empty := emptyDirs(); len(empty) > 1 {
			t.Errorf("%d empty directories left in the store: %v", len(empty), empty)
		} else {
			t.Logf("empty directories at the stop: %v", empty)
		}
		// The next listing of snap/ (a leader's, at its next base) removes
		// what is left.
		st, err := filestore.New(data)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.ListKeys(t.Context(), "p/snap/", "", 1000); err != nil {
			t.Fatal(err)
		}
		if empty := emptyDirs(); len(empty) > 0 {
			t.Errorf("empty directories left after a listing: %v", empty)
		}
		// The log was packed (file://), and truncation emptied it but
		// for the entries after the last snapshot.
		head, err := os.ReadFile(filepath.Join(data, "p.d", "log.d"))
		if err != nil || !strings.HasPrefix(string(head), "tenure filestore pack") {
			t.Fatalf("the group's log.d is not a pack's head: %q, %v", head, err)
		}
		entries, err := st.ListKeys(t.Context(), "p/log/", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 || len(entries) > 20 {
			t.Errorf("%d log entries left after 300 puts at --snapshot-threshold 2; want a few", len(entries))
		}
	})

	// A node at its defaults whose group goes quiet writes a new base once
	// the segments reach 1.5 times the base; killed after it, the node
	// started again loads the base alone and serves every value.
	t.Run("a quiet group's base, loaded alone after SIGKILL", func(t *testing.T) {
		data := "file://" + filepath.Join(t.TempDir(), "data")
		args := []string{"--store", data, "--group", "p", "--id", "n1", "--snapshot-threshold", "5", "--log-format", "json"}
		p := startKVProcess(t, bin, nil, args...)
		base := "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		status := func(base string) rsm.Status {
			t.Helper()
			var st rsm.Status
			if code, body := httpGet(t, base+"/v1/status", ""); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
				t.Fatalf("status: %d %s", code, body)
			}
			return st
		}
		// Ten keys of 1 KiB overwritten until the segments are between
		// 1.5 and 3 times the base.
		value := func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("v", 1020) }
		last := map[int]string{}
		var st rsm.Status
		for i := 0; st.SnapshotBaseBytes == 0 || 2*st.SnapshotSegmentBytes < 3*st.SnapshotBaseBytes || st.SnapshotSegmentBytes >= 3*st.SnapshotBaseBytes; i++ {
			if i == 5000 {
				t.Fatalf("segments did not come to between 1.5 and 3 times the base: %+v", st)
			}
			last[i%10] = value(i)
			httpPut(t, fmt.Sprintf("%s/v1/kv/k%d", base, i%10), last[i%10])
			st = status(base)
		}
		// Quiet: the base comes after a whole idle period of 2 s. With
		// every entry already in a segment, it waits for one more.
		waited := time.Now()
		for nudged := false; ; time.Sleep(50 * time.Millisecond) {
			now := status(base)
			if now.SnapshotSegments == 0 && now.SnapshotIndex > st.SnapshotIndex {
				break
			}
			if time.Since(waited) > 20*time.Second {
				t.Fatalf("no base in a quiet group within 20 s: %+v; segments at 1.5 times the base then: %+v", now, st)
			}
			if !nudged && now.ApplyIndex == now.SnapshotIndex && time.Since(waited) > 5*time.Second {
				nudged = true
				last[0] = value(-1)
				httpPut(t, base+"/v1/kv/k0", last[0])
			}
		}
		p.stop(t, syscall.SIGKILL)

		p = startKVProcess(t, bin, nil, args...)
		base = "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		for k, v := range last {
			if code, out, errs := runCmd(t, "kv", "get", fmt.Sprintf("k%d", k), "--server", base); code != 0 || out != v {
				t.Fatalf("k%d after the restart: exit %d, %.12q, stderr %q; want %.12q", k, code, out, errs, v)
			}
		}
		p.stop(t, syscall.SIGTERM)
		loaded := 0
		for _, l := range p.jsonLines(t) {
			if l["msg"] != "snapshot loaded" {
				continue
			}
			loaded++
			if l["segment_bytes"] != float64(0) || l["base_bytes"] == float64(0) {
				t.Errorf("the restart loaded %v; want the base alone", l)
			}
		}
		if loaded != 1 {
			t.Errorf("%d \"snapshot loaded\" lines; want 1:\n%s", loaded, p.output())
		}
	})

	// An operator removes a segment of the packed log from between
	// others while the node is down (killed): the node restarted on the
	// store refuses the log as corrupt (docs/rsm.md, rule 12) and serves
	// nothing; reads and writes fail at once naming it, no key is
	// reported absent or with another value, and no put is acknowledged.
	t.Run("pack segment removed", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		args := []string{"--store", "file://" + data, "--group", "p", "--id", "n1", "--request-timeout", "2s"}
		p := startKVProcess(t, bin, nil, args...)
		base := "http://" + p.listen
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		value := func(i int) string { return strings.Repeat(fmt.Sprintf("%03d", i), 200<<10/3) }
		const puts = 60 // 12 MB: three segments of 4 MiB, under the snapshot threshold
		for i := range puts {
			httpPut(t, fmt.Sprintf("%s/v1/kv/k%d", base, i), value(i))
		}
		p.stop(t, syscall.SIGKILL)
		segs, err := filepath.Glob(filepath.Join(data, "p.d", "log.p", "*.s"))
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) < 3 {
			t.Fatalf("%d log segments after %d puts of 200 KB; want 3 or more to remove one between others", len(segs), puts)
		}
		removed := segs[len(segs)-2]
		saved, err := os.ReadFile(removed)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(removed); err != nil {
			t.Fatal(err)
		}

		p = startKVProcess(t, bin, nil, args...)
		base = "http://" + p.listen
		deadline := time.Now().Add(60 * time.Second)
		last := fmt.Sprintf("%s/v1/kv/k%d", base, puts-1)
		for !strings.Contains(p.output(), "corrupt pack") {
			if code, body := httpGetQuiet(last, ""); code == http.StatusOK || code == http.StatusNotFound {
				t.Fatalf("the restarted node answered a read with a log segment missing: %d %.80q\n%s", code, body, p.output())
			}
			if time.Now().After(deadline) {
				t.Fatalf("the restarted node did not report the missing segment within 60s:\n%s", p.output())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The refusal is recorded after the report: wait for it.
		waitProbe(t, p, base+"/v1/status", http.StatusOK, "corrupt pack")
		for _, i := range []int{0, puts / 2, puts - 1} {
			code, body := httpGetQuiet(fmt.Sprintf("%s/v1/kv/k%d", base, i), "")
			t.Logf("GET k%d: %d %s", i, code, body)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"corrupt"`) || !strings.Contains(body, "p/log/") {
				t.Errorf("GET k%d with a log segment missing: %d %.200s; want 503 corrupt, naming the log", i, code, body)
			}
		}
		if code, _, errs := runCmd(t, "kv", "put", "k0", "new", "--server", base, "--timeout", "3s"); code == 0 || !strings.Contains(errs, "corrupt") {
			t.Errorf("put with a log segment missing: exit %d, %q; want a failure naming the corrupt pack", code, errs)
		}
		if code, body := httpGetQuiet(base+"/readyz", ""); code == http.StatusOK || !strings.Contains(body, "corrupt") {
			t.Errorf("/readyz with a log segment missing: %d %s; want not ready, saying why", code, body)
		}
		// The segment put back, the node serves again, every put there.
		if err := os.WriteFile(removed, saved, 0o644); err != nil {
			t.Fatal(err)
		}
		waitProbe(t, p, base+"/readyz", http.StatusOK, "")
		for _, i := range []int{0, puts / 2, puts - 1} {
			code, out, errs := runCmd(t, "kv", "get", fmt.Sprintf("k%d", i), "--server", base)
			if code != 0 || out != value(i) {
				t.Errorf("get k%d once the segment is back: exit %d, %d bytes, %q", i, code, len(out), errs)
			}
		}
	})

	// A permanent store error exits at once with its message, as JSON
	// when the logs are.
	t.Run("permanent store error exits", func(t *testing.T) {
		minio := testutil.MinIO(t)
		missing := minio
		missing.Bucket = "no-such-bucket-" + randomSuffix()
		cmd := exec.Command(bin, "kv", "serve", "--store", missing.URL("x"), "--peer-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
		cmd.Env = append(os.Environ(), awsEnv(t, minio)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v; want status 1", err)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("kv serve on a missing bucket did not exit:\n%s%s", stdout.String(), stderr.String())
		}
		found := false
		for _, l := range parseJSONLines(t, stdout.String()+stderr.String()) {
			if l["level"] == "ERROR" && strings.Contains(l["err"].(string), "does not exist") {
				found = true
			}
		}
		if !found {
			t.Errorf("no JSON ERROR line saying the bucket does not exist:\n%s%s", stdout.String(), stderr.String())
		}
		if strings.Contains(stdout.String()+stderr.String(), `"msg":"serving"`) {
			t.Errorf("kv serve announced its API before failing on a missing bucket:\n%s%s", stdout.String(), stderr.String())
		}
	})
}

type kvProcess struct {
	cmd            *exec.Cmd
	listen         string
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

func (p *kvProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

// stop signals the process and returns its exit status.
func (p *kvProcess) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop within 60s of %v:\n%s", p.cmd.Args[1], sig, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// jsonLines parses every line of the stopped process's stdout and stderr.
func (p *kvProcess) jsonLines(t *testing.T) []map[string]any {
	t.Helper()
	<-p.done
	return parseJSONLines(t, p.output())
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startKVProcess starts kv serve on a free HTTP port (peers on another) and
// kills it at the end of the test if it still runs.
func startKVProcess(t *testing.T, bin string, env []string, args ...string) *kvProcess {
	t.Helper()
	listen := testutil.FreeAddr(t)
	return startProcess(t, bin, env, listen, append([]string{"kv", "serve", "--http", listen, "--peer-listen", "127.0.0.1:0", "--flush-interval", "5ms"}, args...)...)
}

// startProcess starts bin with args, its HTTP endpoint on listen, and
// kills it at the end of the test if it still runs.
func startProcess(t *testing.T, bin string, env []string, listen string, args ...string) *kvProcess {
	t.Helper()
	p := &kvProcess{listen: listen, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{&p.mu, &p.stdout}, lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitProbe polls url until it answers want with a body containing
// substr, and fails the test if the process exits or a minute passes.
func waitProbe(t *testing.T, p *kvProcess, url string, want int, substr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) while waiting for %s to answer %d:\n%s", p.cmd.Args[1], p.err, url, want, p.output())
		default:
		}
		code, body = httpGetQuiet(url, "")
		if code == want && strings.Contains(body, substr) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s answered %d %s; want %d with %q\n%s", url, code, body, want, substr, p.output())
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	code, body := httpGetQuiet(url, token)
	if code == 0 {
		t.Fatalf("GET %s: %s", url, body)
	}
	return code, body
}

// httpPut puts body at url and fails the test unless it answers 200.
func httpPut(t *testing.T, url, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: HTTP %d", url, resp.StatusCode)
	}
}

// httpGetQuiet returns the status and body, or 0 and the error.
func httpGetQuiet(url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func awsEnv(t *testing.T, s testutil.S3Server) []string {
	none := filepath.Join(t.TempDir(), "none")
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none}
}
