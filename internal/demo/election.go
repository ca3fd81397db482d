// Package demo is tenure demo: three members of one election on a local
// directory through a failover and a handover, measured, then a
// replicated key-value group through a leader's death and a cold restart,
// then a group serving etcd's API to the etcd Go client through its
// leader's stop.
// Its members run inside this process, on stores wrapped to count their
// requests and to cut a member off as a crash would.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
)

// The demo's timings: short, so that it finishes in seconds, and valid by
// the same rules as production timings.
var demoTimings = election.Config{
	FrequentInterval:   250 * time.Millisecond,
	InfrequentInterval: time.Second,
	LeaderTimeout:      1500 * time.Millisecond,
	RenewDeadline:      time.Second,
	RetrySchedule:      []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond},
	PeerTimeout:        500 * time.Millisecond,
}

// Config is a run of the demo.
type Config struct {
	// Store is the store URL to run on; "": a new temporary directory,
	// removed afterwards.
	Store string
	// KV runs the key-value part after the election part.
	KV bool
	// KVWrites is how many keys the key-value part writes before its
	// leader is killed (half as many after); at least 2.
	KVWrites int
	// Etcd runs the etcd part last: the etcd Go client through the
	// stop of the leader of a group serving etcd's API.
	Etcd bool
	Out  io.Writer    // the story
	Log  *slog.Logger // the members' logs; nil: none
}

// Run runs the demo: three members of one election through a failover
// and a handover, measured, then (with KV) a key-value group through a
// leader's death and a cold restart, then (with Etcd) the etcd client
// through the stop of an etcd-API group's leader.
func Run(ctx context.Context, c Config) error {
	if c.Store == "" {
		dir, err := os.MkdirTemp("", "tenure-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.Store = "file://" + dir
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &demo{out: c.Out, start: time.Now(), log: log}
	if err := d.run(ctx, c.Store); err != nil {
		return err
	}
	if c.KV {
		if err := d.runKV(ctx, c.Store, c.KVWrites); err != nil {
			return err
		}
	}
	if c.Etcd {
		return d.runEtcd(ctx, c.Store)
	}
	return nil
}

type demo struct {
	out   io.Writer
	start time.Time
	log   *slog.Logger

	parts int // parts run after the election part

	mu   sync.Mutex
	most int // the most members seen leading at one moment
}

// nextPart numbers a part after the election part, which is part 1.
func (d *demo) nextPart() int {
	d.parts++
	return d.parts + 1
}

func (d *demo) maxLeaders() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.most
}

// monitor samples every member's IsLeader every millisecond until ctx ends.
func (d *demo) monitor(ctx context.Context, members func() []*demoMember) {
	for ctx.Err() == nil {
		n := 0
		for _, m := range members() {
			if m.e.IsLeader() {
				n++
			}
		}
		d.mu.Lock()
		d.most = max(d.most, n)
		d.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

type demoMember struct {
	id     string
	fs     *faultstore.Store
	e      *election.Elector
	cancel context.CancelFunc
	done   chan error

	mu        sync.Mutex
	lastRenew time.Time // end of the last successful renewal
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.2fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context, url string) error {
	t := demoTimings
	fmt.Fprintf(d.out, "tenure demo: three members elect a leader through a lock record in %s\n", url)
	fmt.Fprintf(d.out, "timings: the leader renews every %v and fences itself %v after its last successful renewal;\n", t.FrequentInterval, t.RenewDeadline)
	fmt.Fprintf(d.out, "         followers take the lock when it has not changed for %v (LeaderTimeout), and follow\n", t.LeaderTimeout)
	fmt.Fprintf(d.out, "         the leader by long-polling its HTTPS peer endpoint on loopback (peer mode)\n\n")

	ca, err := tlsutil.NewCA("tenure demo")
	if err != nil {
		return err
	}
	serverTLS, err := ca.ServerConfig(false, "127.0.0.1")
	if err != nil {
		return err
	}
	clientTLS, err := ca.ClientConfig(false)
	if err != nil {
		return err
	}
	base, err := store.Open(ctx, url)
	if err != nil {
		return err
	}
	// Each member reaches the store through its own counting wrapper,
	// which also lets the demo cut one off to simulate a crash.
	if _, err := store.Probe(ctx, base, 1); err != nil {
		base.Close()
		return err
	}
	drv := base.Driver()
	defer base.Close()

	var members []*demoMember
	stopAll := func() {
		for _, m := range members {
			m.cancel()
		}
		for _, m := range members {
			<-m.done
		}
	}
	defer stopAll()
	start := func(id string) (*demoMember, error) {
		m := &demoMember{id: id, fs: faultstore.New(nopClose{drv}), done: make(chan error, 1)}
		m.fs.SetObserver(func(c faultstore.Call) {
			if c.Op == faultstore.OpPutCAS && c.Err == nil {
				m.mu.Lock()
				m.lastRenew = time.Now()
				m.mu.Unlock()
			}
		})
		cfg := t
		cfg.Store = store.New(m.fs)
		cfg.ServerID, cfg.ServerAddr = id, "127.0.0.1:0"
		cfg.LockfilePath = "demo/leader.json"
		cfg.PeerMode, cfg.PeerServerTLS, cfg.PeerClientTLS = true, serverTLS, clientTLS
		cfg.Logger = d.log
		el, err := election.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		m.e = el
		rctx, cancel := context.WithCancel(ctx)
		m.cancel = cancel
		go func() { m.done <- el.Run(rctx) }()
		members = append(members, m)
		return m, nil
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := start(id); err != nil {
			return err
		}
	}
	mctx, stopMonitor := context.WithCancel(ctx)
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		d.monitor(mctx, func() []*demoMember { return members })
	}()
	defer func() { stopMonitor(); <-monitorDone }()

	leader, err := d.waitLeader(ctx, members, nil, 10*time.Second)
	if err != nil {
		return err
	}
	term1 := leader.e.Term()
	d.say("%s leads (term %d)", leader.id, term1)

	// Let the group settle into peer mode, then count store requests.
	time.Sleep(2 * t.FrequentInterval)
	for _, m := range members {
		m.fs.Reset()
	}
	const window = 3 * time.Second
	time.Sleep(window)
	d.say("store requests per hour, measured over %v of stable leadership and scaled to an hour:", window)
	for _, m := range members {
		role := "follower"
		if m.e.IsLeader() {
			role = "leader"
		}
		n := m.fs.Counts().Total()
		fmt.Fprintf(d.out, "          %s (%s): %6.0f/h  (%s)\n", m.id, role, float64(n)*float64(time.Hour)/float64(window), oneLine(m.fs.Counts()))
	}

	// Crash: the leader loses the store and stops without releasing.
	leader.fs.SetPartition(faultstore.Partitioned)
	killed := time.Now()
	leader.cancel()
	<-leader.done
	leader.done <- nil
	leader.mu.Lock()
	lastRenew := leader.lastRenew
	leader.mu.Unlock()
	d.say("killed %s: it can no longer reach the store and never released the lock", leader.id)
	next, err := d.waitLeader(ctx, members, leader, 20*time.Second)
	if err != nil {
		return err
	}
	gap := time.Since(killed)
	term2 := next.e.Term()
	limit := lastRenew.Add(t.LeaderTimeout).Sub(killed)
	d.say("%s leads (term %d): %v without a leader; the lease ran out %v after the kill (last renewal + LeaderTimeout)",
		next.id, next.e.Term(), gap.Round(time.Millisecond), limit.Round(time.Millisecond))

	// Graceful handover: the leader stops and releases. The gap runs from
	// the moment the old leader stops leading to the new one's start.
	time.Sleep(4 * t.FrequentInterval)
	handover := make(chan [2]time.Time, 1)
	go func() {
		var stopped time.Time
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			if stopped.IsZero() && !next.e.IsLeader() {
				stopped = time.Now()
			}
			for _, m := range members {
				if m != next && m.e.IsLeader() && !stopped.IsZero() {
					handover <- [2]time.Time{stopped, time.Now()}
					return
				}
			}
		}
		handover <- [2]time.Time{}
	}()
	next.cancel()
	<-next.done
	next.done <- nil
	h := <-handover
	if h[1].IsZero() {
		return fmt.Errorf("demo: no leader after the handover")
	}
	third, err := d.waitLeader(ctx, members, next, time.Second)
	if err != nil {
		return err
	}
	d.say("stopped %s gracefully (it released the lock); %s leads (term %d): %v without a leader",
		next.id, third.id, third.e.Term(), h[1].Sub(h[0]).Round(10*time.Microsecond))
	if n := d.maxLeaders(); n > 1 {
		return fmt.Errorf("demo: %d members led at once", n)
	}
	terms := []uint64{term1, term2, third.e.Term()}
	if !(terms[0] < terms[1] && terms[1] < terms[2]) {
		return fmt.Errorf("demo: terms did not grow: %v", terms)
	}
	fmt.Fprintf(d.out, "\ndone: sampled every millisecond, no two members ever led at once; the terms grew %d, %d, %d,\n", terms[0], terms[1], terms[2])
	fmt.Fprintln(d.out, "and the application gets the term to fence its writes with.")
	return nil
}

func (d *demo) waitLeader(ctx context.Context, members []*demoMember, not *demoMember, limit time.Duration) (*demoMember, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var leaders []*demoMember
		for _, m := range members {
			if m.e.IsLeader() {
				leaders = append(leaders, m)
			}
		}
		if len(leaders) > 1 {
			return nil, fmt.Errorf("demo: two leaders at once: %s and %s", leaders[0].id, leaders[1].id)
		}
		if len(leaders) == 1 && leaders[0] != not {
			return leaders[0], nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil, fmt.Errorf("demo: no leader after %v", limit)
}

func oneLine(s faultstore.Snapshot) string {
	var parts []string
	for k, n := range s {
		parts = append(parts, fmt.Sprintf("%s %s: %d", k.Op, k.Result, n))
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// nopClose shares one driver among the members; the demo closes it once.
type nopClose struct{ driver.Store }

func (nopClose) Close() error { return nil }
