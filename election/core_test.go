package election

import (
	"errors"
	"math"
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
	c.observe(t0, false, Record{}, nil, "")
	d := c.next(t0)
	if d.op != opAcquire || d.cond.Kind != driver.IfAbsent || d.record.Term != 1 || d.record.Session != "my-session" {
		t.Fatalf("decision %+v; want create-if-absent of term 1", d)
	}
}

func TestCoreExpiryIsByUnchangedVersionOnOwnClock(t *testing.T) {
	c := testCore()
	c.observe(at(0), true, other(4), nil, "v1")
	for _, now := range []time.Duration{5 * time.Second, 10 * time.Second} {
		if d := c.next(at(now)); d.op != opRead {
			t.Fatalf("at %v: %v; want a read (frequent polling of an unconfirmed leader)", now, d.op)
		}
		c.observe(at(now), true, other(4), nil, "v1")
	}
	// 14.9 s unchanged: not yet.
	c.observe(at(14900*time.Millisecond), true, other(4), nil, "v1")
	if d := c.next(at(14900 * time.Millisecond)); d.op == opAcquire {
		t.Fatal("acquired before LeaderTimeout")
	}
	// A new version restarts the clock.
	c.observe(at(15*time.Second), true, other(4), nil, "v2")
	if d := c.next(at(15 * time.Second)); d.op == opAcquire {
		t.Fatal("acquired right after the version changed")
	}
	c.observe(at(30*time.Second), true, other(4), nil, "v2")
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
	c.observe(at(0), true, rec, nil, "v1")
	if d := c.next(at(0)); d.op == opAcquire {
		t.Fatal("took a lock because of its lastUpdated")
	}
}

func TestCoreReleasedAndOwnRecordsAreTakenAtOnce(t *testing.T) {
	c := testCore()
	rel := other(3)
	rel.Released = true
	c.observe(at(0), true, rel, nil, "v1")
	if d := c.next(at(0)); d.op != opAcquire || d.record.Term != 4 {
		t.Fatalf("released lock: %+v", d)
	}
	c = testCore()
	mine := Record{LeaderID: "me", Session: "my-session", Term: 9}
	c.observe(at(0), true, mine, nil, "v1")
	if d := c.next(at(0)); d.op != opAcquire || d.record.Term != 10 {
		t.Fatalf("own stale record: %+v", d)
	}
	// Same ServerID, other session: not ours. Once it changes (another
	// live process renewing under our ServerID) it is reported.
	c = testCore()
	dup := Record{LeaderID: "me", Session: "someone-else", Term: 9}
	c.observe(at(0), true, dup, nil, "v1")
	if d := c.next(at(0)); d.op == opAcquire || c.duplicateID {
		t.Fatalf("a record of our ServerID under another session: %+v, duplicate %v; want neither taken nor yet a duplicate", d, c.duplicateID)
	}
	c.observe(at(5*time.Second), true, dup, nil, "v2")
	if !c.duplicateID {
		t.Fatal("another session renewing under our ServerID is not reported")
	}
}

func TestCoreLeaderRenewsAndFences(t *testing.T) {
	c := testCore()
	c.observe(at(0), false, Record{}, nil, "")
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
	c.observe(at(0), false, Record{}, nil, "")
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
			c.observe(at(0), false, Record{}, nil, "")
			d := c.next(at(0))
			c.failed(opAcquire, at(0), at(time.Second), &pendingWrite{nonce: d.record.Nonce, start: at(0), term: 1, acquire: true})
			c.observe(at(tc.seen), true, d.record, nil, "v1")
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
	c.observe(at(0), false, Record{}, nil, "")
	d := c.next(at(0))
	c.wrote(opAcquire, at(0), at(0), d.record, "v1")
	c.observe(at(time.Second), true, other(7), nil, "v9")
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
	c.observe(at(0), false, Record{}, nil, "")
	if d := c.next(at(0)); d.op != opWait {
		t.Fatalf("a stopped core decided %v", d.op)
	}
}

func TestCoreStableFollowerPollsFourTimesPerLease(t *testing.T) {
	c := testCore()
	c.observe(at(0), true, other(1), nil, "v1")
	c.observe(at(5*time.Second), true, other(1), nil, "v2")
	if !c.stable() {
		t.Fatal("not stable after seeing the leader renew")
	}
	// A quarter of the 15 s lease, not InfrequentInterval (30 s): a crash
	// is then seen within the lease and a quarter of it.
	if d := c.next(at(6 * time.Second)); d.op != opWait || d.until != at(8750*time.Millisecond) {
		t.Fatalf("stable follower: %+v; want to wait until 8.75 s", d)
	}
	// A holder with a longer lease is read less often, up to
	// InfrequentInterval.
	long := other(1)
	long.LeaseMillis = 200_000
	c.observe(at(9*time.Second), true, long, nil, "v3")
	if d := c.next(at(9 * time.Second)); d.op != opWait || d.until != at(39*time.Second) {
		t.Fatalf("stable follower of a 200 s lease: %+v; want to wait InfrequentInterval (until 39 s)", d)
	}
	c.peerMode = true
	c.obs.rec.LeaderAddr = "other:1"
	// A leader whose record names no peer key serves no peer endpoint.
	if d := c.next(at(6 * time.Second)); d.op != opWait {
		t.Fatalf("stable follower in peer mode, leader without a key: %v; want to wait", d.op)
	}
	c.obs.rec.PeerKey = "sha256:k"
	if d := c.next(at(6 * time.Second)); d.op != opPeer {
		t.Fatalf("stable follower in peer mode: %v; want a peer check", d.op)
	}
	c.failed(opPeer, at(7*time.Second), at(7*time.Second), nil)
	if d := c.next(at(7 * time.Second)); d.op != opRead {
		t.Fatalf("after a failed peer check: %v; want a store read", d.op)
	}
}

func TestCoreHolderLeaseWins(t *testing.T) {
	// A holder whose lease (60 s) is longer than this member's
	// LeaderTimeout (15 s): the record must stay unchanged for the
	// holder's lease before it is taken, in every path that decides.
	holder := other(4)
	holder.LeaseMillis = 60_000
	c := testCore()
	c.observe(at(0), true, holder, nil, "v1")
	for _, now := range []time.Duration{15 * time.Second, 30 * time.Second, 59 * time.Second} {
		c.observe(at(now), true, holder, nil, "v1")
		if d := c.next(at(now)); d.op == opAcquire {
			t.Fatalf("took the lock after %v unchanged; the holder's lease is 60 s", now)
		}
	}
	c.observe(at(60*time.Second), true, holder, nil, "v1")
	if d := c.next(at(60 * time.Second)); d.op != opAcquire || d.record.Term != 5 {
		t.Fatalf("after the holder's lease: %+v; want an acquisition of term 5", d)
	}

	// A store that notifies: the watch waits the holder's lease, not ours.
	c = testCore()
	c.watch = true
	c.observe(at(0), true, holder, nil, "v1")
	if d := c.next(at(time.Second)); d.op != opWatch || d.until != at(60*time.Second) {
		t.Fatalf("watching: %+v; want to watch until the holder's lease runs out", d)
	}

	// A follower that has not seen the holder renew reads again when the
	// lease would run out: the holder's, not its own.
	c = testCore()
	c.observe(at(0), true, holder, nil, "v1")
	c.pollAt = at(time.Hour)
	if d := c.next(at(time.Second)); d.op != opWait || d.until != at(60*time.Second) {
		t.Fatalf("polling: %+v; want to wait until the holder's lease runs out", d)
	}

	// Peer answers are observations like any other.
	c = testCore()
	c.peerAnswered(at(0), holder, "v1")
	c.peerAnswered(at(30*time.Second), holder, "v1")
	if d := c.next(at(30 * time.Second)); d.op == opAcquire {
		t.Fatal("took the lock on peer answers after 30 s; the holder's lease is 60 s")
	}

	// A holder with a shorter lease than ours: ours applies.
	short := other(4)
	short.LeaseMillis = 2_000
	c = testCore()
	c.observe(at(0), true, short, nil, "v1")
	c.observe(at(10*time.Second), true, short, nil, "v1")
	if d := c.next(at(10 * time.Second)); d.op == opAcquire {
		t.Fatal("took the lock after 10 s unchanged; our own LeaderTimeout is 15 s")
	}
	// A lease too long for a Duration never runs out.
	huge := other(4)
	huge.LeaseMillis = math.MaxInt64
	c = testCore()
	c.observe(at(0), true, huge, nil, "v1")
	c.observe(at(100*365*24*time.Hour), true, huge, nil, "v1")
	if d := c.next(at(100 * 365 * 24 * time.Hour)); d.op == opAcquire {
		t.Fatal("an overflowing leaseMillis let the lock be taken")
	}
}

func TestCoreUnknownTermIsNeverTakenOver(t *testing.T) {
	noTerm := Record{LeaderID: "s3lect-1", LeaderAddr: "10.0.0.1:8443"} // as S3lect writes it
	maxed := other(math.MaxUint64)
	releasedNoTerm := Record{Released: true, Nonce: "n"}
	for _, tc := range []struct {
		name    string
		found   bool
		rec     Record
		derr    error
		maxTerm uint64
		want    error
	}{
		{"corrupt", true, Record{}, errors.New("not JSON"), 7, ErrUnreadableRecord},
		{"no term", true, noTerm, nil, 0, ErrUnreadableRecord},
		{"released without a term", true, releasedNoTerm, nil, 3, ErrUnreadableRecord},
		{"term at its maximum", true, maxed, nil, 0, ErrTermExhausted},
		{"absent after the maximum", false, Record{}, nil, math.MaxUint64, ErrTermExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCore()
			c.maxTerm = tc.maxTerm
			for now := time.Duration(0); now <= time.Hour; now += 5 * time.Second {
				c.observe(at(now), tc.found, tc.rec, tc.derr, "v1")
				d := c.next(at(now))
				if d.op == opAcquire {
					t.Fatalf("took the lock with term %d after %v", d.record.Term, now)
				}
				if d.op == opWait && !d.until.After(at(now)) {
					t.Fatalf("a wait that does not wait: %+v", d)
				}
			}
			if err := c.termProblem(); !errors.Is(err, tc.want) {
				t.Fatalf("termProblem = %v; want %v", err, tc.want)
			}
			// It keeps reading, so that a repair is seen, and takes the
			// repaired lock with the floor's next term.
			if d := c.next(at(2 * time.Hour)); d.op != opRead {
				t.Fatalf("after an hour: %v; want to keep reading the store", d.op)
			}
			if tc.want == ErrTermExhausted {
				return
			}
			repaired := Record{Released: true, Term: 50, Nonce: "r"}
			c.observe(at(2*time.Hour), true, repaired, nil, "v2")
			if c.termProblem() != nil {
				t.Fatalf("a repaired record still has a problem: %v", c.termProblem())
			}
			if d := c.next(at(2 * time.Hour)); d.op != opAcquire || d.record.Term != 51 {
				t.Fatalf("after the repair: %+v; want term 51", d)
			}
		})
	}
}

// A holder's answer that it does not lead holds for the version it was
// given at: confirmed by reads of that version, forgotten at the next one;
// and it changes nothing of when the lock may be taken.
func TestCoreLeaderNotLeadingHoldsForItsVersion(t *testing.T) {
	c := testCore()
	c.observe(at(0), true, other(4), nil, "v1")
	c.peerNotLeading(at(time.Second))
	if !c.obs.notLeading || c.next(at(time.Second)).op != opRead {
		t.Fatalf("after a refusal: notLeading %v, next %v; want true and a read", c.obs.notLeading, c.next(at(time.Second)).op)
	}
	c.observe(at(2*time.Second), true, other(4), nil, "v1")
	if !c.obs.notLeading {
		t.Fatal("a read of the same version forgot the holder's answer")
	}
	// Expiry is still the holder's lease from the version first seen.
	c.observe(at(14*time.Second), true, other(4), nil, "v1")
	if d := c.next(at(14 * time.Second)); d.op == opAcquire {
		t.Fatal("took the lock before the lease lapsed, on the holder's word alone")
	}
	c.observe(at(3*time.Second+14*time.Second), true, other(4), nil, "v2")
	if c.obs.notLeading {
		t.Fatal("a new version kept the answer given for the one before")
	}
}
