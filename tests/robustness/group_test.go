package robustness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/internal/testutil"
)

// buildTenure builds the tenure binary from this checkout.
func buildTenure(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tenure")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// group is three tenure etcd serve processes on MinIO, each reaching the
// store through its own proxy, so that one node's store can be cut off.
type group struct {
	t       *testing.T
	bin     string
	env     []string
	urls    []string // each node's store URL, through its proxy
	store   string   // the store URL, direct
	eps     []string // client endpoints, host:port
	proxies []*testutil.Proxy
	nodes   []*process
	began   time.Time
}

// groupName is the group etcd serve runs by default.
const groupName = "etcd"

func startGroup(t *testing.T, bin string, minio testutil.S3Server, prefix string) *group {
	g := &group{t: t, bin: bin, store: minio.URL(prefix), began: time.Now(),
		env: []string{"AWS_ACCESS_KEY_ID=" + minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + minio.SecretKey, "AWS_SESSION_TOKEN=", "AWS_PROFILE="}}
	for range 3 {
		p := testutil.NewProxy(t, minio.Endpoint[len("http://"):])
		p.SetUp(t, true)
		s3 := minio
		s3.Endpoint = "http://" + p.Addr()
		g.proxies = append(g.proxies, p)
		g.urls = append(g.urls, s3.URL(prefix))
		g.eps = append(g.eps, testutil.FreeAddr(t))
	}
	g.nodes = make([]*process, 3)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, p := range g.nodes {
			if p != nil {
				out := p.output()
				t.Logf("n%d's last output:\n%s", i, out[max(0, len(out)-4000):])
			}
		}
	})
	for i := range g.nodes {
		g.restart(i)
	}
	return g
}

// restart starts node i and waits until it is ready. The snapshot
// threshold keeps the whole run's log in the store, for rsm.Replay.
func (g *group) restart(i int) {
	g.t.Helper()
	p := startProcess(g.t, g.bin, g.env, "etcd", "serve", "--store", g.urls[i],
		"--id", fmt.Sprintf("n%d", i), "--peer-listen", "127.0.0.1:0", "--peer-plaintext",
		"--listen-client-urls", "http://"+g.eps[i], "--flush-interval", "5ms", "--heartbeat", "250ms",
		"--request-timeout", "3s", "--snapshot-threshold", "100000000", "--log-level", "warn")
	g.nodes[i] = p
	waitReady(g.t, p, "http://"+g.eps[i]+"/readyz")
}

func (g *group) logf(format string, args ...any) {
	g.t.Logf("%v: %s", time.Since(g.began).Round(time.Millisecond), fmt.Sprintf(format, args...))
}

// leader returns the node that leads by its own word and that of
// another node, waiting for one.
func (g *group) leader() int {
	g.t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: g.eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		g.t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		self := map[uint64]int{}
		votes := map[uint64]int{}
		for i, ep := range g.eps {
			ctx, cancel := context.WithTimeout(g.t.Context(), time.Second)
			st, err := c.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader != 0 {
				self[st.Header.MemberId] = i
				votes[st.Leader]++
			}
		}
		for id, n := range votes {
			if i, ok := self[id]; ok && n >= 2 {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.t.Fatal("no node led within 60 s")
	return -1
}

// waitNewLeader waits until a node other than old leads.
func (g *group) waitNewLeader(old int) int {
	g.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if l := g.leader(); l != old {
			g.logf("n%d leads", l)
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.t.Fatalf("n%d still leads after 60 s", old)
	return -1
}

// process is one tenure process; killed at the end of the test if it
// still runs.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *process) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// kill sends SIGKILL and waits for the process to end.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

func startProcess(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
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
			p.signal(syscall.SIGCONT)
			p.kill()
		}
	})
	return p
}

// waitReady polls url until it answers 200; it fails the test if the
// process exits or a minute passes.
func waitReady(t *testing.T, p *process, url string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%v exited (%v) before %s was ready:\n%s", p.cmd.Args, p.err, url, p.output())
		default:
		}
		if resp, err := c.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 60 s:\n%s", url, p.output())
}
