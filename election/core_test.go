package election

import (
	"testing"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// The decision core is a plain value: these tests drive it by hand with
// made-up observations and times.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func testCore() *core {
	return newCore(timing{
		frequent: 5 * time.Second, infrequent: 30 * time.Second,
		leaderTimeout: 15 * time.Second, renewDeadline: 10 * time.Second,
		retry: DefaultRetrySchedule,
	}, "me", "me:1", "my-session", false)
}

func other(term uint64) Record {
	return Record{LeaderID: "other", Session: "other-session", Term: term, Nonce: "n"}
}

func TestCoreFirstStepReads(t *testing.T) {
	c := testCore()
	if d := c.next(t0); d.op != opRead {
		t.Fatalf("first decision %v; want read", d.op)
	}
}

func TestCoreAbsentLockIsCreated(t *testing.T) {
	c := testCore()
	c.observe(t0, false, Record{}, false, "")
	d := c.next(t0)
	if d.op != opAcquire || d.cond.Kind != driver.IfAbsent || d.record.Term != 1 || d.record.Session != "my-session" {
		t.Fatalf("decision %+v; want create-if-absent of term 1", d)
	}
}

func TestCoreExpiryIsByUnchangedVersionOnOwnClock(t *testing.T) {
	c := testCore()
	c.observe(at(0), true, other(4), false, "v1")
	for _, now := range []time.Duration{5 * time.Second, 10 * time.Second} {
		if d := c.next(at(now)); d.op != opRead {
			t.Fatalf("at %v: %v; want a read (frequent polling of an unconfirmed leader)", now, d.op)
		}
		c.observe(at(now), true, other(4), false, "v1")
	}
	// 14.9 s unchanged: not yet.
	c.observe(at(14900*time.Millisecond), true, other(4), false, "v1")
	if d := c.next(at(14900 * time.Millisecond)); d.op == opAcquire {
		t.Fatal("acquired before LeaderTimeout")
	}
	// A new version restarts the clock.
	c.observe(at(15*time.Second), true, other(4), false, "v2")
	if d := c.next(at(15 * time.Second)); d.op == opAcquire {
		t.Fatal("acquired right after the version changed")
	}
	c.observe(at(30*time.Second), true, other(4), false, "v2")
	d := c.next(at(30 * time.Second))
	if d.op != opAcquire || d.cond.Kind != driver.IfMatch || d.cond.Version != "v2" || d.record.Term != 5 {
		t.Fatalf("decision %+v; want a swap on v2 with term 5", d)
	}
}

func TestCoreLastUpdatedIsIgnored(t *testing.T) {
	// A record whose lastUpdated is a year old is still a live leader
	// until its version stays unchanged for LeaderTimeout.
	c := testCore()
	rec := other(2)
	rec.LastUpdated = t0.Add(-365 * 24 * time.Hour)
	c.observe(at(0), true, rec, false, "v1")
	if d := c.next(at(0)); d.op == opAcquire {
		t.Fatal("took a lock because of its lastUpdated")
	}
}

func TestCoreReleasedAndOwnRecordsAreTakenAtOnce(t *testing.T) {
	c := testCore()
	rel := other(3)
	rel.Released = true
	c.observe(at(0), true, rel, false, "v1")
	if d := c.next(at(0)); d.op != opAcquire || d.record.Term != 4 {
		t.Fatalf("released lock: %+v", d)
	}
	c = testCore()
	mine := Record{LeaderID: "me", Session: "my-session", Term: 9}
	c.observe(at(0), true, mine, false, "v1")
	if d := c.next(at(0)); d.op != opAcquire || d.record.Term != 10 {
		t.Fatalf("own stale record: %+v", d)
	}
	// Same ServerID, other session: not ours. Once it changes (another
	// live process renewing under our ServerID) it is reported.
	c = testCore()
	dup := Record{LeaderID: "me", Session: "someone-else", Term: 9}
	c.observe(at(0), true, dup, false, "v1")
	if d := c.next(at(0)); d.op == opAcquire || c.duplicateID {
		t.Fatalf("a record of our ServerID under another session: %+v, duplicate %v; want neither taken nor yet a duplicate", d, c.duplicateID)
	}
	c.observe(at(5*time.Second), true, dup, false, "v2")
	if !c.duplicateID {
		t.Fatal("another session renewing under our ServerID is not reported")
	}
}

func TestCoreLeaderRenewsAndFences(t *testing.T) {
	c := testCore()
	c.observe(at(0), false, Record{}, false, "")
	d := c.next(at(0))
	c.wrote(opAcquire, at(0), at(100*time.Millisecond), d.record, "v1")
	if !c.leading || c.deadline() != at(10*time.Second) {
		t.Fatalf("leading %v deadline %v", c.leading, c.deadline())
	}
	if d := c.next(at(time.Second)); d.op != opWait || d.until.After(at(5500*time.Millisecond)) {
		t.Fatalf("before the renewal is due: %+v", d)
	}
	d = c.next(at(6 * time.Second))
	if d.op != opRenew || d.cond.Version != "v1" || d.record.Term != 1 {
		t.Fatalf("renewal due: %+v", d)
	}
	// The renewal fails; retries follow, and at the deadline the leader
	// demotes itself.
	c.failed(opRenew, at(6*time.Second), at(7*time.Second), &pendingWrite{nonce: d.record.Nonce, start: at(6 * time.Second), term: 1})
	if d := c.next(at(7 * time.Second)); d.op != opWait || !d.until.Before(at(10*time.Second)) {
		t.Fatalf("after a failed renewal: %+v", d)
	}
	if d := c.next(at(10 * time.Second)); d.op != opDemote {
		t.Fatalf("at the deadline: %v; want demote", d.op)
	}
}

func TestCoreLateRenewalDoesNotResumeTheTerm(t *testing.T) {
	c := testCore()
	c.observe(at(0), false, Record{}, false, "")
	d := c.next(at(0))
	c.wrote(opAcquire, at(0), at(0), d.record, "v1")
	d = c.next(at(5 * time.Second))
	// The renewal's answer comes back after the deadline.
	c.wrote(opRenew, at(5*time.Second), at(11*time.Second), d.record, "v2")
	if c.leading {
		t.Fatal("a renewal answered after the deadline kept the term")
	}
	// The lock is ours, so the next step takes it again with a new term.
	if d := c.next(at(11 * time.Second)); d.op != opAcquire || d.record.Term != 2 || d.cond.Version != "v2" {
		t.Fatalf("after a late renewal: %+v", d)
	}
}

func TestCoreAmbiguousAcquireAdoptedOnlyWhileFresh(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seen  time.Duration
		leads bool
	}{{"fresh", 3 * time.Second, true}, {"stale", 12 * time.Second, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCore()
			c.observe(at(0), false, Record{}, false, "")
			d := c.next(at(0))
			c.failed(opAcquire, at(0), at(time.Second), &pendingWrite{nonce: d.record.Nonce, start: at(0), term: 1, acquire: true})
			c.observe(at(tc.seen), true, d.record, false, "v1")
			if c.leading != tc.leads {
				t.Fatalf("leading %v; want %v", c.leading, tc.leads)
			}
			if tc.leads && c.deadline() != at(10*time.Second) {
				t.Fatalf("deadline %v; want 10 s after the write started", c.deadline())
			}
		})
	}
}

func TestCoreDeposedByAnotherVersion(t *testing.T) {
	c := testCore()
	c.observe(at(0), false, Record{}, false, "")
	d := c.next(at(0))
	c.wrote(opAcquire, at(0), at(0), d.record, "v1")
	c.observe(at(time.Second), true, other(7), false, "v9")
	if c.leading {
		t.Fatal("still leading after the store showed another version")
	}
	if c.maxTerm != 7 {
		t.Fatalf("maxTerm %d", c.maxTerm)
	}
}

func TestCoreStoppedNeverAcquires(t *testing.T) {
	c := testCore()
	c.stopped = true
	c.observe(at(0), false, Record{}, false, "")
	if d := c.next(at(0)); d.op != opWait {
		t.Fatalf("a stopped core decided %v", d.op)
	}
}

func TestCoreStableFollowerPollsInfrequently(t *testing.T) {
	c := testCore()
	c.observe(at(0), true, other(1), false, "v1")
	c.observe(at(5*time.Second), true, other(1), false, "v2")
	if !c.stable() {
		t.Fatal("not stable after seeing the leader renew")
	}
	if d := c.next(at(6 * time.Second)); d.op != opWait || d.until.Before(at(29*time.Second)) {
		t.Fatalf("stable follower: %+v; want to wait about 30 s", d)
	}
	c.peerMode = true
	c.obs.rec.LeaderAddr = "other:1"
	if d := c.next(at(6 * time.Second)); d.op != opPeer {
		t.Fatalf("stable follower in peer mode: %v; want a peer check", d.op)
	}
	c.failed(opPeer, at(7*time.Second), at(7*time.Second), nil)
	if d := c.next(at(7 * time.Second)); d.op != opRead {
		t.Fatalf("after a failed peer check: %v; want a store read", d.op)
	}
}
