package election_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// Tests run in synctest bubbles with the default timings (5 s, 30 s, 15 s,
// 10 s): virtual time passes only when every goroutine waits, so an hour of
// election takes milliseconds and every bound below is exact, not a guess
// about the machine's speed.

func TestSingleMemberLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		m := c.add("a", nil)
		if err := m.e.WaitForLeadership(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !m.e.IsLeader() || m.e.Term() != 1 {
			t.Fatalf("IsLeader %v term %d; want true, 1", m.e.IsLeader(), m.e.Term())
		}
		if id, addr, ok := m.e.Leader(); !ok || id != "a" || addr != "a:0" {
			t.Fatalf("Leader() = %q %q %v", id, addr, ok)
		}
		rec, ok := c.lockRecord()
		if !ok || rec.LeaderID != "a" || rec.Term != 1 || rec.Released || rec.Session != m.e.Session() || rec.Nonce == "" {
			t.Fatalf("lock record %+v", rec)
		}
		st := m.e.Status()
		if !st.Leader || st.Mode != "leader" || st.Term != 1 || st.Remaining <= 0 || st.Remaining > election.DefaultRenewDeadline {
			t.Fatalf("Status %+v", st)
		}
		m.stop(t)
		if m.e.IsLeader() {
			t.Fatal("IsLeader after Stop")
		}
		rec, _ = c.lockRecord()
		if !rec.Released || rec.Term != 1 {
			t.Fatalf("after Stop the record is %+v; want released, term 1", rec)
		}
		if started, stopped := m.callbacks(); started != 1 || stopped != 1 {
			t.Fatalf("callbacks: started %d stopped %d", started, stopped)
		}
		c.checkOverlap()
	})
}

func TestRecordIsReadableByS3lect(t *testing.T) {
	rec := election.Record{LeaderID: "server-001", LeaderAddr: "10.0.1.42:8443", LastUpdated: time.Date(2026, 11, 21, 10, 30, 45, 0, time.UTC), Term: 7}
	s := string(rec.Encode())
	for _, want := range []string{`"leaderID":"server-001"`, `"leaderAddr":"10.0.1.42:8443"`, `"lastUpdated":"2026-11-21T10:30:45Z"`, `"term":7`} {
		if !strings.Contains(s, want) {
			t.Errorf("record %s lacks %s", s, want)
		}
	}
	// And S3lect's own lockfile decodes, as a term-0 record.
	old, err := election.DecodeRecord([]byte(`{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2024-10-27T10:30:45Z"}`))
	if err != nil || old.LeaderID != "server-001" || old.Term != 0 {
		t.Fatalf("S3lect lockfile: %+v, %v", old, err)
	}
}

func TestDecodeRecordRefusesBadInput(t *testing.T) {
	cases := map[string]string{
		"empty":          ``,
		"not JSON":       `hello`,
		"array":          `[1,2]`,
		"truncated":      `{"leaderID":"a"`,
		"trailing data":  `{"leaderID":"a"} {}`,
		"wrong type":     `{"leaderID":"a","term":"seven"}`,
		"negative term":  `{"leaderID":"a","term":-1}`,
		"no leader":      `{"term":3}`,
		"negative lease": `{"leaderID":"a","leaseMillis":-5}`,
		"huge":           `{"leaderID":"` + strings.Repeat("x", election.MaxRecordSize) + `"}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := election.DecodeRecord([]byte(in)); err == nil || !strings.Contains(err.Error(), "lock record") {
				t.Fatalf("DecodeRecord(%.40q) = %v; want an error naming the lock record", in, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	mem := store.New(memstore.New())
	cases := []struct {
		name  string
		cfg   election.Config
		field string // must be named in the error; "" means valid
	}{
		{"defaults", election.Config{Store: mem, ServerID: "a"}, ""},
		{"no store", election.Config{ServerID: "a"}, "Store or StoreURL"},
		// A path is not taken for an S3 bucket.
		{"store URL without a scheme", election.Config{StoreURL: "./data", ServerID: "a"}, `StoreURL "./data": no scheme`},
		{"lock path with ..", election.Config{Store: mem, ServerID: "a", LockfilePath: "../leader.json"}, `LockfilePath "../leader.json"`},
		{"lock path with an empty segment", election.Config{Store: mem, ServerID: "a", LockfilePath: "jobs//leader.json"}, `LockfilePath "jobs//leader.json"`},
		{"lock path with a leading /", election.Config{Store: mem, ServerID: "a", LockfilePath: "/leader.json"}, `LockfilePath "/leader.json"`},
		{"lock path with a trailing /", election.Config{Store: mem, ServerID: "a", LockfilePath: "jobs/"}, `LockfilePath "jobs/"`},
		{"lock path in a folder", election.Config{Store: mem, ServerID: "a", LockfilePath: "jobs/nightly/leader.json"}, ""},
		{"negative interval", election.Config{Store: mem, FrequentInterval: -time.Second}, "FrequentInterval"},
		{"infrequent below frequent", election.Config{Store: mem, FrequentInterval: 5 * time.Second, InfrequentInterval: time.Second}, "InfrequentInterval"},
		{"deadline not above renew interval", election.Config{Store: mem, FrequentInterval: 10 * time.Second, InfrequentInterval: 30 * time.Second, RenewDeadline: 10 * time.Second}, "RenewDeadline"},
		{"deadline too close to timeout", election.Config{Store: mem, LeaderTimeout: 10 * time.Second, RenewDeadline: 9500 * time.Millisecond}, "clock-rate drift"},
		{"deadline above timeout", election.Config{Store: mem, LeaderTimeout: 10 * time.Second, RenewDeadline: 12 * time.Second}, "RenewDeadline"},
		{"retry budget", election.Config{Store: mem, RetrySchedule: []time.Duration{0, 6 * time.Second, 6 * time.Second}}, "RetrySchedule"},
		{"negative retry", election.Config{Store: mem, RetrySchedule: []time.Duration{-1}}, "RetrySchedule[0]"},
		{"jitter", election.Config{Store: mem, RetryJitter: 1.5}, "RetryJitter"},
		// PeerTimeout matters only in PeerMode: short timings without it
		// must not trip over its default.
		{"short timings without peer mode", election.Config{Store: mem, ServerID: "a", LeaderTimeout: 2 * time.Second,
			RenewDeadline: 1500 * time.Millisecond, FrequentInterval: 500 * time.Millisecond}, ""},
		{"peer timeout", election.Config{Store: mem, PeerMode: true, ServerAddr: "x:1", PeerServerTLS: &tls.Config{},
			PeerTimeout: time.Minute}, "PeerTimeout"},
		{"short timings in peer mode", election.Config{Store: mem, PeerMode: true, ServerAddr: "x:1", PeerServerTLS: &tls.Config{},
			LeaderTimeout: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, FrequentInterval: 500 * time.Millisecond}, "PeerTimeout"},
		{"peer path", election.Config{Store: mem, PeerHealthPath: "health"}, "PeerHealthPath"},
		{"peer mode needs address", election.Config{Store: mem, PeerMode: true}, "ServerAddr"},
		// An address is all peer mode needs: the key is made at start.
		{"peer mode needs no TLS", election.Config{Store: mem, ServerID: "a", PeerMode: true, ServerAddr: "x:1"}, ""},
		{"address alone", election.Config{Store: mem, ServerID: "a", ServerAddr: "x:1"}, ""},
		{"an address turns peer mode on", election.Config{Store: mem, ServerID: "a", ServerAddr: "x:1",
			LeaderTimeout: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, FrequentInterval: 500 * time.Millisecond}, "PeerTimeout"},
		{"address with peer mode disabled", election.Config{Store: mem, ServerID: "a", ServerAddr: "x:1", PeerDisabled: true,
			LeaderTimeout: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, FrequentInterval: 500 * time.Millisecond}, ""},
		{"peer mode and disabled", election.Config{Store: mem, PeerMode: true, PeerDisabled: true, ServerAddr: "x:1"}, "PeerDisabled"},
		{"server id control char", election.Config{Store: mem, ServerID: "a\nb"}, "ServerID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v; want an error naming %s", err, c.field)
			}
			if _, nerr := election.New(context.Background(), c.cfg); nerr == nil {
				t.Fatal("New accepted a config Validate refused")
			}
		})
	}
}

func TestFailoverAfterLeaderCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		for _, id := range []string{"a", "b", "c"} {
			c.add(id, nil)
		}
		first := c.waitLeader(time.Minute)
		time.Sleep(2 * time.Minute) // settle into the infrequent interval
		crashed := time.Now()
		first.crash(t)
		next := c.waitLeader(time.Minute)
		gap := time.Since(crashed)
		if next == first || next.e.Term() != 2 {
			t.Fatalf("after the crash: leader %s term %d", next.id, next.e.Term())
		}
		// Followers poll every 30 s (±20%) while stable. The poll that
		// first sees the dead leader's last version takes it for a live
		// one, so the worst case is two polls; a poll that finds the
		// version unchanged for 15 s takes the lock at once.
		if limit := 2*election.DefaultInfrequentInterval*12/10 + time.Second; gap > limit {
			t.Fatalf("failover took %v; the bound is %v", gap, limit)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestLeaderCutOffFromStoreStepsDownBeforeTakeover(t *testing.T) {
	// S3lect's leader that cannot reach the store kept reporting leader for
	// 35 s beside the new one. Here IsLeader turns false at RenewDeadline,
	// measured from the start of the last successful renewal, before any
	// follower can take the lock.
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		for _, id := range []string{"a", "b", "c"} {
			c.add(id, nil)
		}
		old := c.waitLeader(time.Minute)
		time.Sleep(time.Minute)
		old.fs.SetPartition(faultstore.BlackHoled)
		cut := time.Now()
		for old.e.IsLeader() {
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(cut); d > election.DefaultRenewDeadline {
			t.Fatalf("the cut-off leader reported leader for %v after the cut; RenewDeadline is %v", d, election.DefaultRenewDeadline)
		}
		next := c.waitLeader(2 * time.Minute)
		if next == old {
			t.Fatal("the cut-off member leads again while still cut off")
		}
		if old.e.Status().Leader {
			t.Fatal("Status says the cut-off member leads")
		}
		old.fs.SetPartition(faultstore.Connected)
		time.Sleep(time.Minute)
		if ls := c.leaders(); len(ls) != 1 || ls[0] != next {
			t.Fatalf("after healing: leaders %v; want only %s", c.leaderIDs(), next.id)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestShortStoreOutageChangesNothing(t *testing.T) {
	// shardcoordinator lost its leader for 11–12 s on a 5.5 s outage. Here
	// an outage that ends before RenewDeadline has passed since the start
	// of the leader's last successful renewal changes nothing. With the
	// defaults that is any outage up to 4.5 s whenever it starts (renewals
	// come every 5 s ±10%), and up to 10 s if it starts just after one.
	cases := []struct {
		name   string
		phase  time.Duration // from the end of a successful renewal to the outage
		outage time.Duration
	}{
		{"5.5s right after a renewal", 0, 5500 * time.Millisecond},
		{"9.5s right after a renewal", 0, 9500 * time.Millisecond},
		// Jitter is all but off in these tests, so renewals come every 5 s
		// exactly and this outage begins 0.1 s before one is due.
		{"4.5s at the worst moment", 4900 * time.Millisecond, 4500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testOutage(t, tc.phase, tc.outage) })
	}
}

func testOutage(t *testing.T, phase, outage time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{RetryJitter: 1e-9})
		for _, id := range []string{"a", "b", "c"} {
			c.add(id, nil)
		}
		leader := c.waitLeader(time.Minute)
		time.Sleep(time.Minute)
		renewed := make(chan struct{}, 1)
		leader.fs.SetObserver(func(call faultstore.Call) {
			if call.Op == faultstore.OpPutCAS && call.Err == nil {
				select {
				case renewed <- struct{}{}:
				default:
				}
			}
		})
		<-renewed
		leader.fs.SetObserver(nil)
		time.Sleep(phase)
		for _, m := range c.members {
			m.fs.SetPartition(faultstore.Partitioned)
		}
		for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if ls := c.leaders(); len(ls) != 1 || ls[0] != leader {
				t.Fatalf("during the outage: leaders %v", c.leaderIDs())
			}
		}
		for _, m := range c.members {
			m.fs.SetPartition(faultstore.Connected)
		}
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			if ls := c.leaders(); len(ls) != 1 || ls[0] != leader {
				t.Fatalf("after the outage: leaders %v", c.leaderIDs())
			}
		}
		if started, _ := leader.callbacks(); leader.e.Term() != 1 || started != 1 {
			t.Fatalf("the outage cost a term: term %d, OnStartedLeading called %d times", leader.e.Term(), started)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestThrottlingAndTransientErrorsDoNotDemote(t *testing.T) {
	// Error-blind renewal and throttling causing false demotion: 30% of
	// the leader's writes fail (throttled or transient) for two hours;
	// retries within the deadline keep it leading. (The fault draws are
	// seeded, so the run is the same every time.)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		a := c.add("a", nil)
		c.waitLeader(time.Minute)
		c.add("b", nil)
		a.fs.Throttle(faultstore.Writes, 0.15)
		a.fs.FailRate(faultstore.Writes, driver.Transient, 0.15)
		for end := time.Now().Add(2 * time.Hour); time.Now().Before(end); time.Sleep(time.Second) {
			if !a.e.IsLeader() {
				t.Fatalf("the leader was demoted by throttling at %v", time.Now())
			}
		}
		counts := a.fs.Counts()
		if counts.ResultTotal(faultstore.Throttled) < 100 || counts.ResultTotal(faultstore.Transient) < 100 {
			t.Fatalf("too few injected faults to mean anything: %v", counts)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestAmbiguousWritesAreResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		a := c.add("a", func(cfg *election.Config) {})
		// The acquisition lands but its answer is lost.
		a.fs.AmbiguousNext(faultstore.Writes, 1)
		c.waitLeader(time.Minute)
		if a.e.Term() != 1 {
			t.Fatalf("term %d after an ambiguous acquisition; want 1", a.e.Term())
		}
		// Every renewal's answer is lost half the time for an hour.
		a.fs.AmbiguousRate(faultstore.Writes, 0.5)
		b := c.add("b", nil)
		for end := time.Now().Add(time.Hour); time.Now().Before(end); time.Sleep(time.Second) {
			if !a.e.IsLeader() || b.e.IsLeader() {
				t.Fatalf("ambiguous renewals cost the leadership: a %v b %v", a.e.IsLeader(), b.e.IsLeader())
			}
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestDuplicateServerIDIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		a1 := c.add("same", nil)
		c.waitLeader(time.Minute)
		a2 := c.add("same", nil)
		time.Sleep(2 * time.Minute)
		if ls := c.leaders(); len(ls) != 1 || ls[0] != a1 {
			t.Fatalf("leaders %v", ls)
		}
		// The report holds between the leader's renewals too, not only
		// on the poll that saw the record change.
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			st := a2.e.Status()
			if !st.DuplicateServerID || !strings.Contains(st.LastError, "another process uses this ServerID") {
				t.Fatalf("the second process does not report the duplicate: %+v", st)
			}
		}
		// The duplicate still takes over when the first one dies.
		a1.crash(t)
		if got := c.waitLeader(time.Minute); got != a2 {
			t.Fatalf("leader %v after the first crashed", got.id)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestNoDecisionReadsTheWallClock(t *testing.T) {
	// The leader's wall clock is an hour behind (its lastUpdated looks
	// stale to everyone), a follower's jumps a day ahead and back: nobody
	// takes over early, because expiry is measured on each follower's own
	// monotonic clock from when it saw a version.
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, election.Config{})
		var jump atomic.Int64
		a := c.add("a", func(cfg *election.Config) {
			cfg.Clock = clockWithWall(func() time.Duration { return -time.Hour })
		})
		c.waitLeader(time.Minute)
		c.add("b", func(cfg *election.Config) {
			cfg.Clock = clockWithWall(func() time.Duration { return time.Duration(jump.Load()) })
		})
		for i := 0; i < 60; i++ {
			if i%2 == 0 {
				jump.Store(int64(24 * time.Hour))
			} else {
				jump.Store(int64(-24 * time.Hour))
			}
			time.Sleep(time.Minute)
			if ls := c.leaders(); len(ls) != 1 || ls[0] != a {
				t.Fatalf("after a wall-clock jump: leaders %v", c.leaderIDs())
			}
		}
		rec, _ := c.lockRecord()
		if time.Since(rec.LastUpdated) < 59*time.Minute {
			t.Fatalf("the leader's lastUpdated %v is not an hour behind; the test did not test anything", rec.LastUpdated)
		}
		c.stopAll()
		c.checkOverlap()
	})
}

func TestStoreThatIgnoresConditionsIsRefused(t *testing.T) {
	fs := faultstore.New(memstore.New())
	fs.IgnoreConditions(faultstore.Writes)
	e, err := election.New(t.Context(), election.Config{Store: store.New(fs), ServerID: "a", Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Run(t.Context())
	if !errors.Is(err, store.ErrConditionsIgnored) {
		t.Fatalf("Run on a store that ignores conditions = %v; want ErrConditionsIgnored", err)
	}
	if e.IsLeader() {
		t.Fatal("leads on a store that ignores conditions")
	}
}
