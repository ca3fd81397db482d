//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/internal/testutil"
)

// buildTenure builds the tenure command for tests that run it as an OS
// process.
func buildTenure(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// opsCommand is one long-running command, as an orchestrator starts it:
// its arguments given the store URL (a file:// directory or an s3:// URL)
// and the --http address, and the role /status shows once ready.
type opsCommand struct {
	name string
	args func(storeURL, http string) []string
	role string
	// ready is what the command prints once SIGTERM stops it cleanly, if
	// that comes after it serves: run's child, once its trap is set (a
	// SIGTERM before would end the child by the signal, status 143).
	ready string
}

// opsTimings are short timings for the long-running commands' tests; the
// logs stay at info, for the tests that read them.
var opsElectTimings = append(append([]string(nil), fastFlags...), "--log-level", "info")

// withKey is the lock URL of key in the store at storeURL.
func withKey(storeURL, key string) string {
	base, query, ok := strings.Cut(storeURL, "?")
	if !ok {
		return base + "/" + key
	}
	return base + "/" + key + "?" + query
}

// childTrapSet is what run's child prints once its SIGTERM trap is set.
const childTrapSet = "child: trap set"

// waitReady waits until p printed c.ready, if c has one, or fails t when
// p exits or a minute passes.
func waitReady(t *testing.T, p *kvProcess, c opsCommand) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); c.ready != "" && !strings.Contains(p.output(), c.ready); time.Sleep(10 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before printing %q:\n%s", c.name, p.err, c.ready, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within a minute:\n%s", c.name, c.ready, p.output())
		}
	}
}

func opsCommands() []opsCommand {
	return []opsCommand{
		{"elect", func(u, h string) []string {
			return append([]string{"elect", "--lock", withKey(u, "leader.json"), "--id", "m1", "--http", h}, opsElectTimings...)
		}, "leader", ""},
		{"run", func(u, h string) []string {
			args := append([]string{"run", "--lock", withKey(u, "leader.json"), "--id", "m1", "--http", h}, opsElectTimings...)
			return append(args, "--", "sh", "-c", "trap 'exit 0' TERM; echo '"+childTrapSet+"'; while :; do sleep 0.05; done")
		}, "leader", childTrapSet},
		{"shards", func(u, h string) []string {
			return []string{"shards", "--store", u, "--shards", "4", "--id", "m1", "--lease", "2s", "--renew", "500ms", "--http", h}
		}, "member", ""},
	}
}

// TestLongRunningProbes runs each long-running command as a process on a
// directory and checks its HTTP endpoint: /livez, /readyz once it serves,
// /status in the shared shape, /metrics in Prometheus's text format, 404
// elsewhere; and that SIGTERM stops it cleanly, logging nothing above
// INFO.
func TestLongRunningProbes(t *testing.T) {
	bin := buildTenure(t)
	kvServe := opsCommand{"kv serve", func(u, h string) []string {
		return []string{"kv", "serve", "--store", u, "--http", h, "--peer-listen", "127.0.0.1:0", "--id", "m1"}
	}, "leader", ""}
	for _, c := range append(opsCommands(), kvServe) {
		t.Run(c.name, func(t *testing.T) {
			dir := "file://" + filepath.Join(t.TempDir(), "store")
			listen := testutil.FreeAddr(t)
			p := startProcess(t, bin, nil, listen, c.args(dir, listen)...)
			base := "http://" + listen
			waitProbe(t, p, base+"/readyz", http.StatusOK, `"ready":true`)
			if code, body := httpGet(t, base+"/livez", ""); code != http.StatusOK {
				t.Errorf("/livez: %d %s; want 200", code, body)
			}
			if code, body := httpGet(t, base+"/healthz", ""); code != http.StatusOK || !strings.Contains(body, `"ready":true`) {
				t.Errorf("/healthz (the alias of /readyz): %d %s; want 200", code, body)
			}
			code, body := httpGet(t, base+"/status", "")
			var st opsserver.Status
			if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
				t.Fatalf("/status: %d %s (%v)", code, body, err)
			}
			if st.Command != c.name || !st.Ready || st.Role != c.role || st.ID != "m1" {
				t.Errorf("/status: %+v; want command %s, ready, role %s, id m1", st, c.name, c.role)
			}
			if (st.Election != nil) != (c.name == "elect" || c.name == "run") || (st.Shards != nil) != (c.name == "shards") || (st.Node != nil) != (c.name == "kv serve") {
				t.Errorf("/status: %s lacks its own view: %s", c.name, body)
			}
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			var metrics bytes.Buffer
			_, _ = metrics.ReadFrom(resp.Body)
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain") ||
				!strings.Contains(metrics.String(), "# TYPE tenure_store_requests_total counter") || !strings.Contains(metrics.String(), "# TYPE go_goroutines gauge") {
				t.Errorf("/metrics: %d %s, not Prometheus text with the store's metrics:\n%.500s", resp.StatusCode, ct, metrics.String())
			}
			if own := map[string]string{"elect": "tenure_election_is_leader", "run": "tenure_election_is_leader", "shards": "tenure_lease_shards_held",
				"kv serve": "tenure_rsm_"}[c.name]; !strings.Contains(metrics.String(), own) {
				t.Errorf("/metrics of %s lacks %s", c.name, own)
			}
			if code, body := httpGet(t, base+"/no-such-path", ""); code != http.StatusNotFound {
				t.Errorf("/no-such-path: %d %.200s; want 404", code, body)
			}
			waitReady(t, p, c)
			if code := p.stop(t, syscall.SIGTERM); code != 0 {
				t.Errorf("exit %d after SIGTERM; want 0\n%s", code, p.output())
			}
			assertNoWarnings(t, p.output())
		})
	}
}

// assertNoWarnings fails t for every log line above INFO, text or JSON.
func assertNoWarnings(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") ||
			strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("a line above INFO: %s", line)
		}
	}
}

// TestLongRunningStoreUnreachable: a long-running command whose store
// refuses connections at start stays up, alive and not ready, saying
// why; it becomes ready once the store answers; when the store freezes
// (accepts connections and never answers) it stops being ready; SIGTERM
// still stops it.
func TestLongRunningStoreUnreachable(t *testing.T) {
	bin := buildTenure(t)
	minio := testutil.MinIO(t)
	for _, c := range opsCommands() {
		t.Run(c.name, func(t *testing.T) {
			proxy := testutil.NewProxy(t, strings.TrimPrefix(minio.Endpoint, "http://"))
			s3 := minio
			s3.Endpoint = "http://" + proxy.Addr()
			url := s3.URL("ops-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + randomSuffix())
			listen := testutil.FreeAddr(t)
			p := startProcess(t, bin, awsEnv(t, minio), listen, c.args(url, listen)...)
			base := "http://" + listen
			waitProbe(t, p, base+"/readyz", http.StatusServiceUnavailable, "store unreachable")
			if code, _ := httpGet(t, base+"/livez", ""); code != http.StatusOK {
				t.Errorf("/livez while the store is unreachable: %d; want 200", code)
			}
			proxy.SetUp(t, true)
			waitProbe(t, p, base+"/readyz", http.StatusOK, `"ready":true`)
			proxy.BlackHole(t)
			waitProbe(t, p, base+"/readyz", http.StatusServiceUnavailable, "store unreachable")
			if code, body := httpGet(t, base+"/healthz", ""); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz while the store is frozen: %d %s; want 503", code, body)
			}
			if code, _ := httpGet(t, base+"/livez", ""); code != http.StatusOK {
				t.Errorf("/livez while the store is frozen: %d; want 200", code)
			}
			waitReady(t, p, c)
			if code := p.stop(t, syscall.SIGTERM); code != 0 {
				t.Errorf("exit %d after SIGTERM; want 0\n%s", code, p.output())
			}
		})
	}
}

// TestLongRunningPermanentStoreError: a store that answers no (a missing
// bucket) or a URL no store can open ends each long-running command at
// once, with the store's message.
func TestLongRunningPermanentStoreError(t *testing.T) {
	bin := buildTenure(t)
	minio := testutil.MinIO(t)
	missing := minio
	missing.Bucket = "no-such-bucket-" + randomSuffix()
	wrongKey := minio
	wrongKey.SecretKey = "not-the-secret-key"
	for _, c := range opsCommands() {
		for _, u := range []struct {
			name, url, says string
			creds           testutil.S3Server
		}{
			{"missing bucket", missing.URL("x"), "does not exist", minio},
			{"wrong credentials", minio.URL("x"), "permanent", wrongKey},
			{"unknown scheme", "ftp://example/x", `unknown URL scheme "ftp"`, minio},
		} {
			t.Run(c.name+"/"+u.name, func(t *testing.T) {
				listen := testutil.FreeAddr(t)
				p := startProcess(t, bin, awsEnv(t, u.creds), listen, c.args(u.url, listen)...)
				select {
				case <-p.done:
				case <-time.After(60 * time.Second):
					t.Fatalf("%s on %s did not exit:\n%s", c.name, u.name, p.output())
				}
				if code := p.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(p.output(), u.says) {
					t.Errorf("exit %d; want 1 and a message saying %q:\n%s", code, u.says, p.output())
				}
			})
		}
	}
}
