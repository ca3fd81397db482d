package election_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store/faultstore"
)

// Bounds at the defaults: the holder's lease, and a polling follower's
// longest pause between reads (a quarter of the lease, with jitter).
const (
	defLease   = election.DefaultLeaderTimeout
	defPollMax = election.DefaultLeaderTimeout / 4 * 12 / 10
	// spreadMax is the longest a follower waits before taking a released
	// lock (FrequentInterval/50), so that several do not stampede.
	spreadMax = election.DefaultFrequentInterval / 50
)

// lastInterval returns a copy of id's latest interval of leadership, or
// nil.
func (c *cluster) lastInterval(id string) *interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last *interval
	for _, iv := range c.intervals {
		if iv.member == id {
			cp := *iv
			last = &cp
		}
	}
	return last
}

// firstAfter returns a copy of the first interval of a member other than
// id that started after t, or nil.
func (c *cluster) firstAfter(id string, t time.Time) *interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, iv := range c.intervals {
		if iv.member != id && iv.start.After(t) {
			cp := *iv
			return &cp
		}
	}
	return nil
}

// TestPausedLeaderIsReplaced: a leader whose calls stop reaching the store
// for 20 s (a paused process: its record stops changing) is replaced by a
// follower within the lease and one poll of its last renewal, though the
// followers saw it renewing just before and read only a few times a lease.
func TestPausedLeaderIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		ms := map[string]*member{}
		for _, id := range []string{"a", "b", "c"} {
			ms[id] = c.add(id, nil)
		}
		for round := range 8 {
			// Long enough in the stable state for every follower to be
			// polling at its stable pace.
			time.Sleep(time.Minute + time.Duration(round)*1700*time.Millisecond)
			l := c.waitLeader(time.Minute)
			paused := time.Now()
			l.fs.SetPartition(faultstore.BlackHoled)
			time.Sleep(20 * time.Second)
			l.fs.SetPartition(faultstore.Connected)
			old := c.lastInterval(l.id)
			// The start of its last renewal is RenewDeadline before its
			// last deadline.
			lastRenewal := old.deadline.Add(-election.DefaultRenewDeadline)
			next := c.firstAfter(l.id, paused)
			if next == nil {
				t.Fatalf("round %d: nobody took over from %s, paused for 20 s", round, l.id)
			}
			if took := next.start.Sub(lastRenewal); took > defLease+defPollMax {
				t.Errorf("round %d: %s took over %v after %s's last renewal; want within the lease and one poll (%v)",
					round, next.member, took, l.id, defLease+defPollMax)
			}
		}
		c.stopAll()
		c.checkOverlap()
	})
}

// TestStoreOnlyCost: a stable group of three polling the store costs at
// most 2,880 store requests an hour at the defaults (S3lect's cost for the
// same group): the leader renews just below every FrequentInterval and
// each follower reads four times per lease.
func TestStoreOnlyCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		members := []*member{c.add("a", nil)}
		c.waitLeader(time.Minute)
		members = append(members, c.add("b", nil), c.add("c", nil))
		time.Sleep(5 * time.Minute)
		for _, m := range members {
			m.fs.Reset()
		}
		time.Sleep(time.Hour)
		var lead, fol, total int64
		for _, m := range members {
			n := m.fs.Counts().Total()
			total += n
			if m.e.IsLeader() {
				lead += n
			} else {
				fol += n
			}
		}
		c.stopAll()
		c.checkOverlap()
		t.Logf("store requests in one hour: %d (leader %d, followers %d each on average)", total, lead, fol/2)
		if total > 2880 {
			t.Errorf("a stable group of 3 made %d store requests in an hour; want at most 2880", total)
		}
		// 3600/5 renewals; 2 x 3600/3.75 reads.
		if lead > 3600/5+1 {
			t.Errorf("the leader made %d store requests in an hour; want at most one renewal per FrequentInterval (720)", lead)
		}
		if lead < 700 || fol < 1700 {
			t.Errorf("leader %d, followers %d requests: too few to be renewing and polling as designed", lead, fol)
		}
	})
}

// TestFailoverAndHandoverFigures measures, over many rounds in virtual
// time at the defaults (three members polling the store), how long the
// group is without a leader after the leader crashes and after it stops
// gracefully, and checks each against its bound: a crash is followed by
// a new leader within the lease and one poll of the crashed leader's last
// renewal; a release is taken within one poll and the spread.
func TestFailoverAndHandoverFigures(t *testing.T) {
	var failover, handover []time.Duration
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		ms := map[string]*member{}
		for _, id := range []string{"a", "b", "c"} {
			ms[id] = c.add(id, nil)
		}
		for round := range 100 {
			time.Sleep(time.Minute + time.Duration(round%7)*1300*time.Millisecond)
			c.waitLeader(time.Minute)
			// Let the faulty store seeds and timers drift the phase.
			time.Sleep(time.Duration(round%5) * 977 * time.Millisecond)
			l := c.waitLeader(time.Minute)
			now := time.Now()
			crash := round%2 == 0
			if crash {
				l.crash(t)
			} else {
				l.stop(t)
			}
			nl := c.waitLeader(time.Minute)
			took := time.Since(now)
			old := c.lastInterval(l.id)
			if crash {
				failover = append(failover, took)
				lastRenewal := old.deadline.Add(-election.DefaultRenewDeadline)
				if b := defLease + defPollMax; c.lastInterval(nl.id).start.Sub(lastRenewal) > b {
					t.Errorf("round %d: failover %v after the last renewal; bound %v", round, c.lastInterval(nl.id).start.Sub(lastRenewal), b)
				}
			} else {
				handover = append(handover, took)
				if b := defPollMax + spreadMax; took > b {
					t.Errorf("round %d: handover took %v; bound %v", round, took, b)
				}
			}
			ms[l.id] = c.add(l.id, nil)
		}
		c.stopAll()
		c.checkOverlap()
	})
	t.Logf("failover after a crash, %d rounds: %s", len(failover), figures(failover))
	t.Logf("graceful handover, %d rounds: %s", len(handover), figures(handover))
}

func figures(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	return fmt.Sprintf("min/median/max %s/%s/%s s", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// TestOutageToleranceBound checks both sides of the documented bound: a
// store outage (calls failing fast) that starts o after the start of the
// leader's last renewal is ridden out, with no gap in leadership, if it
// ends before that renewal's start plus RenewDeadline; one that lasts past
// it ends the term at that moment, never later, and never lets two lead.
// The outage starts just before the next renewal can be due (at 90 % of
// FrequentInterval), the worst phase: the bound is then RenewDeadline -
// 0.9 FrequentInterval = 5.5 s with the defaults.
func TestOutageToleranceBound(t *testing.T) {
	const (
		freq     = election.DefaultFrequentInterval
		deadline = election.DefaultRenewDeadline
		o        = freq * 9 / 10
	)
	for _, tc := range []struct {
		name  string
		delta time.Duration // outage length minus the bound
		keeps bool
	}{
		{"just shorter", -100 * time.Millisecond, true},
		{"just longer", 100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 5 {
				synctest.Test(t, func(t *testing.T) {
					c := newCluster(t, election.Config{})
					a := c.add("a", nil)
					c.waitLeader(time.Minute)
					c.add("b", nil)
					time.Sleep(time.Minute + time.Duration(round)*1300*time.Millisecond)
					// Wait for a renewal and take its start.
					iv := c.lastInterval("a")
					d0 := iv.deadline
					for c.lastInterval("a").deadline == d0 {
						time.Sleep(time.Millisecond)
					}
					start := c.lastInterval("a").deadline.Add(-deadline)
					time.Sleep(time.Until(start.Add(o)))
					a.fs.SetPartition(faultstore.Partitioned)
					end := start.Add(deadline + tc.delta)
					gap := false
					for time.Now().Before(end) {
						if !a.e.IsLeader() {
							gap = true
						}
						time.Sleep(10 * time.Millisecond)
					}
					a.fs.SetPartition(faultstore.Connected)
					time.Sleep(time.Minute)
					last := c.lastInterval("a")
					if tc.keeps {
						if gap || last.term != iv.term || !a.e.IsLeader() {
							t.Errorf("round %d: an outage ending %v before the deadline cost the leadership (gap %v, term %d then %d)",
								round, -tc.delta, gap, iv.term, last.term)
						}
					} else {
						term := *iv
						for _, x := range c.intervalsOf("a") {
							if x.term == iv.term {
								term = x
							}
						}
						if term.end.After(start.Add(deadline)) || !term.end.After(start.Add(o)) {
							t.Errorf("round %d: the term ended at %v after the renewal's start; want at the deadline %v",
								round, term.end.Sub(start), deadline)
						}
					}
					c.stopAll()
					c.checkOverlap()
				})
			}
		})
	}
}

// intervalsOf returns id's intervals of leadership.
func (c *cluster) intervalsOf(id string) []interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []interval
	for _, iv := range c.intervals {
		if iv.member == id {
			out = append(out, *iv)
		}
	}
	return out
}
