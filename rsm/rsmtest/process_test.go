//go:build linux

package rsmtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// The OS-process linearizability test: three `tenure kv serve` processes
// on one MinIO bucket, clients over HTTP, while the parent SIGKILLs the
// leader, SIGSTOPs nodes and restarts them. At the end every process is
// killed and restarted cold, and every key is read back: those reads are
// part of the history porcupine checks, so a lost acknowledged write fails
// the test.

type kvProc struct {
	id, peer, http string
	cmd            *exec.Cmd
	log            string // file the process writes its output to
	stopped        bool
}

type procCluster struct {
	t     *testing.T
	bin   string
	store string
	dir   string
	procs []*kvProc
}

func buildTenure(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/tenure-io/tenure/cmd/tenure")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tenure: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (c *procCluster) start(i int) {
	c.t.Helper()
	p := c.procs[i]
	p.log = filepath.Join(c.dir, p.id+".log")
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(c.bin, "kv", "serve", "--store", c.store, "--group", "proc",
		"--id", p.id, "--peer-listen", p.peer, "--http", p.http,
		"--flush-interval", "5ms", "--heartbeat", "100ms", "--max-missed-heartbeats", "5",
		"--leadership-delay", "100ms", "--request-timeout", "3s", "--snapshot-threshold", "50",
		"--log-level", "warn")
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = os.Environ()
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.id, err)
	}
	p.stopped = false
}

func (c *procCluster) kill(i int) {
	p := c.procs[i]
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (c *procCluster) pause(i int, on bool) {
	p := c.procs[i]
	if p.cmd == nil {
		return
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	_ = p.cmd.Process.Signal(sig)
	p.stopped = on
}

// leader asks every running node for its status.
func (c *procCluster) leader(client *http.Client) int {
	for i, p := range c.procs {
		if p.cmd == nil || p.stopped {
			continue
		}
		resp, err := client.Get("http://" + p.http + "/v1/status")
		if err != nil {
			continue
		}
		var s struct{ Role, State string }
		_ = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if s.Role == "LEADER" && s.State == "JOINED" {
			return i
		}
	}
	return -1
}

func (c *procCluster) waitLeader(client *http.Client, d time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := c.leader(client); l >= 0 {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range c.procs {
		c.t.Logf("%s log:\n%s", p.id, tail(p.log))
	}
	c.t.Fatalf("no leader within %v", d)
	return -1
}

func tail(file string) string {
	b, _ := os.ReadFile(file)
	s := string(b)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// kvCall performs one operation over HTTP and records it.
type kvClient struct {
	id    int
	http  *http.Client
	base  string
	h     *rsmtest.History
	revs  map[string]uint64
	acked *atomic.Int64
	seq   *atomic.Int64
}

type httpOutcome int

const (
	outOK httpOutcome = iota
	outNotApplied
	outUnknown
	outApplied // applied, result lost
)

func classify(status int, body []byte) httpOutcome {
	var e struct {
		Outcome string `json:"outcome"`
	}
	_ = json.Unmarshal(body, &e)
	switch e.Outcome {
	case "not_applied":
		return outNotApplied
	case "applied":
		return outApplied
	}
	return outUnknown
}

func (c *kvClient) do(method, path string, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (c *kvClient) get(key string) {
	call := c.h.Now()
	status, body, err := c.do("GET", "/v1/kv/"+url.PathEscape(key)+"?encoding=text", nil)
	ret := c.h.Now()
	in := rsmtest.KVInput{Op: rsmtest.KVGet, Key: key}
	switch {
	case err != nil:
		return
	case status == http.StatusNotFound:
		c.h.Add(c.id, in, call, rsmtest.KVOutput{}, ret, nil)
	case status == http.StatusOK:
		var r struct {
			Value          string `json:"value"`
			Revision       uint64 `json:"revision"`
			CreateRevision uint64 `json:"createRevision"`
		}
		if json.Unmarshal(body, &r) != nil {
			return
		}
		c.revs[key] = r.Revision
		c.h.Add(c.id, in, call, rsmtest.KVOutput{Found: true, Value: r.Value, Rev: r.Revision, Create: r.CreateRevision}, ret, nil)
	}
}

func (c *kvClient) write(in rsmtest.KVInput) {
	var method, path string
	var body io.Reader
	switch in.Op {
	case rsmtest.KVPut:
		method, path, body = "PUT", "/v1/kv/"+url.PathEscape(in.Key), strings.NewReader(in.Value)
	case rsmtest.KVDelete:
		method, path = "DELETE", "/v1/kv/"+url.PathEscape(in.Key)
	case rsmtest.KVCAS:
		b, _ := json.Marshal(map[string]any{"key": in.Key, "expectRevision": in.Expect, "value": in.Value})
		method, path, body = "POST", "/v1/cas?encoding=text", bytes.NewReader(b)
	}
	call := c.h.Now()
	status, resp, err := c.do(method, path, body)
	ret := c.h.Now()
	var r struct {
		Revision uint64 `json:"revision"`
		Deleted  bool   `json:"deleted"`
		Swapped  bool   `json:"swapped"`
	}
	if err != nil {
		c.h.Add(c.id, in, call, rsmtest.KVOutput{Unknown: true}, rsmtest.Pending, "transport: "+err.Error())
		return
	}
	_ = json.Unmarshal(resp, &r)
	switch {
	case status == http.StatusOK:
		out := rsmtest.KVOutput{Rev: r.Revision}
		switch in.Op {
		case rsmtest.KVDelete:
			out.Found = r.Deleted
		case rsmtest.KVCAS:
			out.Found = r.Swapped
		}
		c.acked.Add(1)
		c.h.Add(c.id, in, call, out, ret, nil)
	case in.Op == rsmtest.KVDelete && status == http.StatusNotFound:
		c.acked.Add(1)
		c.h.Add(c.id, in, call, rsmtest.KVOutput{Found: false, Rev: r.Revision}, ret, nil)
	case in.Op == rsmtest.KVCAS && status == http.StatusConflict:
		c.acked.Add(1)
		c.h.Add(c.id, in, call, rsmtest.KVOutput{Found: false, Rev: r.Revision}, ret, nil)
	default:
		switch classify(status, resp) {
		case outNotApplied:
		case outApplied:
			c.h.Add(c.id, in, call, rsmtest.KVOutput{Unknown: true}, ret, string(resp))
		default:
			c.h.Add(c.id, in, call, rsmtest.KVOutput{Unknown: true}, rsmtest.Pending, string(resp))
		}
	}
}

func (c *kvClient) step(rng *rand.Rand, keys []string) {
	key := keys[rng.IntN(len(keys))]
	value := fmt.Sprintf("c%d-%d", c.id, c.seq.Add(1))
	switch r := rng.IntN(100); {
	case r < 35:
		c.get(key)
	case r < 70:
		c.write(rsmtest.KVInput{Op: rsmtest.KVPut, Key: key, Value: value})
	case r < 85:
		c.write(rsmtest.KVInput{Op: rsmtest.KVCAS, Key: key, Value: value, Expect: c.revs[key]})
	default:
		c.write(rsmtest.KVInput{Op: rsmtest.KVDelete, Key: key})
	}
}

func TestLinearizableProcessesOnMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tenure and runs processes for about half a minute")
	}
	srv := testutil.MinIO(t)
	srv.SetEnv(t)
	linearizableProcesses(t, srv.URL(fmt.Sprintf("rsm-proc-%d", time.Now().UnixNano())))
}

// TestLinearizableProcessesOnFile is the same on a file:// store, where
// the log is packed: a leader killed or stopped in the middle of an
// append leaves a torn frame, or holds the pack's lock, and the others
// carry on from what the pack holds.
func TestLinearizableProcessesOnFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tenure and runs processes for about half a minute")
	}
	dir := t.TempDir()
	linearizableProcesses(t, "file://"+dir)
	head, err := os.ReadFile(filepath.Join(dir, "proc.d", "log.d"))
	if err != nil || !strings.HasPrefix(string(head), "tenure filestore pack") {
		t.Fatalf("the group's log was not packed: %q, %v", head, err)
	}
}

// linearizableProcesses runs three kv serve processes on store under
// faults, then checks the history (TestLinearizableProcessesOnMinIO).
func linearizableProcesses(t *testing.T, storeURL string) {
	bin := buildTenure(t)
	c := &procCluster{t: t, bin: bin, dir: t.TempDir(), store: storeURL}
	for i := 0; i < 3; i++ {
		c.procs = append(c.procs, &kvProc{id: fmt.Sprintf("p%d", i), peer: freeAddr(t), http: freeAddr(t)})
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
	})
	for i := range c.procs {
		c.start(i)
	}
	status := &http.Client{Timeout: 500 * time.Millisecond}
	c.waitLeader(status, 60*time.Second)

	h := rsmtest.NewHistory()
	// Enough keys and a slow enough pace that porcupine's search stays
	// small: each key's history is checked on its own.
	var keys []string
	for k := 0; k < 16; k++ {
		keys = append(keys, fmt.Sprintf("k%02d", k))
	}
	var acked, seq atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for id := 0; id < 6; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &kvClient{id: id, http: &http.Client{Timeout: 4 * time.Second}, base: "http://" + c.procs[id%3].http,
				h: h, revs: map[string]uint64{}, acked: &acked, seq: &seq}
			rng := rand.New(rand.NewPCG(uint64(id), 7))
			for ctx.Err() == nil {
				cl.step(rng, keys)
				time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
			}
		}()
	}

	// Faults: kill the leader, pause a node past the heartbeat timeout,
	// restart what was killed.
	rng := rand.New(rand.NewPCG(42, 1))
	var actions []string
	end := time.Now().Add(20 * time.Second)
	for round := 0; time.Now().Before(end); round++ {
		time.Sleep(time.Duration(800+rng.IntN(800)) * time.Millisecond)
		switch round % 3 {
		case 0:
			if l := c.leader(status); l >= 0 {
				c.kill(l)
				actions = append(actions, fmt.Sprintf("SIGKILL leader %s", c.procs[l].id))
				time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
				c.start(l)
			}
		case 1:
			i := rng.IntN(3)
			c.pause(i, true)
			actions = append(actions, fmt.Sprintf("SIGSTOP %s", c.procs[i].id))
			time.Sleep(time.Duration(700+rng.IntN(800)) * time.Millisecond)
			c.pause(i, false)
		case 2:
			i := rng.IntN(3)
			c.kill(i)
			actions = append(actions, fmt.Sprintf("SIGKILL %s", c.procs[i].id))
			c.start(i)
		}
	}
	stop()
	wg.Wait()
	t.Logf("faults: %s", strings.Join(actions, ", "))

	// Cold restart: kill everything, start fresh processes, read every key.
	for i := range c.procs {
		c.kill(i)
	}
	for i := range c.procs {
		c.start(i)
	}
	c.waitLeader(status, 60*time.Second)
	final := &kvClient{id: 100, http: &http.Client{Timeout: 10 * time.Second}, base: "http://" + c.procs[1].http,
		h: h, revs: map[string]uint64{}, acked: &acked, seq: &seq}
	before := h.Len()
	for _, k := range keys {
		for attempt := 0; attempt < 20; attempt++ {
			n := h.Len()
			final.get(k)
			if h.Len() > n {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if got := h.Len() - before; got != len(keys) {
		t.Fatalf("after the cold restart only %d of %d keys could be read", got, len(keys))
	}
	ops := h.Operations()
	t.Logf("%d operations, %d acknowledged writes", len(ops), acked.Load())
	if acked.Load() < 50 {
		for _, p := range c.procs {
			t.Logf("%s log:\n%s", p.id, tail(p.log))
		}
		t.Fatalf("only %d writes were acknowledged: the cluster made too little progress to check", acked.Load())
	}
	rsmtest.CheckKV(t, ops, 2*time.Minute)
}
