//go:build linux

package rsmtest_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/rsm"
)

// The availability measurement: three `tenure kv serve` processes on
// MinIO; for each single-node fault of the leader and of a follower, the
// longest stretch without a successful write through a node left working,
// which fails the test beyond the failover bound (availTiming.failover).
// After a peer partition heals, the time to the first write through the
// node that was cut off; with the leader cut off while no write comes, the
// leaderships taken and the first write's time. Figures in
// docs/BENCHMARKS.md ("RSM availability"). Run with
//
//	TENURE_AVAIL=1 go test -run TestAvailabilityProcesses -v -timeout 30m ./rsm/rsmtest/
//
// and TENURE_AVAIL_FAULTS="peer partition;idle peer partition" (say) for a
// subset of the faults.

// faultProxy forwards TCP connections to target. While hold says so for a
// connection, it carries nothing either way (a black hole: no error, no
// answer), as a cut link or a stopped peer.
type faultProxy struct {
	lis    net.Listener
	target string
	// hold reports whether a connection from the node src (-1 if not a
	// node) must carry nothing now.
	hold func(src int) bool
	// refuse, if set, reports whether a connection from src must be
	// closed at once (a refused or reset connection).
	refuse func(src int) bool
	// source names the node that opened a connection, from its port.
	source func(port int) int

	closed atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	from   map[net.Conn]int // accepted connections: the node they come from
}

func newFaultProxy(t *testing.T, target string, hold func(int) bool, source func(int) int) *faultProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{lis: lis, target: target, hold: hold, source: source, conns: map[net.Conn]bool{}, from: map[net.Conn]int{}}
	t.Cleanup(p.close)
	p.wg.Add(1)
	go p.serve()
	return p
}

// close stops the proxy: its connections are closed and its goroutines
// waited for.
func (p *faultProxy) close() {
	p.closed.Store(true)
	p.lis.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track records c to be closed with the proxy; false if it is closed.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

// held waits while src's connections must carry nothing; false once the
// proxy is closed.
func (p *faultProxy) held(src int) bool {
	for p.hold(src) {
		if p.closed.Load() {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return !p.closed.Load()
}

func (p *faultProxy) addr() string { return p.lis.Addr().String() }

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

// closeFrom closes the accepted connections whose source cut says.
func (p *faultProxy) closeFrom(cut func(src int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, src := range p.from {
		if cut(src) {
			c.Close()
		}
	}
}

func (p *faultProxy) pipe(c net.Conn) {
	defer c.Close()
	src := -1
	if p.source != nil {
		src = p.source(c.RemoteAddr().(*net.TCPAddr).Port)
	}
	p.mu.Lock()
	p.from[c] = src
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.from, c)
		p.mu.Unlock()
	}()
	if p.refuse != nil && p.refuse(src) {
		return
	}
	if !p.held(src) {
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(u) {
		return
	}
	var once sync.Once
	done := make(chan struct{})
	var copies sync.WaitGroup
	defer copies.Wait()
	defer u.Close()
	defer c.Close()
	cp := func(dst, s net.Conn) {
		defer copies.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !p.held(src) {
				break
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		once.Do(func() { close(done) })
	}
	copies.Add(2)
	go cp(u, c)
	go cp(c, u)
	<-done
}

// portOwner returns the pid among pids that owns the local TCP port, by
// /proc: the socket's inode in /proc/net/tcp, then the process whose
// descriptors hold it. -1 if none.
func portOwner(port int, pids []int) int {
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if i < 0 {
				continue
			}
			if p, err := strconv.ParseUint(fs[1][i+1:], 16, 32); err == nil && int(p) == port {
				inode = fs[9]
			}
		}
		fh.Close()
		if inode != "" {
			break
		}
	}
	if inode == "" {
		return -1
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return pid
			}
		}
	}
	return -1
}

func TestAvailabilityProcesses(t *testing.T) {
	if os.Getenv("TENURE_AVAIL") == "" {
		t.Skip("a measurement of a few minutes: set TENURE_AVAIL=1")
	}
	srv := testutil.MinIO(t)
	srv.SetEnv(t)
	bin := buildTenure(t)
	profiles := []struct {
		name   string
		flags  []string
		timing availTiming
	}{
		{"fast (--heartbeat 100ms --max-missed-heartbeats 4 --leadership-delay 50ms)", []string{"--heartbeat", "100ms", "--max-missed-heartbeats", "4", "--leadership-delay", "50ms"},
			availTiming{heartbeat: 100 * time.Millisecond, missed: 4, delay: 50 * time.Millisecond}},
		{"defaults (heartbeat 500ms x 4, leadership delay 250ms)", nil,
			availTiming{heartbeat: rsm.DefaultHeartbeatInterval, missed: rsm.DefaultMaxMissedHeartbeats, delay: rsm.DefaultLeadershipDelay}},
	}
	faults := []string{"SIGKILL", "SIGSTOP", "store black hole", "peer partition", "peer partition, refused", "idle peer partition", "idle peer partition, refused"}
	if only := os.Getenv("TENURE_AVAIL_FAULTS"); only != "" {
		// A subset separated by semicolons, to measure one change quickly.
		faults = strings.Split(only, ";")
	}
	var report []string
	for _, prof := range profiles {
		for _, fault := range faults {
			for _, leader := range []bool{true, false} {
				if strings.HasPrefix(fault, "idle") && !leader {
					continue // a cut-off follower is dropped; the leader still serves
				}
				r := measureFault(t, srv, bin, prof.flags, fault, leader)
				role := "follower"
				if leader {
					role = "leader"
				}
				line := fmt.Sprintf("%-70s %-23s %-8s %6.2f s", prof.name, fault, role, r.gap.Seconds())
				if r.rejoin >= 0 {
					line += fmt.Sprintf("   rejoin after heal %6.2f s", r.rejoin.Seconds())
				}
				if r.terms >= 0 {
					line += fmt.Sprintf("   leaderships while idle %d", r.terms)
				}
				t.Log(line)
				report = append(report, line)
				if bound := prof.timing.failover(); r.gap > bound {
					t.Errorf("%s: writes stopped for %v, more than the failover bound %v", line, r.gap.Round(time.Millisecond), bound)
				}
				if bound := prof.timing.rejoin(); r.rejoin > bound {
					t.Errorf("%s: the healed node served its first write after %v, more than the bound %v", line, r.rejoin.Round(time.Millisecond), bound)
				}
				if strings.HasPrefix(fault, "idle") && r.terms != 1 {
					t.Errorf("%s: %d leaderships while the cut-off leader was idle, want 1 (its followers replace it; it stays deposed)", line, r.terms)
				}
			}
		}
	}
	t.Log("longest stretch without a successful write through a node left working, in the 10 s after the fault " +
		"(idle peer partition: the first write, after 40 s without writes):\n" + strings.Join(report, "\n"))
}

// availTiming is a profile's failover timing.
type availTiming struct {
	heartbeat time.Duration
	missed    int
	delay     time.Duration
}

// availMargin is what a takeover's store requests, the PUT that shows it
// and the scheduling of four processes and MinIO on a loaded 2-core
// machine add to the protocol's waits; far less than a regression costs
// (a deposing follower: the rest of the fault window; S2C's timings: 50 s).
const availMargin = 2500 * time.Millisecond

// failover bounds the writes' gap after a single-node fault, as
// docs/rsm.md ("Availability") gives it: the heartbeat timeout, half of
// it more to look for signs that the leader lives, the last of the two
// followers' rank delays, then a takeover (in the margin).
func (a availTiming) failover() time.Duration {
	timeout := time.Duration(a.missed) * a.heartbeat
	return timeout + timeout/2 + 2*a.delay + availMargin
}

// rejoin bounds the first write through a node after its peer partition
// heals: within one heartbeat timeout (docs/rsm.md, "Availability").
func (a availTiming) rejoin() time.Duration {
	return time.Duration(a.missed)*a.heartbeat + availMargin
}

// faultResult is what measureFault measured.
type faultResult struct {
	// gap is the longest stretch without a successful write through a
	// node left working.
	gap time.Duration
	// rejoin is the time from the heal of a peer partition to the first
	// successful write through the node that was cut off; -1 if not
	// measured.
	rejoin time.Duration
	// terms counts the leaderships taken while the group was idle under
	// an idle peer partition; -1 if not measured.
	terms int
}

// measureFault starts a fresh three-process group, injects fault into
// its leader or a follower and measures the longest stretch, in the 10 s
// after the fault, during which a write through some node left working
// did not succeed. A peer partition is then healed, and the time to the
// first write through the node that was cut off measured. Under an idle
// peer partition (the leader cut off) no write comes for idleWindow; the
// leaderships taken meanwhile are counted, and the gap is the time the
// first write after it takes.
func measureFault(t *testing.T, srv testutil.S3Server, bin string, flags []string, fault string, leader bool) faultResult {
	t.Helper()
	var mu sync.Mutex
	storeCut, peerCut, peerRefuse := -1, -1, -1
	pids := make([]int, 3)
	nodeOf := func(port int) int {
		mu.Lock()
		ps := append([]int(nil), pids...)
		mu.Unlock()
		pid := portOwner(port, ps)
		for i, p := range ps {
			if p == pid && pid > 0 {
				return i
			}
		}
		return -1
	}
	c := &procCluster{t: t, bin: bin, dir: t.TempDir()}
	prefix := fmt.Sprintf("rsm-avail-%d", time.Now().UnixNano())
	type node struct {
		peer, http string
		storeURL   string
		advertise  string
	}
	nodes := make([]node, 3)
	var peerProxies []*faultProxy
	for i := range nodes {
		peer := freeAddr(t)
		// The node's store traffic goes through its own proxy; its peers
		// reach it through another, which also names the node a
		// connection comes from, so that a partition cuts both ways.
		sp := newFaultProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"), func(int) bool {
			mu.Lock()
			defer mu.Unlock()
			return storeCut == i
		}, nil)
		pp := newFaultProxy(t, peer, func(src int) bool {
			mu.Lock()
			defer mu.Unlock()
			return peerCut >= 0 && (peerCut == i || peerCut == src)
		}, nodeOf)
		pp.refuse = func(src int) bool {
			mu.Lock()
			defer mu.Unlock()
			return peerRefuse >= 0 && (peerRefuse == i || peerRefuse == src)
		}
		peerProxies = append(peerProxies, pp)
		s := srv
		s.Endpoint = "http://" + sp.addr()
		nodes[i] = node{peer: peer, http: freeAddr(t), storeURL: s.URL(prefix), advertise: pp.addr()}
		c.procs = append(c.procs, &kvProc{id: fmt.Sprintf("p%d", i), peer: peer, http: nodes[i].http})
	}
	start := func(i int) {
		p := c.procs[i]
		p.log = c.dir + "/" + p.id + ".log"
		f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		args := append([]string{"kv", "serve", "--store", nodes[i].storeURL, "--group", "avail",
			"--id", p.id, "--peer-listen", p.peer, "--advertise", nodes[i].advertise, "--http", p.http, "--log-level", "warn"}, flags...)
		p.cmd = newCmd(bin, args, f)
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		pids[i] = p.cmd.Process.Pid
		mu.Unlock()
		p.stopped = false
	}
	defer func() {
		for i := range c.procs {
			c.kill(i)
		}
	}()
	for i := range c.procs {
		start(i)
	}
	status := &http.Client{Timeout: 500 * time.Millisecond}
	l := c.waitLeader(status, 60*time.Second)
	// Every node serves before the fault.
	put := func(i int, client *http.Client) bool {
		req, _ := http.NewRequest("PUT", "http://"+nodes[i].http+"/v1/kv/k"+strconv.Itoa(i), strings.NewReader("v"))
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	warm := &http.Client{Timeout: 15 * time.Second}
	for i := range nodes {
		deadline := time.Now().Add(30 * time.Second)
		for !put(i, warm) {
			if time.Now().After(deadline) {
				t.Fatalf("node %d serves no write before the fault", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	target := l
	if !leader {
		target = (l + 1) % 3
	}
	// Writers through every other node, back to back.
	const window = 10 * time.Second
	var stop atomic.Bool
	var wg sync.WaitGroup
	gaps := make([]time.Duration, 3)
	t0 := time.Now()
	switch fault {
	case "SIGKILL":
		c.kill(target)
	case "SIGSTOP":
		c.pause(target, true)
	case "store black hole":
		mu.Lock()
		storeCut = target
		mu.Unlock()
	case "peer partition", "idle peer partition":
		mu.Lock()
		peerCut = target
		mu.Unlock()
		// Connections already open are held by the proxies from now on.
	case "peer partition, refused", "idle peer partition, refused":
		mu.Lock()
		peerRefuse = target
		mu.Unlock()
		for i, pp := range peerProxies {
			pp.closeFrom(func(src int) bool { return i == target || src == target })
		}
	default:
		t.Fatalf("unknown fault %q", fault)
	}
	res := faultResult{rejoin: -1, terms: -1}
	if strings.HasPrefix(fault, "idle") {
		res.terms = countLeaderships(t, c, status, idleWindow)
		other := (target + 1) % 3
		client := &http.Client{Timeout: 15 * time.Second}
		start := time.Now()
		for !put(other, client) {
			if time.Since(start) > time.Minute {
				for _, p := range c.procs {
					t.Logf("%s log:\n%s", p.id, tail(p.log))
				}
				t.Fatalf("no write through node %d a minute after the idle partition", other)
			}
			time.Sleep(10 * time.Millisecond)
		}
		res.gap = time.Since(start)
		if res.gap > 5*time.Second || res.terms > 1 {
			for _, p := range c.procs {
				t.Logf("%s log:\n%s", p.id, tail(p.log))
			}
		}
		return res
	}
	for i := range nodes {
		if i == target {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 15 * time.Second}
			last := t0
			for !stop.Load() {
				ok := put(i, client)
				now := time.Now()
				if ok {
					if d := now.Sub(last); d > gaps[i] {
						gaps[i] = d
					}
					last = now
				} else {
					time.Sleep(10 * time.Millisecond)
				}
				if now.Sub(t0) > window {
					if d := now.Sub(last); d > gaps[i] {
						gaps[i] = d
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	var worst time.Duration
	for _, g := range gaps {
		worst = max(worst, g)
	}
	res.gap = worst
	if fault == "peer partition" || fault == "peer partition, refused" {
		mu.Lock()
		peerCut, peerRefuse = -1, -1
		mu.Unlock()
		healed := time.Now()
		client := &http.Client{Timeout: 15 * time.Second}
		for !put(target, client) {
			if time.Since(healed) > time.Minute {
				t.Fatalf("no write through node %d a minute after the heal", target)
			}
			time.Sleep(10 * time.Millisecond)
		}
		res.rejoin = time.Since(healed)
	}
	if worst > 5*time.Second || res.rejoin > 5*time.Second {
		for _, p := range c.procs {
			t.Logf("%s log:\n%s", p.id, tail(p.log))
		}
	}
	return res
}

// idleWindow is how long the group gets no write under an idle peer
// partition: long enough for the cut-off leader, deposed at its idle
// probe, to give up following the new leader (Follow calls that wait
// kv serve's 10 s connect timeout each on connections that carry nothing:
// about 20 s) and look at the store.
const idleWindow = 45 * time.Second

// countLeaderships polls every node's status for d and returns how many
// leaderships were taken meanwhile: the number of terms above the first
// seen.
func countLeaderships(t *testing.T, c *procCluster, client *http.Client, d time.Duration) int {
	t.Helper()
	var first, last uint64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, p := range c.procs {
			resp, err := client.Get("http://" + p.http + "/v1/status")
			if err != nil {
				continue
			}
			var s struct{ Term uint64 }
			_ = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if first == 0 || s.Term < first {
				first = s.Term
			}
			last = max(last, s.Term)
		}
	}
	return int(last - first)
}

func newCmd(bin string, args []string, out *os.File) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ()
	return cmd
}
