//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// faultsClientEnv makes TestEtcdFaultsClient run as one lock-holding
// client process of TestEtcdFaults: "KIND:ID", with the endpoints in
// faultsEndpointsEnv.
const (
	faultsClientEnv    = "TENURE_ETCD_FAULTS_CLIENT"
	faultsEndpointsEnv = "TENURE_ETCD_FAULTS_ENDPOINTS"
)

// The lock kinds: each guards its own resource key with its own lock
// prefix, where the holder is the key of lowest create revision.
var faultKinds = []string{"mutex", "election", "seed"}

func lockPrefix(kind string) string  { return "f/" + kind + "/lock/" }
func resourceKey(kind string) string { return "f/" + kind + "/res" }

// fenceWritesPerTerm is how many fenced writes a holder makes before it
// releases.
const fenceWritesPerTerm = 4

// faultsTTL is the clients' lease TTL in seconds.
const faultsTTL = 3

// linKeys are the keys of the linearizability workload.
var linKeys = []string{"l/a", "l/b", "l/c", "l/d"}

// TestEtcdFaults runs three tenure etcd serve processes on MinIO, lock
// holders as client processes (concurrency.Mutex, concurrency.Election,
// and the etcd-leader algorithm) doing fenced writes, and a
// linearizability workload, through a SIGKILL, a SIGSTOP and a store
// black hole of the group's leader and a SIGKILL and SIGSTOPs of lock
// holders; then it kills every node and starts them again on the same
// bucket. From the group's full history it checks that every fenced
// write came from the holder of its lock and that every acknowledged
// write is there at its revision, and it checks the workload's history
// with porcupine.
func TestEtcdFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes through faults for a minute")
	}
	minio := testutil.MinIO(t)
	bin := buildTenure(t)
	start := time.Now()
	g := startFaultGroup(t, bin, minio)

	clients := &faultClients{t: t, eps: g.eps, began: start}
	for _, kind := range faultKinds {
		clients.start(kind)
		clients.start(kind)
	}
	t.Cleanup(clients.killAll)

	work := startLinWorkload(t, g.eps, 3)
	progress := func(what string, writes int64, kindsAcquire bool) {
		t.Helper()
		from := work.acks.Load()
		acq := map[string]int{}
		for _, k := range faultKinds {
			acq[k] = clients.acquisitions(k)
		}
		defer func() { t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), what) }()
		waitUntil(t, 60*time.Second, what, func() bool {
			if work.acks.Load() < from+writes {
				return false
			}
			for _, k := range faultKinds {
				if kindsAcquire && clients.acquisitions(k) <= acq[k] {
					return false
				}
			}
			return true
		})
	}
	progress("the workload's first writes and an acquisition of every lock", 20, true)

	// A lock holder killed while it holds: the next holder takes over
	// once its lease expires; a new client replaces it.
	clients.faultHolder("mutex", syscall.SIGKILL)
	clients.start("mutex")

	// The leader killed: another node leads and the workload goes on;
	// the killed node starts again.
	l := g.leader(nil)
	t.Logf("%v: SIGKILL of the leader n%d", time.Since(start).Round(time.Millisecond), l)
	g.nodes[l].stop(t, syscall.SIGKILL)
	g.waitLeader(l)
	progress("writes after the leader was killed", 10, false)
	g.restart(l)
	t.Logf("%v: n%d restarted", time.Since(start).Round(time.Millisecond), l)

	// A holder stopped past its lease: the next holder takes over, and
	// the stopped one, continued, is fenced off.
	clients.faultHolder("election", syscall.SIGSTOP)

	// The leader stopped past the leader timeout, then continued.
	l = g.leader(nil)
	t.Logf("%v: SIGSTOP of the leader n%d", time.Since(start).Round(time.Millisecond), l)
	_ = g.nodes[l].cmd.Process.Signal(syscall.SIGSTOP)
	g.waitLeader(l)
	progress("writes while the old leader is stopped", 10, false)
	_ = g.nodes[l].cmd.Process.Signal(syscall.SIGCONT)

	clients.faultHolder("seed", syscall.SIGSTOP)

	// The leader's store black-holed: another node leads; the store
	// comes back.
	l = g.leader(nil)
	t.Logf("%v: store black hole for the leader n%d", time.Since(start).Round(time.Millisecond), l)
	g.proxies[l].BlackHole(t)
	g.waitLeader(l)
	progress("writes while the old leader's store is black-holed", 10, false)
	g.proxies[l].SetUp(t, true)

	progress("writes and acquisitions after the faults", 10, true)
	t.Logf("%v: faults done; stopping the clients", time.Since(start).Round(time.Millisecond))
	ops := work.stop()
	events := clients.stopAll()

	// Cold restart: every node killed, then started on the same bucket.
	var maxAck int64
	for _, e := range events {
		maxAck = max(maxAck, e.Rev)
	}
	for _, op := range ops {
		if out := op.Output.(rsmtest.KVOutput); !out.Unknown {
			maxAck = max(maxAck, int64(out.Rev))
		}
	}
	for i := range g.nodes {
		g.nodes[i].stop(t, syscall.SIGKILL)
	}
	for i := range g.nodes {
		g.restart(i)
	}
	t.Logf("%v: cold restart done", time.Since(start).Round(time.Millisecond))

	c := faultsClient(t, g.eps)
	hist := readFullHistory(t, c)
	if last := hist[len(hist)-1].Rev; last < maxAck {
		t.Fatalf("after the cold restart the history ends at revision %d, below the acknowledged revision %d", last, maxAck)
	}

	// Fencing, for each kind of lock.
	for _, kind := range faultKinds {
		var ev []fenceEvent
		writes, rejected := 0, 0
		for _, e := range events {
			if e.Kind != kind {
				continue
			}
			ev = append(ev, e)
			if e.Ev == "write" && e.Result == "ok" {
				writes++
			}
			if e.Ev == "write" && e.Result == "rejected" {
				rejected++
			}
		}
		t.Logf("%s: %d acquisitions, %d acknowledged fenced writes, %d rejected", kind, clients.acquisitions(kind), writes, rejected)
		for _, b := range checkFencing(lockPrefix(kind), resourceKey(kind), hist, ev) {
			t.Errorf("%s: %s", kind, b)
		}
	}

	// Durability of the workload's writes, then linearizability with a
	// read of every key after the restart.
	for _, b := range checkLinDurable(hist, ops) {
		t.Error(b)
	}
	h := work.h
	for _, k := range linKeys {
		call := h.Now()
		r, err := c.Get(t.Context(), k)
		if err != nil {
			t.Fatalf("get %s after the cold restart: %v", k, err)
		}
		out := rsmtest.KVOutput{Found: len(r.Kvs) > 0}
		if out.Found {
			out.Value, out.Rev, out.Create = string(r.Kvs[0].Value), uint64(r.Kvs[0].ModRevision), uint64(r.Kvs[0].CreateRevision)
		}
		h.Add(99, rsmtest.KVInput{Op: rsmtest.KVGet, Key: k}, call, out, h.Now(), "after the cold restart")
	}
	all := h.Operations()
	unknown := 0
	for _, op := range all {
		if op.Output.(rsmtest.KVOutput).Unknown {
			unknown++
		}
	}
	t.Logf("workload: %d operations, %d of unknown outcome", len(all), unknown)
	rsmtest.CheckKV(t, all, 60*time.Second)
	t.Logf("%v: checked", time.Since(start).Round(time.Millisecond))
}

// faultGroup is three tenure etcd serve processes, each reaching MinIO
// through a proxy of its own.
type faultGroup struct {
	t       *testing.T
	bin     string
	env     []string
	eps     []string // client host:port, stable across restarts
	proxies []*testutil.Proxy
	urls    []string // each node's store URL, through its proxy
	nodes   []*kvProcess
	began   time.Time // for the log
}

func startFaultGroup(t *testing.T, bin string, minio testutil.S3Server) *faultGroup {
	g := &faultGroup{t: t, bin: bin, env: awsEnv(t, minio), began: time.Now()}
	prefix := "etcdfaults-" + randomSuffix()
	for range 3 {
		p := testutil.NewProxy(t, strings.TrimPrefix(minio.Endpoint, "http://"))
		p.SetUp(t, true)
		s3 := minio
		s3.Endpoint = "http://" + p.Addr()
		g.proxies = append(g.proxies, p)
		g.urls = append(g.urls, s3.URL(prefix))
		g.eps = append(g.eps, testutil.FreeAddr(t))
	}
	g.nodes = make([]*kvProcess, 3)
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

// restart starts node i and waits until it is ready.
func (g *faultGroup) restart(i int) {
	g.t.Helper()
	p := startProcess(g.t, g.bin, g.env, g.eps[i], "etcd", "serve", "--store", g.urls[i],
		"--id", fmt.Sprintf("n%d", i), "--peer-listen", "127.0.0.1:0", "--peer-plaintext",
		"--listen-client-urls", "http://"+g.eps[i], "--flush-interval", "5ms", "--heartbeat", "250ms",
		"--request-timeout", "3s", "--log-level", "warn")
	g.nodes[i] = p
	waitProbe(g.t, p, "http://"+g.eps[i]+"/readyz", http.StatusOK, "")
}

// leader returns the node that leads by its own word and that of
// another node, among the nodes not in except, waiting for one.
func (g *faultGroup) leader(except []int) int {
	g.t.Helper()
	c := faultsClient(g.t, g.eps)
	l := -1
	waitUntil(g.t, 60*time.Second, "a node leads", func() bool {
		self := map[uint64]int{}
		votes := map[uint64]int{}
		for i, ep := range g.eps {
			if slices.Contains(except, i) {
				continue
			}
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
				l = i
				return true
			}
		}
		return false
	})
	return l
}

// waitLeader waits until a node other than old leads.
func (g *faultGroup) waitLeader(old int) {
	g.t.Helper()
	l := g.leader([]int{old})
	g.t.Logf("%v: n%d leads", time.Since(g.began).Round(time.Millisecond), l)
}

// faultsClient is an etcd client of every endpoint, closed with the test.
func faultsClient(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readFullHistory reads every event of the group from revision 1 to its
// current revision with a watch.
func readFullHistory(t *testing.T, c *clientv3.Client) []histEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := c.Get(ctx, "f/")
	if err != nil {
		t.Fatal(err)
	}
	cur := r.Header.Revision
	var hist []histEvent
	for wr := range c.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch from revision 1: %v", err)
		}
		for _, ev := range wr.Events {
			hist = append(hist, histEvent{Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Rev: ev.Kv.ModRevision,
				Create: ev.Kv.CreateRevision, Delete: ev.Type == clientv3.EventTypeDelete})
		}
		if n := len(hist); n > 0 && hist[n-1].Rev >= cur {
			return hist
		}
	}
	t.Fatalf("the watch from revision 1 ended before revision %d (%d events): %v", cur, len(hist), ctx.Err())
	return nil
}

// again says whether an error is one the etcd client leaves to its
// caller while the group changes leader, or a timeout of the caller's.
func again(err error) bool {
	var ee rpctypes.EtcdError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return true
	case status.Code(err) == codes.Unavailable, status.Code(err) == codes.DeadlineExceeded:
		return true
	case errors.As(err, &ee) && (ee.Code() == codes.Unavailable || ee.Code() == codes.Unknown):
		return true
	}
	return false
}

// faultClients are the lock-holding client processes and what they
// reported.
type faultClients struct {
	t     *testing.T
	eps   []string
	began time.Time // for the log

	mu     sync.Mutex
	n      int
	procs  []*clientProc
	events []fenceEvent
}

type clientProc struct {
	id, kind string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *strings.Builder // stderr and the lines of stdout that are not reports
	outMu    sync.Mutex
	killed   bool          // by the test
	done     chan struct{} // closed once its output is read and it has exited
}

// start starts a client process of kind.
func (fc *faultClients) start(kind string) *clientProc {
	fc.t.Helper()
	fc.mu.Lock()
	fc.n++
	id := fmt.Sprintf("%s-%d", kind, fc.n)
	fc.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEtcdFaultsClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), faultsClientEnv+"="+kind+":"+id, faultsEndpointsEnv+"="+strings.Join(fc.eps, ","))
	p := &clientProc{id: id, kind: kind, cmd: cmd, out: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stderr = lockedStringWriter{&p.outMu, p.out}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fc.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fc.t.Fatal(err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		fc.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "FENCE ")
			if !ok {
				_, _ = lockedStringWriter{&p.outMu, p.out}.Write([]byte(sc.Text() + "\n"))
				continue
			}
			var e fenceEvent
			if json.Unmarshal([]byte(line), &e) == nil {
				fc.mu.Lock()
				fc.events = append(fc.events, e)
				fc.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	fc.mu.Lock()
	fc.procs = append(fc.procs, p)
	fc.mu.Unlock()
	return p
}

type lockedStringWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedStringWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (fc *faultClients) acquisitions(kind string) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n := 0
	for _, e := range fc.events {
		if e.Kind == kind && e.Ev == "acquired" {
			n++
		}
	}
	return n
}

// holding returns the client of kind whose last report says it holds
// with a write still to make, and its token.
func (fc *faultClients) holding(kind string) (*clientProc, int64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	last := map[string]fenceEvent{}
	writes := map[string]int{}
	for _, e := range fc.events {
		if e.Kind != kind {
			continue
		}
		last[e.Client] = e
		switch e.Ev {
		case "acquired":
			writes[e.Client] = 0
		case "write":
			writes[e.Client]++
		}
	}
	for _, p := range fc.procs {
		e, ok := last[p.id]
		if ok && (e.Ev == "acquired" || e.Ev == "write" && e.Result == "ok") && writes[p.id] < fenceWritesPerTerm-1 {
			select {
			case <-p.done:
				continue
			default:
			}
			return p, e.Token
		}
	}
	return nil, 0
}

// faultHolder stops a client of kind while it holds its lock (confirmed
// by the group: its key is the holder's while it is stopped), waits
// until another client acquires the lock, and then kills it (SIGKILL) or
// continues it (SIGSTOP).
func (fc *faultClients) faultHolder(kind string, sig syscall.Signal) {
	fc.t.Helper()
	c := faultsClient(fc.t, fc.eps)
	var p *clientProc
	var tok int64
	waitUntil(fc.t, 60*time.Second, "a "+kind+" client stopped while it holds", func() bool {
		p, tok = fc.holding(kind)
		if p == nil {
			return false
		}
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		ctx, cancel := context.WithTimeout(fc.t.Context(), 5*time.Second)
		r, err := c.Get(ctx, lockPrefix(kind), clientv3.WithFirstCreate()...)
		cancel()
		if err == nil && len(r.Kvs) == 1 && r.Kvs[0].CreateRevision == tok {
			return true
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		return false
	})
	fc.t.Logf("%v: %s stopped while it holds with token %d", time.Since(fc.began).Round(time.Millisecond), p.id, tok)
	if sig == syscall.SIGKILL {
		p.killed = true
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	waitUntil(fc.t, 60*time.Second, "another "+kind+" client acquires", func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		for _, e := range fc.events {
			if e.Kind == kind && e.Ev == "acquired" && e.Token > tok {
				return true
			}
		}
		return false
	})
	fc.t.Logf("%v: another %s client acquired", time.Since(fc.began).Round(time.Millisecond), kind)
	if sig == syscall.SIGKILL {
		return
	}
	// Continued, the stopped holder goes on with its fenced writes,
	// which the group must reject: its key is gone. (A write it sent
	// before it was stopped may have been applied while it held.)
	resumed := time.Now().UnixNano()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	var next fenceEvent
	waitUntil(fc.t, 60*time.Second, "the continued "+p.id+"'s fenced write rejected or its next acquisition", func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		for _, e := range fc.events {
			if e.Client == p.id && e.At > resumed && (e.Ev == "write" && e.Result == "rejected" || e.Ev == "acquired") {
				next = e
				return true
			}
		}
		return false
	})
	if next.Ev != "write" || next.Token != tok {
		fc.t.Errorf("%s, continued after another client acquired, acquired again (token %d) with no fenced write rejected", p.id, next.Token)
	}
}

// stopAll closes every client's stdin, which ends it, waits for them,
// and returns what they reported.
func (fc *faultClients) stopAll() []fenceEvent {
	fc.t.Helper()
	fc.mu.Lock()
	procs := slices.Clone(fc.procs)
	fc.mu.Unlock()
	for _, p := range procs {
		_ = p.stdin.Close()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			fc.t.Errorf("%s did not exit within 30s of its stdin's end", p.id)
		}
		p.outMu.Lock()
		errs := p.out.String()
		p.outMu.Unlock()
		if strings.Contains(errs, "WARNING: DATA RACE") || strings.Contains(errs, "--- FAIL") || strings.Contains(errs, "panic:") ||
			!p.killed && p.cmd.ProcessState.ExitCode() != 0 {
			fc.t.Errorf("%s exited with %d:\n%s", p.id, p.cmd.ProcessState.ExitCode(), errs)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return slices.Clone(fc.events)
}

func (fc *faultClients) killAll() {
	fc.mu.Lock()
	procs := slices.Clone(fc.procs)
	fc.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// TestEtcdFaultsClient is a lock-holding client process of
// TestEtcdFaults; it runs only as one. It acquires its lock, makes
// fenced writes to the lock's resource, and releases it, over and over,
// reporting each step on stdout, until its stdin ends.
func TestEtcdFaultsClient(t *testing.T) {
	spec := os.Getenv(faultsClientEnv)
	if spec == "" {
		t.Skip("a client process of TestEtcdFaults, which starts it")
	}
	kind, id, _ := strings.Cut(spec, ":")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv(faultsEndpointsEnv), ","), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	emit := func(e fenceEvent) {
		e.Client, e.Kind, e.At = id, kind, time.Now().UnixNano()
		b, _ := json.Marshal(e)
		fmt.Printf("FENCE %s\n", b)
	}
	seq, term := 0, 0
	for ctx.Err() == nil {
		term++
		s, err := concurrency.NewSession(c, concurrency.WithTTL(faultsTTL), concurrency.WithContext(ctx))
		if err != nil {
			continue
		}
		h := newHolder(kind, c, s, fmt.Sprintf("%s-%d", id, term))
		tok, err := h.acquire(ctx)
		if err != nil {
			closeSession(c, s)
			continue
		}
		emit(fenceEvent{Ev: "acquired", Token: tok})
		owner := clientv3.Compare(clientv3.CreateRevision(h.key()), "=", tok)
		for range fenceWritesPerTerm {
			seq++
			v := fmt.Sprintf("%s/%d/%d", id, tok, seq)
			emit(fenceEvent{Ev: "call", Token: tok, Value: v})
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := c.Txn(wctx).If(owner).Then(clientv3.OpPut(resourceKey(kind), v)).Commit()
			wcancel()
			switch {
			case err != nil:
				emit(fenceEvent{Ev: "write", Token: tok, Value: v, Result: "unknown"})
			case !r.Succeeded:
				emit(fenceEvent{Ev: "write", Token: tok, Value: v, Result: "rejected"})
			default:
				emit(fenceEvent{Ev: "write", Token: tok, Value: v, Result: "ok", Rev: r.Header.Revision})
			}
			if err == nil && !r.Succeeded {
				break
			}
			// Pace the holder so that the test can catch it holding.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		err = h.release(rctx)
		rcancel()
		if err == nil {
			emit(fenceEvent{Ev: "released", Token: tok})
		}
		closeSession(c, s)
	}
}

// closeSession ends a session: its lease is revoked, within a second.
func closeSession(c *clientv3.Client, s *concurrency.Session) {
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = c.Revoke(ctx, s.Lease())
}

// holder is one way to hold a lock: its key under lockPrefix(kind),
// whose create revision is its token while it is the key of lowest
// create revision.
type holder interface {
	acquire(ctx context.Context) (int64, error)
	key() string
	release(ctx context.Context) error
}

// name is the client's name for this term, unique.
func newHolder(kind string, c *clientv3.Client, s *concurrency.Session, name string) holder {
	switch kind {
	case "mutex":
		return &mutexHolder{c: c, m: concurrency.NewMutex(s, lockPrefix(kind))}
	case "election":
		return &electionHolder{e: concurrency.NewElection(s, strings.TrimSuffix(lockPrefix(kind), "/")), id: name}
	}
	return &seedHolder{c: c, s: s, k: lockPrefix(kind) + name}
}

type mutexHolder struct {
	c *clientv3.Client
	m *concurrency.Mutex
}

func (h *mutexHolder) acquire(ctx context.Context) (int64, error) {
	for {
		err := h.m.Lock(ctx)
		if err == nil {
			break
		}
		if !again(err) || ctx.Err() != nil {
			return 0, err
		}
	}
	for {
		r, err := h.c.Get(ctx, h.m.Key())
		switch {
		case err != nil && again(err) && ctx.Err() == nil:
			continue
		case err != nil:
			return 0, err
		case len(r.Kvs) == 0:
			return 0, concurrency.ErrSessionExpired
		}
		return r.Kvs[0].CreateRevision, nil
	}
}

func (h *mutexHolder) key() string                       { return h.m.Key() }
func (h *mutexHolder) release(ctx context.Context) error { return h.m.Unlock(ctx) }

type electionHolder struct {
	e  *concurrency.Election
	id string
}

func (h *electionHolder) acquire(ctx context.Context) (int64, error) {
	for {
		err := h.e.Campaign(ctx, h.id)
		if err == nil {
			return h.e.Rev(), nil
		}
		if !again(err) || ctx.Err() != nil {
			return 0, err
		}
	}
}

func (h *electionHolder) key() string                       { return h.e.Key() }
func (h *electionHolder) release(ctx context.Context) error { return h.e.Resign(ctx) }

// seedHolder is the etcd-leader algorithm: put a new key with its lease
// (the algorithm's atomic in-order insertion), read the prefix in create revision order, hold if its key is first,
// and otherwise wait for the key just before its own to be deleted and
// read again.
type seedHolder struct {
	c *clientv3.Client
	s *concurrency.Session
	k string
}

func (h *seedHolder) acquire(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.s.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		_, err := h.c.Put(ctx, h.k, "", clientv3.WithLease(h.s.Lease()))
		if err == nil {
			break
		}
		if !again(err) || ctx.Err() != nil {
			return 0, err
		}
	}
	for {
		r, err := h.c.Get(ctx, lockPrefix("seed"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			if again(err) && ctx.Err() == nil {
				continue
			}
			return 0, err
		}
		i := slices.IndexFunc(r.Kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == h.k })
		switch {
		case i < 0:
			return 0, concurrency.ErrSessionExpired
		case i == 0:
			return r.Kvs[0].CreateRevision, nil
		}
		wctx, wcancel := context.WithCancel(ctx)
		for wr := range h.c.Watch(wctx, string(r.Kvs[i-1].Key), clientv3.WithRev(r.Header.Revision+1)) {
			if wr.Err() != nil || slices.ContainsFunc(wr.Events, func(ev *clientv3.Event) bool { return ev.Type == clientv3.EventTypeDelete }) {
				break
			}
		}
		wcancel()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

func (h *seedHolder) key() string { return h.k }
func (h *seedHolder) release(ctx context.Context) error {
	_, err := h.c.Delete(ctx, h.k)
	return err
}

// linWorkload is the linearizability workload: workers doing gets, puts,
// compare-and-swaps and deletes on linKeys, each through its own client
// of every endpoint.
type linWorkload struct {
	h      *rsmtest.History
	acks   atomic.Int64 // writes acknowledged
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startLinWorkload(t *testing.T, eps []string, workers int) *linWorkload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &linWorkload{h: rsmtest.NewHistory(), cancel: cancel}
	var cs []*clientv3.Client
	for range workers {
		cs = append(cs, faultsClient(t, eps))
	}
	t.Cleanup(w.stopQuiet) // before the clients close
	for i, c := range cs {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(ctx, i, c)
		}()
	}
	return w
}

func (w *linWorkload) run(ctx context.Context, id int, c *clientv3.Client) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	seq := 0
	h := w.h
	for ctx.Err() == nil {
		k := linKeys[rng.IntN(len(linKeys))]
		seq++
		v := fmt.Sprintf("w%d-%d", id, seq)
		octx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		p := rng.IntN(100)
		switch {
		case p < 30:
			w.get(octx, id, c, k)
		case p < 60:
			in := rsmtest.KVInput{Op: rsmtest.KVPut, Key: k, Value: v}
			call := h.Now()
			r, err := c.Put(octx, k, v)
			w.write(id, in, call, err, func() rsmtest.KVOutput { return rsmtest.KVOutput{Rev: uint64(r.Header.Revision)} })
		case p < 85:
			got, ok := w.get(octx, id, c, k)
			if !ok {
				break
			}
			in := rsmtest.KVInput{Op: rsmtest.KVCAS, Key: k, Value: v, Expect: got.Rev}
			call := h.Now()
			r, err := c.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(k), "=", int64(got.Rev))).
				Then(clientv3.OpPut(k, v)).Else(clientv3.OpGet(k)).Commit()
			w.write(id, in, call, err, func() rsmtest.KVOutput {
				if r.Succeeded {
					return rsmtest.KVOutput{Found: true, Rev: uint64(r.Header.Revision)}
				}
				var out rsmtest.KVOutput
				if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					out.Rev = uint64(kvs[0].ModRevision)
				}
				return out
			})
		default:
			in := rsmtest.KVInput{Op: rsmtest.KVDelete, Key: k}
			call := h.Now()
			r, err := c.Delete(octx, k)
			w.write(id, in, call, err, func() rsmtest.KVOutput {
				return rsmtest.KVOutput{Found: r.Deleted > 0, Rev: uint64(r.Header.Revision)}
			})
		}
		cancel()
	}
}

// get records a linearizable get of k; a failed one is left out of the
// history, as it changed nothing.
func (w *linWorkload) get(ctx context.Context, id int, c *clientv3.Client, k string) (rsmtest.KVOutput, bool) {
	call := w.h.Now()
	r, err := c.Get(ctx, k)
	ret := w.h.Now()
	if err != nil {
		return rsmtest.KVOutput{}, false
	}
	out := rsmtest.KVOutput{Found: len(r.Kvs) > 0}
	if out.Found {
		out.Value, out.Rev, out.Create = string(r.Kvs[0].Value), uint64(r.Kvs[0].ModRevision), uint64(r.Kvs[0].CreateRevision)
	}
	w.h.Add(id, rsmtest.KVInput{Op: rsmtest.KVGet, Key: k}, call, out, ret, nil)
	return out, true
}

// write records a write: with an error its outcome is unknown, it may
// have applied at any time after its call.
func (w *linWorkload) write(id int, in rsmtest.KVInput, call int64, err error, out func() rsmtest.KVOutput) {
	if err != nil {
		w.h.Add(id, in, call, rsmtest.KVOutput{Unknown: true}, rsmtest.Pending, err.Error())
		return
	}
	w.h.Add(id, in, call, out(), w.h.Now(), nil)
	w.acks.Add(1)
}

// stop ends the workers and returns the history.
func (w *linWorkload) stop() []porcupine.Operation {
	w.stopQuiet()
	return w.h.Operations()
}

func (w *linWorkload) stopQuiet() {
	w.cancel()
	w.wg.Wait()
}
