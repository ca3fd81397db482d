package election_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// cluster is a group of electors in one process, each reaching one shared
// memstore through its own faultstore, with an overlap checker that records
// every interval in which a member believed it led.
type cluster struct {
	t     *testing.T
	inner *memstore.Store
	raw   *store.Store // the shared store without faults, for inspection
	base  election.Config

	mu        sync.Mutex
	members   []*member
	intervals []*interval
}

type member struct {
	id     string
	fs     *faultstore.Store
	e      *election.Elector
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	started int // OnStartedLeading calls
	stopped int // OnStoppedLeading calls
	newLead []string
}

type interval struct {
	member     string
	term       uint64
	start, end time.Time
	open       bool
	// deadline is the last deadline the member set in this term (end may
	// be earlier, when it stepped down first).
	deadline time.Time
}

func newCluster(t *testing.T, base election.Config) *cluster {
	inner := memstore.New()
	c := &cluster{t: t, inner: inner, raw: store.New(inner), base: base}
	return c
}

func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// add creates a member and starts it; cfg changes its config.
func (c *cluster) add(id string, change func(*election.Config)) *member {
	c.t.Helper()
	seed := uint64(len(c.members)+1) * 7919
	m := &member{id: id, fs: faultstore.New(c.inner, faultstore.WithSeed(seed)), done: make(chan error, 1)}
	cfg := c.base
	cfg.Store = store.New(m.fs)
	cfg.ServerID = id
	cfg.ServerAddr = id + ":0"
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(c.t)
	}
	cfg.OnStartedLeading = func(ctx context.Context) {
		m.mu.Lock()
		m.started++
		m.mu.Unlock()
		<-ctx.Done()
	}
	cfg.OnStoppedLeading = func() {
		m.mu.Lock()
		m.stopped++
		m.mu.Unlock()
	}
	cfg.OnNewLeader = func(leaderID, _ string, term uint64) {
		m.mu.Lock()
		m.newLead = append(m.newLead, fmt.Sprintf("%s@%d", leaderID, term))
		m.mu.Unlock()
	}
	if change != nil {
		change(&cfg)
	}
	e, err := election.New(c.t.Context(), cfg)
	if err != nil {
		c.t.Fatalf("New(%s): %v", id, err)
	}
	m.e = e
	election.SetHookTransition(e, func(tr election.Transition) { c.record(id, tr) })
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- e.Run(ctx) }()
	c.mu.Lock()
	c.members = append(c.members, m)
	c.mu.Unlock()
	return m
}

func (c *cluster) record(id string, tr election.Transition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var open *interval
	for _, iv := range c.intervals {
		if iv.member == id && iv.open {
			open = iv
		}
	}
	switch {
	case tr.Leading() && open == nil:
		c.intervals = append(c.intervals, &interval{member: id, term: tr.Term(), start: tr.At(), end: tr.Deadline(), open: true, deadline: tr.Deadline()})
	case tr.Leading():
		if tr.Term() != open.term {
			c.t.Errorf("%s: deadline moved for term %d while term %d is open", id, tr.Term(), open.term)
		}
		open.end, open.deadline = tr.Deadline(), tr.Deadline()
	case open != nil:
		// Belief ends at the step-down or at the deadline, whichever
		// came first: IsLeader is false past the deadline.
		if tr.At().Before(open.end) {
			open.end = tr.At()
		}
		open.open = false
	}
}

func (m *member) callbacks() (started, stopped int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started, m.stopped
}

// stop stops a member gracefully (release).
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	if err := <-m.done; err != nil {
		t.Errorf("%s: Run returned %v", m.id, err)
	}
	m.done <- nil // for later stops
}

// crash cuts a member off from the store and stops it: it cannot release.
func (m *member) crash(t *testing.T) {
	t.Helper()
	m.fs.SetPartition(faultstore.Partitioned)
	m.stop(t)
}

func (c *cluster) stopAll() {
	for _, m := range c.members {
		m.cancel()
	}
	for _, m := range c.members {
		<-m.done
		m.done <- nil
	}
}

// leaders returns the members that report IsLeader now.
func (c *cluster) leaders() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*member
	for _, m := range c.members {
		if m.e.IsLeader() {
			out = append(out, m)
		}
	}
	return out
}

// waitLeader waits (in the bubble's time) until exactly one member leads,
// or fails after limit.
func (c *cluster) waitLeader(limit time.Duration) *member {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ls := c.leaders(); len(ls) == 1 {
			return ls[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no single leader within %v: leaders %v", limit, c.leaderIDs())
	return nil
}

func (c *cluster) leaderIDs() []string {
	var ids []string
	for _, m := range c.leaders() {
		ids = append(ids, m.id)
	}
	return ids
}

// checkOverlap fails the test if two intervals of leadership overlap or if
// terms do not grow with time.
func (c *cluster) checkOverlap() int {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ivs := slices.Clone(c.intervals)
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
	// latest is the interval, of those started so far, that ends last: a
	// long one may overlap one that is not its immediate successor.
	var latest *interval
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		if latest == nil || prev.end.After(latest.end) {
			latest = prev
		}
		if cur.start.Before(latest.end) {
			c.t.Errorf("leadership overlap: %s term %d [%v, %v] and %s term %d from %v",
				latest.member, latest.term, latest.start.Format("15:04:05.000"), latest.end.Format("15:04:05.000"),
				cur.member, cur.term, cur.start.Format("15:04:05.000"))
		}
		if cur.term <= prev.term {
			c.t.Errorf("term did not grow: %s term %d after %s term %d", cur.member, cur.term, prev.member, prev.term)
		}
	}
	return len(ivs)
}

// lockRecord reads the record as it is in the store.
func (c *cluster) lockRecord() (election.Record, bool) {
	c.t.Helper()
	key := c.base.LockfilePath
	if key == "" {
		key = election.DefaultLockfilePath
	}
	data, _, err := c.raw.Get(context.Background(), key)
	if err != nil {
		return election.Record{}, false
	}
	rec, err := election.DecodeRecord(data)
	if err != nil {
		c.t.Fatalf("the lock record does not decode: %v", err)
	}
	return rec, true
}

// wallClock is the real clock (the bubble's, under synctest) with its wall
// time shifted by offset().
func clockWithWall(offset func() time.Duration) election.Clock {
	return clock.NewWallOffset(offset)
}
