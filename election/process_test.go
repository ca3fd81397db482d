//go:build linux

package election_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/filestore"
	"github.com/tenure-io/tenure/store/s3store"
)

// The OS-process overlap test. Each member of the election is a child
// process (this test binary, re-run as TestElectionProcessChild) with one
// Elector. The children inject store faults into their own requests on a
// seeded schedule, fail their own peer requests, and jump their wall
// clocks; the parent SIGKILLs, SIGSTOPs (longer than the lease) and SIGTERMs
// them and restarts them. Every child appends each start of a term, move
// of its deadline and end of a term to a file, on CLOCK_MONOTONIC, which
// all processes of the machine share. From those files the parent checks
// that no two members ever believed they led at the same moment, that
// terms grew with time, that exactly one leader emerged once the faults
// stopped, and that the others took over within the same bound when that
// leader then crashed.

// processChildEnv holds the JSON of a child's processConfig; without it
// TestElectionProcessChild skips.
const processChildEnv = "TENURE_ELECTION_PROCESS_CHILD"

// processSeedEnv, if set, fixes the seed of the schedule, to replay a
// failure. The processes still interleave as the OS schedules them.
const processSeedEnv = "TENURE_ELECTION_PROCESS_SEED"

// processTimings are short, so that many terms pass in a few seconds.
var processTimings = struct {
	frequent, infrequent, leaderTimeout, renewDeadline, peerTimeout time.Duration
	retry                                                           []time.Duration
}{
	frequent:      200 * time.Millisecond,
	infrequent:    time.Second,
	leaderTimeout: 1500 * time.Millisecond,
	renewDeadline: time.Second,
	peerTimeout:   300 * time.Millisecond,
	retry:         []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond},
}

// processConfig is what the parent tells one child.
type processConfig struct {
	Member      string `json:"member"`
	Incarnation int    `json:"incarnation"`
	Seed        uint64 `json:"seed"`

	// Kind is "s3" (Endpoint ... SecretKey) or "file" (Dir).
	Kind      string `json:"kind"`
	Endpoint  string `json:"endpoint,omitempty"`
	Region    string `json:"region,omitempty"`
	Bucket    string `json:"bucket,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	AccessKey string `json:"accessKey,omitempty"`
	SecretKey string `json:"secretKey,omitempty"`
	Dir       string `json:"dir,omitempty"`

	Frequent      time.Duration   `json:"frequent"`
	Infrequent    time.Duration   `json:"infrequent"`
	LeaderTimeout time.Duration   `json:"leaderTimeout"`
	RenewDeadline time.Duration   `json:"renewDeadline"`
	PeerTimeout   time.Duration   `json:"peerTimeout"`
	Retry         []time.Duration `json:"retry"`

	PeerMode bool   `json:"peerMode"`
	CAFile   string `json:"caFile,omitempty"`
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`

	// The child injects faults while CLOCK_MONOTONIC is in
	// [FaultsFrom, FaultsUntil).
	FaultsFrom  int64 `json:"faultsFrom"`
	FaultsUntil int64 `json:"faultsUntil"`

	TransFile  string `json:"transFile"`
	CountsFile string `json:"countsFile"`
}

// processCounts is what a child reports of the faults it injected. It
// rewrites the file every quarter second, so a killed child loses little.
type processCounts struct {
	StoreCalls    int64            `json:"storeCalls"`
	StoreInjected int64            `json:"storeInjected"`
	PeerCalls     int64            `json:"peerCalls"`
	PeerInjected  int64            `json:"peerInjected"`
	Phases        map[string]int64 `json:"phases"`
	WallJumps     int64            `json:"wallJumps"`
}

// monoNow reads CLOCK_MONOTONIC, the clock every process of the machine
// shares. Go's monotonic readings are offsets from a per-process origin.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock and pointer
	}
	return ts.Nano()
}

// monoBase converts this process's time.Time values to CLOCK_MONOTONIC
// nanoseconds, through one reading of both taken together. Differences of
// time.Time values use Go's monotonic clock, which on Linux is
// CLOCK_MONOTONIC.
type monoBase struct {
	raw int64
	at  time.Time
	err int64 // how far raw may be from the true reading at at
}

func newMonoBase() monoBase {
	var best monoBase
	for i := range 100 {
		// Of many tries, keep the one least disturbed by preemption.
		r1 := monoNow()
		at := time.Now()
		r2 := monoNow()
		if b := (monoBase{raw: r1 + (r2-r1)/2, at: at, err: (r2 - r1 + 1) / 2}); i == 0 || b.err < best.err {
			best = b
		}
		if best.err < int64(20*time.Microsecond) {
			break
		}
	}
	return best
}

// check fails t unless the conversion agrees with CLOCK_MONOTONIC read
// now, within the uncertainty of both readings.
func (b monoBase) check(t *testing.T) {
	for range 100 {
		r1 := monoNow()
		x := b.of(time.Now())
		r2 := monoNow()
		if r2-r1 > int64(100*time.Microsecond) {
			continue // preempted: try again
		}
		if x < r1-b.err-int64(100*time.Microsecond) || x > r2+b.err+int64(100*time.Microsecond) {
			t.Fatalf("Go's monotonic clock is not CLOCK_MONOTONIC: a reading converts to %d, between readings %d and %d", x, r1, r2)
		}
		return
	}
	t.Fatal("could not read the clocks without preemption in 100 tries")
}

func (b monoBase) of(t time.Time) int64 { return b.raw + int64(t.Sub(b.at)) }

func TestElectionProcess(t *testing.T) {
	// The two run side by side: the children spend most of their time
	// waiting.
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		srv := testutil.MinIO(t)
		runProcessElection(t, processConfig{
			Kind: "s3", Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		})
	})
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		runProcessElection(t, processConfig{Kind: "file", Dir: t.TempDir()})
	})
}

// processMember is one member across its incarnations.
type processMember struct {
	id    string
	peer  bool
	inc   int
	cur   *processChild
	state memberState
	at    time.Time // paused: when to continue; down: when to restart
}

type memberState int

const (
	memberRunning  memberState = iota
	memberPaused               // SIGSTOPped
	memberStopping             // SIGTERMed, not yet exited
	memberDown                 // exited, to be restarted
)

// processChild is one incarnation: one OS process.
type processChild struct {
	member     string
	inc        int
	cmd        *exec.Cmd
	trans, log string
	counts     string
	done       chan struct{}
	err        error // Wait's result, valid after done
	signalled  bool  // we sent SIGKILL or SIGTERM
}

func (c *processChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ready reports whether the child handles SIGTERM: it has created its
// transition file.
func (c *processChild) ready() bool {
	_, err := os.Stat(c.trans)
	return err == nil
}

func (c *processChild) name() string { return fmt.Sprintf("%s#%d", c.member, c.inc) }

type processRun struct {
	t       *testing.T
	rng     *rand.Rand
	base    processConfig
	dir     string
	origin  int64 // CLOCK_MONOTONIC at the start, for readable times
	members []*processMember
	all     []*processChild

	least   processMinimum
	signals map[string]int
}

// processMinimum is the least a run must inject, and the fewest terms it
// must see, to prove anything; every kind of signal, and some peer
// requests, are required too.
type processMinimum struct {
	storeFaults, phases int64
	terms               int
}

func runProcessElection(t *testing.T, base processConfig) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(processSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", processSeedEnv, s, err)
		}
	}
	t.Logf("seed %d (replay the schedule with %s=%d)", seed, processSeedEnv, seed)

	pt := processTimings
	base.Frequent, base.Infrequent, base.LeaderTimeout = pt.frequent, pt.infrequent, pt.leaderTimeout
	base.RenewDeadline, base.PeerTimeout, base.Retry = pt.renewDeadline, pt.peerTimeout, pt.retry
	base.Prefix = fmt.Sprintf("election-process/%d/", seed)
	if err := (election.Config{
		StoreURL: "file:///unused", ServerID: "m0", ServerAddr: "127.0.0.1:0", PeerMode: true,
		PeerServerTLS:    &tls.Config{},
		FrequentInterval: pt.frequent, InfrequentInterval: pt.infrequent,
		LeaderTimeout: pt.leaderTimeout, RenewDeadline: pt.renewDeadline,
		RetrySchedule: pt.retry, PeerTimeout: pt.peerTimeout,
	}).Validate(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ca, err := tlsutil.NewCA("tenure process test")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "peer", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	base.CAFile, base.CertFile, base.KeyFile = files.CA, files.Cert, files.Key

	// The least a run must inject to prove anything.
	n, peers, chaos := 5, 3, 20*time.Second
	least := processMinimum{storeFaults: 20, phases: 20, terms: 6}
	if testing.Short() {
		n, peers, chaos = 4, 3, 8*time.Second
		least = processMinimum{storeFaults: 2, phases: 5, terms: 3}
	}
	r := &processRun{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), base: base, dir: dir,
		origin: monoNow(), least: least, signals: map[string]int{},
	}
	for i := range n {
		r.members = append(r.members, &processMember{id: fmt.Sprintf("m%d", i), peer: i < peers})
	}
	t.Cleanup(r.killAll)

	// The bound on electing a leader once the faults have stopped: a write
	// caught in a fault may hang until RenewDeadline; the record it leaves
	// must then stay unchanged for LeaderTimeout, seen by a follower that
	// reads every InfrequentInterval at worst (with jitter), or after a
	// failed long-poll of the dead leader, and has backed off for up to a
	// FrequentInterval; plus time to start a process under -race.
	bound := pt.renewDeadline + pt.leaderTimeout + pt.infrequent*12/10 + pt.frequent*12/10 +
		pt.frequent*3/2 + pt.peerTimeout + 5*time.Second

	// Warm-up without faults: peer-mode members first, so that the first
	// leader serves long-polls, then the others.
	warmup := 3 * time.Second
	start := time.Now()
	faultsFrom := monoNow() + int64(warmup)
	faultsUntil := faultsFrom + int64(chaos)
	for _, m := range r.members {
		if m.peer {
			r.start(m, faultsFrom, faultsUntil)
		}
	}
	r.waitOneLeader(bound)
	for _, m := range r.members {
		if !m.peer {
			r.start(m, faultsFrom, faultsUntil)
		}
	}
	time.Sleep(time.Until(start.Add(warmup)))

	r.runChaos(faultsFrom, faultsUntil)

	// The faults have stopped: exactly one leader within the bound. Then
	// crash it, with no faults to blame: the others must take over from a
	// record nobody renews, within the bound again.
	healed := time.Now()
	leader := r.waitOneLeader(bound)
	t.Logf("one leader (%s) %v after the faults stopped (bound %v)", leader, time.Since(healed).Round(time.Millisecond), bound)
	m := r.members[slices.IndexFunc(r.members, func(m *processMember) bool { return m.id == leader })]
	r.signal(m.cur, syscall.SIGKILL)
	crashed := time.Now()
	<-m.cur.done
	r.start(m, 0, 0)
	next := r.waitOneLeader(bound)
	t.Logf("after %s crashed, one leader (%s) %v later (bound %v)", leader, next, time.Since(crashed).Round(time.Millisecond), bound)

	r.stopAll()
	r.check()
}

// start launches a new incarnation of m.
func (r *processRun) start(m *processMember, faultsFrom, faultsUntil int64) {
	r.t.Helper()
	m.inc++
	cfg := r.base
	cfg.Member, cfg.Incarnation, cfg.PeerMode = m.id, m.inc, m.peer
	cfg.Seed = r.rng.Uint64()
	cfg.FaultsFrom, cfg.FaultsUntil = faultsFrom, faultsUntil
	stem := filepath.Join(r.dir, fmt.Sprintf("%s.%d", m.id, m.inc))
	cfg.TransFile, cfg.CountsFile = stem+".trans", stem+".counts"
	js, err := json.Marshal(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	logf, err := os.Create(stem + ".log")
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestElectionProcessChild$", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), processChildEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = logf, logf
	// The kernel kills the child if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		r.t.Fatalf("start %s: %v", m.id, err)
	}
	c := &processChild{member: m.id, inc: m.inc, cmd: cmd, trans: cfg.TransFile, counts: cfg.CountsFile,
		log: stem + ".log", done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	m.cur, m.state = c, memberRunning
	r.all = append(r.all, c)
}

func (r *processRun) signal(c *processChild, sig syscall.Signal) {
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		c.signalled = true
	}
	if err := c.cmd.Process.Signal(sig); err != nil && !c.exited() {
		r.t.Errorf("%v to %s: %v", sig, c.name(), err)
	}
	r.signals[unix.SignalName(sig)]++
}

// tick moves every member along: continues paused ones and restarts
// stopped ones when their time comes (all of them at once if now is
// zero), and reports children that exited on their own.
func (r *processRun) tick(now time.Time, faultsFrom, faultsUntil int64) {
	for _, m := range r.members {
		c := m.cur
		if c == nil {
			continue // not started yet
		}
		due := now.IsZero() || !now.Before(m.at)
		switch m.state {
		case memberRunning, memberPaused:
			if c.exited() && !c.signalled {
				r.t.Errorf("%s exited on its own (%v); its log ends:\n%s", c.name(), c.err, procTail(c.log, 30))
				m.state, m.at = memberDown, time.Now()
			} else if m.state == memberPaused && due {
				r.signal(c, syscall.SIGCONT)
				m.state = memberRunning
			}
		case memberStopping:
			if c.exited() {
				r.checkCleanExit(c)
				m.state, m.at = memberDown, time.Now().Add(time.Duration(r.rng.Int64N(int64(500*time.Millisecond))))
			}
		case memberDown:
			if due {
				r.start(m, faultsFrom, faultsUntil)
			}
		}
	}
}

func (r *processRun) checkCleanExit(c *processChild) {
	if c.err != nil {
		r.t.Errorf("%s did not exit cleanly after SIGTERM (%v); its log ends:\n%s", c.name(), c.err, procTail(c.log, 30))
	}
}

type processEvent int

const (
	eventKill      processEvent = iota // SIGKILL, restart soon
	eventLongStop                      // SIGSTOP past LeaderTimeout (the leader, if any)
	eventShortStop                     // SIGSTOP within RenewDeadline
	eventTerm                          // SIGTERM, restart once it has stepped down
	numEvents
)

var eventNames = [numEvents]string{"kill", "long-stop", "short-stop", "term"}

// runChaos sends signals on a seeded schedule until the faults end, then
// brings every member back.
func (r *processRun) runChaos(faultsFrom, faultsUntil int64) {
	pt := processTimings
	end := time.Now().Add(time.Duration(faultsUntil - monoNow()))
	// Every kind of event once, in a random order, then at random.
	var plan []processEvent
	for _, i := range r.rng.Perm(int(numEvents)) {
		plan = append(plan, processEvent(i))
	}
	next := time.Now()
	events := map[string]int{}
	for now := time.Now(); now.Before(end); now = time.Now() {
		r.tick(now, faultsFrom, faultsUntil)
		if now.Before(next) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		next = now.Add(400*time.Millisecond + time.Duration(r.rng.Int64N(int64(1100*time.Millisecond))))
		var ev processEvent
		if len(plan) > 0 {
			ev, plan = plan[0], plan[1:]
		} else {
			ev = [...]processEvent{eventKill, eventKill, eventLongStop, eventLongStop, eventLongStop, eventShortStop, eventShortStop, eventTerm, eventTerm}[r.rng.IntN(9)]
		}
		// Mostly the leader: that is where the danger is.
		m := r.target(ev == eventLongStop || r.rng.IntN(4) != 0)
		if m == nil {
			continue
		}
		events[eventNames[ev]]++
		switch ev {
		case eventKill:
			r.signal(m.cur, syscall.SIGKILL)
			m.state, m.at = memberDown, now.Add(time.Duration(r.rng.Int64N(int64(time.Second))))
		case eventLongStop:
			r.signal(m.cur, syscall.SIGSTOP)
			m.state, m.at = memberPaused, now.Add(pt.leaderTimeout+time.Duration(r.rng.Int64N(int64(pt.leaderTimeout))))
		case eventShortStop:
			r.signal(m.cur, syscall.SIGSTOP)
			m.state, m.at = memberPaused, now.Add(time.Duration(r.rng.Int64N(int64(pt.renewDeadline))))
		case eventTerm:
			r.signal(m.cur, syscall.SIGTERM)
			m.state = memberStopping
		}
	}
	// The faults end: continue and restart everyone now. Members still
	// stepping down are restarted once they have exited.
	for deadline := time.Now().Add(10 * time.Second); ; {
		r.tick(time.Time{}, faultsFrom, faultsUntil)
		if !slices.ContainsFunc(r.members, func(m *processMember) bool { return m.state != memberRunning }) {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("members did not come back within 10s after the faults ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Logf("events %v", events)
}

// target picks a running member that is ready for signals: the leader if
// preferLeader and there is one, else one at random. It returns nil if
// there is none.
func (r *processRun) target(preferLeader bool) *processMember {
	if preferLeader {
		for _, m := range r.leaders() {
			if m.state == memberRunning && m.cur.ready() {
				return m
			}
		}
	}
	var running []*processMember
	for _, m := range r.members {
		if m.state == memberRunning && !m.cur.exited() && m.cur.ready() {
			running = append(running, m)
		}
	}
	if len(running) == 0 {
		return nil
	}
	return running[r.rng.IntN(len(running))]
}

// leaders returns the members whose current incarnation believes it leads
// now: its last term is open and its deadline has not passed.
func (r *processRun) leaders() []*processMember {
	now := monoNow()
	var out []*processMember
	for _, m := range r.members {
		if m.cur == nil || m.cur.exited() {
			continue
		}
		tr, err := readTransitions(m.cur.trans, m.id, m.cur.inc)
		if err != nil {
			r.t.Fatal(err)
		}
		if tr.open && tr.deadline > now {
			out = append(out, m)
		}
	}
	return out
}

// waitOneLeader waits until exactly one member leads, or fails after bound.
func (r *processRun) waitOneLeader(bound time.Duration) string {
	r.t.Helper()
	deadline := time.Now().Add(bound)
	var ls []*processMember
	for time.Now().Before(deadline) {
		r.tick(time.Time{}, 0, 0)
		if ls = r.leaders(); len(ls) == 1 {
			return ls[0].id
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ids []string
	for _, m := range ls {
		ids = append(ids, m.id)
	}
	r.t.Fatalf("not exactly one leader within %v: %v; logs:\n%s", bound, ids, r.logTails(nil))
	return ""
}

// stopAll stops every member gracefully and checks that they exit cleanly.
func (r *processRun) stopAll() {
	for _, m := range r.members {
		for deadline := time.Now().Add(10 * time.Second); !m.cur.ready(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) || m.cur.exited() {
				r.t.Fatalf("%s did not start within 10s (exited: %v); its log ends:\n%s", m.cur.name(), m.cur.exited(), procTail(m.cur.log, 30))
			}
		}
		r.signal(m.cur, syscall.SIGTERM)
	}
	timeout := time.After(processTimings.renewDeadline + 10*time.Second)
	for _, m := range r.members {
		select {
		case <-m.cur.done:
			r.checkCleanExit(m.cur)
		case <-timeout:
			r.t.Fatalf("%s did not exit after SIGTERM; its log ends:\n%s", m.cur.name(), procTail(m.cur.log, 30))
		}
	}
}

func (r *processRun) killAll() {
	for _, c := range r.all {
		if !c.exited() {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}

// check reads every transition file and fails the test on overlapping
// beliefs or terms that did not grow; it also counts the faults and fails
// if too few were injected to prove anything.
func (r *processRun) check() {
	t := r.t
	var segs []beliefSegment
	for _, c := range r.all {
		tr, err := readTransitions(c.trans, c.member, c.inc)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tr.problems {
			t.Errorf("%s: %s", c.name(), p)
		}
		segs = append(segs, tr.segments...)
		if data, err := os.ReadFile(c.log); err == nil && bytes.Contains(data, []byte("WARNING: DATA RACE")) {
			t.Errorf("the race detector fired in %s:\n%s", c.name(), procTail(c.log, 60))
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].start < segs[j].start })
	terms := map[string]bool{}
	overlaps := 0
	for i, s := range segs {
		terms[s.owner()] = true
		for _, p := range segs[:i] {
			if p.end > s.start && p.owner() != s.owner() {
				if overlaps++; overlaps <= 5 {
					t.Errorf("leadership overlap: %s term %d believed it led in %s and %s term %d in %s; logs:\n%s",
						p.name(), p.term, r.span(p.start, p.end), s.name(), s.term, r.span(s.start, s.end),
						r.logTails([]string{p.name(), s.name()}))
				}
			}
		}
		if i > 0 {
			if p := segs[i-1]; p.owner() != s.owner() && s.term <= p.term {
				t.Errorf("term did not grow: %s term %d in %s after %s term %d in %s",
					s.name(), s.term, r.span(s.start, s.end), p.name(), p.term, r.span(p.start, p.end))
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d overlapping pairs of leadership in all", overlaps)
	}

	var total processCounts
	total.Phases = map[string]int64{}
	for _, c := range r.all {
		data, err := os.ReadFile(c.counts)
		if errors.Is(err, os.ErrNotExist) {
			continue // killed before its first report
		}
		if err != nil {
			t.Fatal(err)
		}
		var pc processCounts
		if err := json.Unmarshal(data, &pc); err != nil {
			t.Fatalf("%s: %v", c.counts, err)
		}
		total.StoreCalls += pc.StoreCalls
		total.StoreInjected += pc.StoreInjected
		total.PeerCalls += pc.PeerCalls
		total.PeerInjected += pc.PeerInjected
		total.WallJumps += pc.WallJumps
		for k, v := range pc.Phases {
			total.Phases[k] += v
		}
	}
	var phases int64
	for _, v := range total.Phases {
		phases += v
	}
	t.Logf("%d processes, %d terms; signals %v; store calls %d, %d with injected faults; peer requests %d, %d with injected faults; "+
		"fault phases %d %v; wall-clock jumps %d",
		len(r.all), len(terms), r.signals, total.StoreCalls, total.StoreInjected, total.PeerCalls, total.PeerInjected,
		phases, total.Phases, total.WallJumps)

	// Enough happened to prove something: every kind of signal, store
	// faults, peer traffic and its faults, and terms that changed hands.
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM} {
		if r.signals[unix.SignalName(sig)] == 0 {
			t.Errorf("no %v sent", sig)
		}
	}
	if l := r.least; total.StoreInjected < l.storeFaults || phases < l.phases || total.PeerCalls == 0 || len(terms) < l.terms {
		t.Errorf("the run injected too little to prove anything: %d store faults (want %d), %d fault phases (want %d), %d peer requests (want some), %d terms (want %d)",
			total.StoreInjected, l.storeFaults, phases, l.phases, total.PeerCalls, len(terms), l.terms)
	}
}

// span formats [start, end) as seconds since the run began.
func (r *processRun) span(start, end int64) string {
	sec := func(ns int64) string { return strconv.FormatFloat(float64(ns-r.origin)/1e9, 'f', 4, 64) }
	return "[" + sec(start) + "s, " + sec(end) + "s)"
}

// logTails returns the ends of the named children's logs (all current
// members' if names is nil).
func (r *processRun) logTails(names []string) string {
	var b strings.Builder
	for _, c := range r.all {
		if (names == nil && !c.exited()) || slices.Contains(names, c.name()) {
			fmt.Fprintf(&b, "--- %s\n%s\n", c.name(), procTail(c.log, 25))
		}
	}
	return b.String()
}

func procTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// beliefSegment is a stretch of CLOCK_MONOTONIC time in which one
// incarnation of a member believed it led with a term.
type beliefSegment struct {
	member     string
	inc        int
	term       uint64
	start, end int64
}

func (s beliefSegment) name() string  { return fmt.Sprintf("%s#%d", s.member, s.inc) }
func (s beliefSegment) owner() string { return fmt.Sprintf("%s#%d@%d", s.member, s.inc, s.term) }

// transitions is what one transition file says.
type transitions struct {
	segments []beliefSegment
	open     bool  // the last term has not ended
	deadline int64 // its deadline, if open
	problems []string
}

// readTransitions parses the lines a child wrote:
//
//	L term at deadline   leading: a term starts or its deadline moves
//	E term at deadline   the term ends
//
// A term's belief runs from its start to its deadline, moved by each L,
// and stops at its E if that comes first. An L that comes after the
// deadline it moves (the process was paused between accepting a renewal
// and publishing it) starts a new segment: in between, the member did not
// believe it led. A term never ended (the process was killed) ends at its
// last deadline. A last line without its newline is one a SIGKILL cut
// short, and is ignored.
func readTransitions(path, member string, inc int) (transitions, error) {
	var tr transitions
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return tr, nil
	}
	if err != nil {
		return tr, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var (
		open                bool
		term                uint64
		segStart, segDeadln int64
	)
	closeSeg := func(end int64) {
		if end > segStart {
			tr.segments = append(tr.segments, beliefSegment{member: member, inc: inc, term: term, start: segStart, end: end})
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var (
			kind     string
			lt       uint64
			at, dl   int64
			nScanned int
		)
		nScanned, err = fmt.Sscanf(sc.Text(), "%s %d %d %d", &kind, &lt, &at, &dl)
		if err != nil || nScanned != 4 {
			return tr, fmt.Errorf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		switch {
		case kind == "L" && !open:
			open, term, segStart, segDeadln = true, lt, at, dl
		case kind == "L" && lt != term:
			tr.problems = append(tr.problems, fmt.Sprintf("term %d started while term %d had not ended", lt, term))
			closeSeg(min(at, segDeadln))
			term, segStart, segDeadln = lt, at, dl
		case kind == "L" && at >= segDeadln:
			closeSeg(segDeadln)
			segStart, segDeadln = at, dl
		case kind == "L":
			segDeadln = dl
		case kind == "E" && open && lt == term:
			closeSeg(min(at, segDeadln))
			open = false
		default:
			tr.problems = append(tr.problems, fmt.Sprintf("unexpected line %q (open %v, term %d)", sc.Text(), open, term))
		}
	}
	if open {
		closeSeg(segDeadln)
		tr.open, tr.deadline = true, segDeadln
	}
	return tr, sc.Err()
}

// --- The child ---

func TestElectionProcessChild(t *testing.T) {
	js := os.Getenv(processChildEnv)
	if js == "" {
		t.Skip("runs only as a child process of TestElectionProcess")
	}
	var cfg processConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatalf("%s: %v", processChildEnv, err)
	}
	runProcessChild(t, cfg)
}

func runProcessChild(t *testing.T, cfg processConfig) {
	// SIGTERM steps down; the parent sends it only once the transition
	// file exists.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// One write per line on a file opened for appending: a SIGKILL loses
	// nothing already written, and at worst cuts the line being written.
	trans, err := os.OpenFile(cfg.TransFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()

	mono := newMonoBase()
	// Go's monotonic clock must be CLOCK_MONOTONIC, or the parent would
	// compare readings of different clocks.
	time.Sleep(20 * time.Millisecond)
	mono.check(t)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0xfa17))

	// A fault knob: apply sets one random phase of faults and returns its
	// name and a function that ends it; calls counts requests and how many
	// met an injected fault.
	type knob struct {
		apply func(*rand.Rand) (string, func())
		calls func() (total, injected int64)
	}
	var storeKnob, peerKnob knob

	var drv driver.Store
	switch cfg.Kind {
	case "s3":
		tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone(), faultstore.WithSeed(rng.Uint64()))
		defer tr.CloseIdleConnections() // the child exits leaving no connection behind
		client := s3.New(s3.Options{
			Region:       cfg.Region,
			BaseEndpoint: aws.String(cfg.Endpoint),
			UsePathStyle: true,
			Credentials:  credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, ""),
			HTTPClient:   &http.Client{Transport: tr},
			// As s3store.OpenURL configures its client.
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
			ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		})
		d, err := s3store.New(client, cfg.Bucket, cfg.Prefix, s3store.Options{Endpoint: cfg.Endpoint})
		if err != nil {
			t.Fatal(err)
		}
		drv = d
		storeKnob = knob{
			apply: func(rng *rand.Rand) (string, func()) { return applyHTTPFault(t, tr, rng) },
			calls: transportCalls(tr),
		}
	case "file":
		d, err := filestore.New(cfg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		fs := faultstore.New(d, faultstore.WithSeed(rng.Uint64()))
		var injected atomic.Int64
		fs.SetObserver(func(c faultstore.Call) {
			if c.Injected {
				injected.Add(1)
			}
		})
		drv = fs
		storeKnob = knob{
			apply: func(rng *rand.Rand) (string, func()) { return applyStoreFault(t, fs, rng) },
			calls: func() (int64, int64) { return fs.Counts().Total(), injected.Load() },
		}
	default:
		t.Fatalf("unknown store kind %q", cfg.Kind)
	}
	st := store.New(drv)
	defer st.Close()

	var wallOffset atomic.Int64
	ecfg := election.Config{
		Store:              st,
		ServerID:           cfg.Member,
		FrequentInterval:   cfg.Frequent,
		InfrequentInterval: cfg.Infrequent,
		LeaderTimeout:      cfg.LeaderTimeout,
		RenewDeadline:      cfg.RenewDeadline,
		RetrySchedule:      cfg.Retry,
		PeerTimeout:        cfg.PeerTimeout,
		Logger:             logger,
		Clock:              clock.NewWallOffset(func() time.Duration { return time.Duration(wallOffset.Load()) }),
	}
	var peerClient *http.Client
	if cfg.PeerMode {
		serverTLS, err := tlsutil.LoadServer(cfg.CertFile, cfg.KeyFile, cfg.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		clientTLS, err := tlsutil.LoadClient(cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		ecfg.PeerMode, ecfg.ServerAddr = true, "127.0.0.1:0"
		ecfg.PeerServerTLS, ecfg.PeerClientTLS = serverTLS, clientTLS
		// The client the elector would build, behind a fault transport.
		tr := faultstore.NewTransport(&http.Transport{
			TLSClientConfig:     clientTLS,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     2 * cfg.Infrequent,
			TLSHandshakeTimeout: cfg.PeerTimeout,
		}, faultstore.WithSeed(rng.Uint64()))
		defer tr.CloseIdleConnections()
		peerClient = &http.Client{Transport: tr}
		peerKnob = knob{
			apply: func(rng *rand.Rand) (string, func()) { return applyPeerFault(t, tr, rng) },
			calls: transportCalls(tr),
		}
	}

	e, err := election.New(ctx, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	if peerClient != nil {
		election.SetPeerHTTPClient(e, peerClient)
	}

	election.SetHookTransition(e, func(tr election.Transition) {
		kind := "E"
		if tr.Leading() {
			kind = "L"
		}
		line := fmt.Sprintf("%s %d %d %d\n", kind, tr.Term(), mono.of(tr.At()), mono.of(tr.Deadline()))
		if _, err := trans.Write([]byte(line)); err != nil {
			t.Errorf("recording a transition: %v", err)
		}
	})

	var (
		mu        sync.Mutex
		phases    = map[string]int64{}
		wallJumps int64
	)
	writeCounts := func() {
		mu.Lock()
		pc := processCounts{Phases: maps.Clone(phases), WallJumps: wallJumps}
		mu.Unlock()
		pc.StoreCalls, pc.StoreInjected = storeKnob.calls()
		if peerKnob.calls != nil {
			pc.PeerCalls, pc.PeerInjected = peerKnob.calls()
		}
		data, err := json.Marshal(pc)
		if err != nil {
			t.Error(err)
			return
		}
		tmp := cfg.CountsFile + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, cfg.CountsFile); err != nil {
			t.Error(err)
		}
	}

	// The fault schedules: phases of faults with quiet gaps between them,
	// from FaultsFrom until FaultsUntil. After SIGTERM they go on while
	// the elector steps down, and end with Run.
	faultCtx, endFaults := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	schedule := func(k knob, rng *rand.Rand, jumps bool) {
		defer wg.Done()
		if !sleepMono(faultCtx, cfg.FaultsFrom, cfg.FaultsUntil) {
			return
		}
		for {
			gap := procRandDur(rng, 100*time.Millisecond, time.Second)
			if !sleepMono(faultCtx, monoNow()+int64(gap), cfg.FaultsUntil) {
				return
			}
			name, end := k.apply(rng)
			mu.Lock()
			phases[name]++
			if jumps && rng.IntN(3) == 0 {
				wallOffset.Store(int64(time.Duration(rng.IntN(97)-48) * time.Hour))
				wallJumps++
			}
			mu.Unlock()
			length := procRandDur(rng, 200*time.Millisecond, 2500*time.Millisecond)
			more := sleepMono(faultCtx, monoNow()+int64(length), cfg.FaultsUntil)
			end()
			if !more {
				return
			}
		}
	}
	wg.Add(2)
	go schedule(storeKnob, rand.New(rand.NewPCG(rng.Uint64(), 1)), true)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-faultCtx.Done():
				return
			case <-tick.C:
				writeCounts()
			}
		}
	}()
	if peerKnob.apply != nil {
		wg.Add(1)
		go schedule(peerKnob, rand.New(rand.NewPCG(rng.Uint64(), 2)), false)
	}

	runErr := e.Run(ctx)
	endFaults()
	wg.Wait()
	writeCounts()
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
}

func transportCalls(tr *faultstore.Transport) func() (int64, int64) {
	return func() (int64, int64) {
		c := tr.Counts()
		return c.Total(), c.Total() - c.Get("", faultstore.HTTPForward)
	}
}

// sleepMono waits until CLOCK_MONOTONIC reaches until, and reports whether
// it did before limit and before ctx ended.
func sleepMono(ctx context.Context, until, limit int64) bool {
	end := min(until, limit)
	if d := time.Duration(end - monoNow()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return until < limit && ctx.Err() == nil
}

func procRandDur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// applyHTTPFault adds the rules of one random fault phase to a store
// client's transport and returns its name and a function that removes
// them.
func applyHTTPFault(t *testing.T, tr *faultstore.Transport, rng *rand.Rand) (string, func()) {
	var rules []faultstore.HTTPRule
	var name string
	switch rng.IntN(8) {
	case 0:
		name = "500s"
		rules = append(rules, faultstore.HTTPRule{P: 0.2 + rng.Float64()*0.4, Action: faultstore.HTTPInternalError})
	case 1:
		name = "slow-down"
		rules = append(rules, faultstore.HTTPRule{P: 0.2 + rng.Float64()*0.5, Action: faultstore.HTTPSlowDown})
	case 2:
		name = "delays"
		rules = append(rules, faultstore.HTTPRule{P: 0.5, Action: faultstore.HTTPDelay, Delay: procRandDur(rng, 50*time.Millisecond, 900*time.Millisecond)})
	case 3:
		name = "hangs"
		rules = append(rules, faultstore.HTTPRule{P: 0.2 + rng.Float64()*0.3, Action: faultstore.HTTPHang})
	case 4:
		name = "ambiguous-writes"
		rules = append(rules, faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.Conditional, P: 0.3 + rng.Float64()*0.5,
			Action: faultstore.HTTPApplyThenDrop, Delay: procRandDur(rng, 0, 1500*time.Millisecond)})
	case 5:
		name = "store-black-holed"
		rules = append(rules, faultstore.HTTPRule{P: 1, Action: faultstore.HTTPHang})
	case 6:
		name = "store-down"
		rules = append(rules, faultstore.HTTPRule{P: 1, Action: faultstore.HTTPInternalError})
	default:
		name = "mixed"
		rules = append(rules,
			faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.Conditional, P: 0.2, Action: faultstore.HTTPApplyThenDrop},
			faultstore.HTTPRule{P: 0.1, Action: faultstore.HTTPInternalError},
			faultstore.HTTPRule{P: 0.1, Action: faultstore.HTTPSlowDown},
			faultstore.HTTPRule{P: 0.3, Action: faultstore.HTTPDelay, Delay: procRandDur(rng, 10*time.Millisecond, 300*time.Millisecond)})
	}
	var removes []func()
	for _, r := range rules {
		rm, err := tr.AddRule(r)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		removes = append(removes, rm)
	}
	return name, func() {
		for _, rm := range removes {
			rm()
		}
	}
}

// applyStoreFault sets one random fault phase on a faultstore wrapper of
// the store and returns its name and a function that clears it.
func applyStoreFault(t *testing.T, fs *faultstore.Store, rng *rand.Rand) (string, func()) {
	var name string
	switch rng.IntN(8) {
	case 0:
		name = "transient-errors"
		fs.FailRate(faultstore.AllOps, driver.Transient, 0.2+rng.Float64()*0.4)
	case 1:
		name = "throttled"
		fs.Throttle(faultstore.AllOps, 0.2+rng.Float64()*0.5)
	case 2:
		name = "latency"
		fs.SetLatency(faultstore.AllOps, faultstore.Exponential(procRandDur(rng, 20*time.Millisecond, 300*time.Millisecond)))
	case 3:
		name = "hangs"
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.AllOps, P: 0.2 + rng.Float64()*0.3, Action: faultstore.Hang}); err != nil {
			t.Error(err)
		}
	case 4:
		name = "ambiguous-writes"
		fs.AmbiguousRate(faultstore.Writes, 0.3+rng.Float64()*0.5)
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.Writes, P: 0.2, Action: faultstore.ApplyThenHang,
			Delay: procRandDur(rng, 0, 1500*time.Millisecond)}); err != nil {
			t.Error(err)
		}
	case 5:
		name = "store-black-holed"
		fs.SetPartition(faultstore.BlackHoled)
	case 6:
		name = "store-partitioned"
		fs.SetPartition(faultstore.Partitioned)
	default:
		name = "mixed"
		fs.AmbiguousRate(faultstore.Writes, 0.2)
		fs.FailRate(faultstore.AllOps, driver.Transient, 0.1)
		fs.Throttle(faultstore.AllOps, 0.1)
		fs.SetLatency(faultstore.AllOps, faultstore.Uniform(0, procRandDur(rng, 10*time.Millisecond, 300*time.Millisecond)))
	}
	return name, fs.ClearFaults
}

// applyPeerFault makes a follower's requests to the leader fail for a
// phase: a partition from the leader, errors, slow or lost answers.
func applyPeerFault(t *testing.T, tr *faultstore.Transport, rng *rand.Rand) (string, func()) {
	var r faultstore.HTTPRule
	var name string
	switch rng.IntN(4) {
	case 0:
		name = "peer-partitioned"
		r = faultstore.HTTPRule{P: 1, Action: faultstore.HTTPHang}
	case 1:
		name = "peer-errors"
		r = faultstore.HTTPRule{P: 0.5, Action: faultstore.HTTPInternalError}
	case 2:
		name = "peer-slow"
		r = faultstore.HTTPRule{P: 0.5, Action: faultstore.HTTPDelay, Delay: procRandDur(rng, 50*time.Millisecond, 500*time.Millisecond)}
	default:
		name = "peer-answers-lost"
		r = faultstore.HTTPRule{P: 0.5, Action: faultstore.HTTPApplyThenDrop}
	}
	rm, err := tr.AddRule(r)
	if err != nil {
		t.Error(err)
		return name, func() {}
	}
	return name, rm
}

// The tenure run overlap test. Members are `tenure run` processes of the
// tenure CLI, each with timings of its own, on one file store. Each
// supervises a shell command that appends the wall time (CLOCK_REALTIME,
// which every process of the machine shares; nothing steps it during the
// test) every 10 ms to a file of its own. A command's life covers its first
// to its last line, so two files whose spans intersect are two commands
// that ran at once: the check that matters for a supervised command, which
// keeps running while its supervisor is stopped.

// runMember is one `tenure run` member.
type runMember struct {
	id    string
	flags []string
	cmd   *exec.Cmd
	done  chan struct{}
}

// runTimings returns random valid timings: a LeaderTimeout of 1 to 2.5 s.
func runTimings(rng *rand.Rand) []string {
	lt := procRandDur(rng, time.Second, 2500*time.Millisecond)
	rd := time.Duration(float64(lt) * (0.6 + 0.25*rng.Float64()))
	fr := rd / 4
	return []string{"--leader-timeout", lt.String(), "--renew-deadline", rd.String(), "--frequent", fr.String(),
		"--infrequent", (2 * fr).String(), "--peer-timeout", (lt / 4).String(), "--retry", "0,20ms,100ms"}
}

// longTimings stand for --leader-timeout 60s --renew-deadline 50s beside
// the defaults, scaled down to keep the test short: this member's lease is
// several times the others'.
var longTimings = []string{"--leader-timeout", "6s", "--renew-deadline", "5s", "--frequent", "500ms",
	"--infrequent", "1s", "--peer-timeout", "1s", "--retry", "0,20ms,100ms"}

type runOverlapTest struct {
	t       *testing.T
	exe     string
	dir     string
	members map[string]*runMember
	st      *store.Store
}

func newRunOverlapTest(t *testing.T, exe string) *runOverlapTest {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), "file://"+dir+"/store")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := os.Mkdir(filepath.Join(dir, "cmds"), 0o777); err != nil {
		t.Fatal(err)
	}
	return &runOverlapTest{t: t, exe: exe, dir: dir, members: map[string]*runMember{}, st: st}
}

func (r *runOverlapTest) start(id string, flags []string) {
	t := r.t
	args := append([]string{"run", "--lock", "file://" + r.dir + "/store/leader.json", "--id", id, "--log-level", "info", "--http", "127.0.0.1:0"}, flags...)
	args = append(args, "--", "sh", "-c", `f="$CMDS/$TENURE_SERVER_ID-$TENURE_TERM-$$"; while :; do date +%s%N >> "$f"; sleep 0.01; done`)
	cmd := exec.Command(r.exe, args...)
	cmd.Env = append(os.Environ(), "CMDS="+filepath.Join(r.dir, "cmds"))
	logf, err := os.OpenFile(filepath.Join(r.dir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- start %v\n", flags)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &runMember{id: id, flags: flags, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.done) }()
	r.members[id] = m
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-m.done
	})
}

// leader returns the member the lock names while it is held.
func (r *runOverlapTest) leader() string {
	data, _, err := r.st.Get(r.t.Context(), "leader.json")
	if err != nil {
		return ""
	}
	rec, err := election.DecodeRecord(data)
	if err != nil || rec.Released {
		return ""
	}
	return rec.LeaderID
}

// version returns the lock's version, "" if there is none.
func (r *runOverlapTest) version() string {
	_, v, err := r.st.Get(r.t.Context(), "leader.json")
	if err != nil {
		return ""
	}
	return v
}

// waitWritten waits until the lock's version is no longer v: its holder
// renewed it or another member took it.
func (r *runOverlapTest) waitWritten(v string, bound time.Duration) {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if r.version() != v {
			return
		}
	}
	r.t.Fatalf("the lock was not written within %v\n%s", bound, r.logs())
}

// waitReady waits until member id's current process answers /readyz with
// 200: it leads, or follows a leader it has read.
func (r *runOverlapTest) waitReady(id string, bound time.Duration) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		addr := r.httpAddr(id)
		if addr == "" {
			continue
		}
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
	}
	r.t.Fatalf("%s not ready (leading or following) within %v\n%s", id, bound, r.logs())
}

// httpAddr returns the address member id's current process serves HTTP
// on, from its log; "" until it says.
func (r *runOverlapTest) httpAddr(id string) string {
	b, err := os.ReadFile(filepath.Join(r.dir, id+".log"))
	if err != nil {
		return ""
	}
	if i := bytes.LastIndex(b, []byte("--- start ")); i >= 0 {
		b = b[i:]
	}
	_, rest, ok := bytes.Cut(b, []byte(`msg="serving HTTP" addr=`))
	if !ok {
		return ""
	}
	addr, _, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return ""
	}
	return string(addr)
}

func (r *runOverlapTest) waitLeader(want string, bound time.Duration) string {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if l := r.leader(); l != "" && (want == "" || l == want) {
			return l
		}
	}
	r.t.Fatalf("no leader %q within %v\n%s", want, bound, r.logs())
	return ""
}

func (r *runOverlapTest) kill(id string) {
	m := r.members[id]
	_ = m.cmd.Process.Kill()
	<-m.done
}

func (r *runOverlapTest) stopAll() {
	for _, m := range r.members {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, m := range r.members {
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			r.t.Errorf("%s did not exit after SIGTERM", m.id)
		}
	}
}

type cmdSpan struct {
	name       string
	pid        int
	start, end int64
}

// check fails the test if two commands ran at once, or if a command's
// process is still alive after every member has exited.
func (r *runOverlapTest) check(minCommands int) {
	t := r.t
	files, err := filepath.Glob(filepath.Join(r.dir, "cmds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var spans []cmdSpan
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := cmdSpan{name: filepath.Base(f)}
		parts := strings.Split(s.name, "-")
		s.pid, _ = strconv.Atoi(parts[len(parts)-1])
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			v, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				continue // a line cut short by SIGKILL
			}
			if s.start == 0 {
				s.start = v
			}
			s.end = v
		}
		if s.start != 0 {
			spans = append(spans, s)
		}
	}
	if len(spans) < minCommands {
		t.Fatalf("%d commands ran; want at least %d\n%s", len(spans), minCommands, r.logs())
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		for j := 0; j < i; j++ {
			if spans[j].end >= spans[i].start {
				t.Errorf("two commands ran at once: %s until %s, %s from %s (%v of overlap)\n%s",
					spans[j].name, time.Unix(0, spans[j].end).Format("15:04:05.000"),
					spans[i].name, time.Unix(0, spans[i].start).Format("15:04:05.000"),
					time.Duration(spans[j].end-spans[i].start), r.logs())
			}
		}
	}
	for _, s := range spans {
		for end := time.Now().Add(30 * time.Second); s.pid > 0 && syscall.Kill(s.pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				_ = syscall.Kill(-s.pid, syscall.SIGKILL)
				t.Errorf("the command %s (pid %d) outlived its tenure run", s.name, s.pid)
				break
			}
		}
	}
}

func (r *runOverlapTest) logs() string {
	var b strings.Builder
	for id := range r.members {
		fmt.Fprintf(&b, "--- %s:\n%s", id, procTail(filepath.Join(r.dir, id+".log"), 15))
	}
	return b.String()
}

func TestElectionProcessRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tenure run processes for about a minute")
	}
	exe := filepath.Join(t.TempDir(), "tenure")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building tenure needs the go command: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", exe, "github.com/tenure-io/tenure/cmd/tenure").CombinedOutput(); err != nil {
		t.Fatalf("building tenure: %v\n%s", err, out)
	}
	seed := rand.Uint64()
	if s := os.Getenv(processSeedEnv); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (%s=%d replays the schedule)", seed, processSeedEnv, seed)

	// A member whose lease is much longer than the others' leads and
	// pauses for longer than the others' LeaderTimeout but shorter than
	// its own RenewDeadline. Its command keeps running meanwhile (it is
	// not in the paused process's group), and the member still leads when
	// it resumes: the others must wait for the lease the holder recorded,
	// not their own.
	t.Run("mixed timings", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newRunOverlapTest(t, exe)
		r.start("long", longTimings)
		r.waitLeader("long", 30*time.Second)
		for i := 1; i <= 3; i++ {
			r.start(fmt.Sprintf("m%d", i), runTimings(rng))
		}
		for i := 1; i <= 3; i++ {
			r.waitReady(fmt.Sprintf("m%d", i), 30*time.Second) // it follows
		}
		for round := 0; round < 2; round++ {
			if r.leader() != "long" {
				break
			}
			v := r.version()
			p := r.members["long"].cmd.Process
			_ = p.Signal(syscall.SIGSTOP)
			// The pause under test: longer than the others' LeaderTimeout
			// (at most 2.5 s), shorter than the holder's RenewDeadline.
			time.Sleep(3500 * time.Millisecond)
			_ = p.Signal(syscall.SIGCONT)
			r.waitWritten(v, 30*time.Second) // renewed, or taken
		}
		r.stopAll()
		r.check(1)
	})

	// Members with random timings; the leader's tenure run is SIGKILLed
	// again and again (its command must die with it) and so are
	// followers; killed members come back with new timings.
	t.Run("sigkill", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(seed, 2))
		r := newRunOverlapTest(t, exe)
		ids := []string{"long", "m1", "m2", "m3"}
		for _, id := range ids {
			flags := runTimings(rng)
			if id == "long" {
				flags = longTimings
			}
			r.start(id, flags)
		}
		r.waitLeader("", 30*time.Second)
		kills := 0
		for end := time.Now().Add(40 * time.Second); time.Now().Before(end); {
			time.Sleep(procRandDur(rng, time.Second, 3*time.Second))
			victim := r.leader()
			if victim == "" || rng.IntN(10) < 3 {
				victim = ids[rng.IntN(len(ids))]
			}
			r.kill(victim)
			kills++
			time.Sleep(procRandDur(rng, 200*time.Millisecond, 1500*time.Millisecond))
			flags := runTimings(rng)
			if victim == "long" {
				flags = longTimings
			}
			r.start(victim, flags)
		}
		r.waitLeader("", 30*time.Second)
		r.stopAll()
		t.Logf("%d kills", kills)
		r.check(3)
	})
}
