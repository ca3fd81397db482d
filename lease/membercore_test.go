package lease

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
)

// The member core is a plain value: these tests drive its decisions by
// hand, over every combination of a few states, with made-up records and
// times.

func at(d time.Duration) time.Time { return simT0.Add(d) }

func testMemberCore() *memberCore {
	return newMemberCore(memberTiming{lease: simLease, renewDeadline: simLease * 2 / 3, renewPeriod: simPeriod},
		simPrefix, "me", "me-1")
}

// TestMemberCoreEvictsOnlyAfterTheHoldersLease: a member is evicted only
// once its record has been unchanged for the longer of our lease and the
// one it wrote, never before its record was read, never twice, never a
// foreign object nor ourselves; a tombstone goes after twice that lease.
func TestMemberCoreEvictsOnlyAfterTheHoldersLease(t *testing.T) {
	n := 0
	for _, holder := range []time.Duration{0, 10 * time.Second, 40 * time.Second} {
		for _, age := range []time.Duration{0, 14999 * time.Millisecond, 15 * time.Second, 29999 * time.Millisecond, 30 * time.Second, 39999 * time.Millisecond, 40 * time.Second, 80 * time.Second} {
			for _, known := range []bool{false, true} {
				for _, state := range []string{"member", "evicted", "foreign", "self"} {
					n++
					c := testMemberCore()
					owner, session := "other", "other-1"
					if state == "self" {
						owner, session = c.owner, c.session
					}
					rel := memberKey(owner, session)
					v := &memberView{owner: owner, session: session, version: "v1", since: at(0), at: at(age),
						lease: holder, leaseKnown: known, evicted: state == "evicted", foreign: state == "foreign"}
					c.views[rel] = v
					lease := max(simLease, holder)
					var want []eviction
					switch {
					case state == "evicted" && age >= 2*lease:
						want = []eviction{{rel: rel, delete: true}}
					case state == "member" && known && age >= lease:
						want = []eviction{{rel: rel, version: "v1", tomb: MemberRecord{OwnerID: owner, Session: session,
							LeaseMillis: lease.Milliseconds(), EvictedBy: c.owner}}}
					}
					name := fmt.Sprintf("holder lease %v, unchanged %v, read %v, %s", holder, age, known, state)
					if got := c.evictions(); !slices.EqualFunc(got, want, func(a, b eviction) bool {
						return a.rel == b.rel && a.delete == b.delete && a.version == b.version && a.tomb.EvictedBy == b.tomb.EvictedBy &&
							a.tomb.LeaseMillis == b.tomb.LeaseMillis && a.tomb.Session == b.tomb.Session
					}) {
						t.Errorf("%s: evictions %+v; want %+v", name, got, want)
					}
					// The loop wakes when the member would be judged dead (a
					// foreign object too, once: it is never evicted).
					wantDeath := time.Time{}
					if (state == "member" || state == "foreign") && known {
						wantDeath = at(lease)
					}
					if got := c.nextDeath(); !got.Equal(wantDeath) {
						t.Errorf("%s: next death at %v; want %v", name, got, wantDeath)
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestMemberCoreHandoffWaitsForRelease: a shard taken from a live member
// starts only once that member states it applied the assignment (or, as
// earlier versions wrote, released the shard), or it left or restarted,
// or its lease has passed since we first saw the shard ours; its record is
// read once when the version listed is not the one read.
func TestMemberCoreHandoffWaitsForRelease(t *testing.T) {
	n := 0
	for _, holder := range []string{"left", "restarted", "live"} {
		for _, rec := range []string{"applied", "earlier epoch", "released", "unread, then applied", "unread, read fails"} {
			for _, seen := range []time.Duration{-1, 0, 14999 * time.Millisecond, 15 * time.Second, 39999 * time.Millisecond, 40 * time.Second} {
				for _, holderLease := range []time.Duration{0, 40 * time.Second} {
					n++
					name := fmt.Sprintf("%s holder, record %s, first seen %v ago, holder lease %v", holder, rec, seen, holderLease)
					c := testMemberCore()
					c.myVersion, c.renewStart, c.confirmStart = "m1", at(time.Minute), at(time.Minute)
					e := Entry{Owner: "me", Session: "me-1", Term: 2, Waits: []Holder{{Owner: "other", Session: "other-1", Term: 1}}}
					a := Assignment{Epoch: 7, Shards: map[string]Entry{"s1": e}}
					c.setAssign(newTable(a, nil), "a7", true, false, at(0))
					if seen >= 0 {
						c.firstSeen["s1"] = seenAt{term: 2, at: at(time.Minute - seen)}
					}
					live := map[string]string{"me": "me-1", "other": "other-1"}
					rel := memberKey("other", "other-1")
					applied := uint64(7)
					if rec == "earlier epoch" || rec == "released" {
						applied = 6
					}
					r := MemberRecord{OwnerID: "other", Session: "other-1", LeaseMillis: holderLease.Milliseconds(), Applied: applied}
					if rec == "released" {
						r.Released = map[string]uint64{"s1": 1}
					}
					v := &memberView{owner: "other", session: "other-1", version: "o2", rec: r, recVersion: "o2",
						lease: holderLease, leaseKnown: true}
					if rec == "unread, then applied" || rec == "unread, read fails" {
						v.rec.Applied, v.recVersion = 6, "o1"
					}
					switch holder {
					case "left":
						delete(live, "other")
					case "restarted":
						live["other"] = "other-2"
						c.views[memberKey("other", "other-2")] = &memberView{owner: "other", session: "other-2", version: "p1"}
					}
					if holder != "left" {
						c.views[rel] = v
					}
					c.countPending(true, 0, func(string) bool { return false })
					scan := c.scanHandoffs(at(time.Minute), live, map[string]uint64{})
					reads := 0
					for {
						need, done := scan.next()
						if done {
							break
						}
						if need != rel || reads > 0 {
							t.Fatalf("%s: asked to read %s (after %d reads)", name, need, reads)
						}
						reads++
						if rec == "unread, then applied" {
							c.fetched(rel, r.encode(), "o2", nil)
							scan.read(true)
						} else {
							c.fetched(rel, nil, "", errors.New("unreachable"))
							scan.read(false)
						}
					}
					unread := rec == "unread, then applied" || rec == "unread, read fails"
					if wantReads := map[bool]int{true: 1}[holder == "live" && unread]; reads != wantReads {
						t.Errorf("%s: %d reads; want %d", name, reads, wantReads)
					}
					lapsed := seen >= max(simLease, holderLease)
					want := holder != "live" || rec == "applied" || rec == "released" || rec == "unread, then applied" || lapsed
					if got := slices.Equal(scan.ready, []string{"s1"}); got != want {
						t.Errorf("%s: ready %v; want %v", name, got, want)
					}
					if got := slices.Equal(scan.keep, []string{"s1"}); got == want {
						t.Errorf("%s: kept %v", name, scan.keep)
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestMemberCoreRightsDeadline: our rights run RenewDeadline from the
// earlier of the last renewal and the last confirmation of the
// assignment, and not at all without either or with a bad assignment.
func TestMemberCoreRightsDeadline(t *testing.T) {
	times := []time.Time{{}, at(0), at(3 * time.Second)}
	for _, renew := range times {
		for _, confirm := range times {
			for _, bad := range []bool{false, true} {
				c := testMemberCore()
				c.renewStart, c.confirmStart, c.assignBad = renew, confirm, bad
				want := time.Time{}
				if !renew.IsZero() && !confirm.IsZero() && !bad {
					first := renew
					if confirm.Before(renew) {
						first = confirm
					}
					want = first.Add(10 * time.Second)
				}
				if got := c.rightsDeadline(); !got.Equal(want) {
					t.Errorf("renewed %v, confirmed %v, bad %v: deadline %v; want %v", renew, confirm, bad, got, want)
				}
				// A lapse is warned of once, from the deadline on, after a
				// round whose renewal failed.
				if want.IsZero() {
					continue
				}
				if c.lapsed(want.Add(-time.Nanosecond), false) || !c.lapsed(want, false) || c.lapsed(want.Add(time.Second), false) {
					t.Errorf("renewed %v, confirmed %v: the lapse at %v is not warned of exactly once", renew, confirm, want)
				}
			}
		}
	}
}

// TestMemberCoreReadsItsRecordBack: after a renewal whose outcome was
// unknown, the record read back decides: ours with the pending nonce
// counts as a renewal from its start only within the renew deadline; a
// tombstone, another session or a missing record once written end the
// session.
func TestMemberCoreReadsItsRecordBack(t *testing.T) {
	mine := MemberRecord{OwnerID: "me", Session: "me-1", Nonce: "pending"}
	other := mine
	other.Session = "me-2"
	tomb := mine
	tomb.EvictedBy = "other"
	stale := mine
	stale.Nonce = "earlier"
	for _, tc := range []struct {
		name        string
		written     bool // our record was created before
		rec         *MemberRecord
		err         error
		after       time.Duration // since the pending write started
		want        ownRead
		wantRenewed bool
	}{
		{name: "landed, recent", written: true, rec: &mine, after: 9 * time.Second, want: ownWrite, wantRenewed: true},
		{name: "landed, too late", written: true, rec: &mine, after: 10 * time.Second, want: ownWrite},
		{name: "did not land", written: true, rec: &stale, after: time.Second, want: ownWrite},
		{name: "evicted", written: true, rec: &tomb, after: time.Second, want: ownAbandon},
		{name: "another session", written: true, rec: &other, after: time.Second, want: ownAbandon},
		{name: "removed", written: true, err: store.ErrNotFound, want: ownAbandon},
		{name: "never created", err: store.ErrNotFound, want: ownWrite},
		{name: "unreachable", written: true, err: errors.New("unreachable"), want: ownFailed},
	} {
		c := testMemberCore()
		if tc.written {
			c.myVersion = "m1"
		}
		c.renewFailed(MemberRecord{Nonce: "pending"}, at(0))
		var data []byte
		if tc.rec != nil {
			data = tc.rec.encode()
		}
		got := c.readOwn(at(tc.after), data, "m2", tc.err)
		if got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
		if renewed := c.renewStart.Equal(at(0)); renewed != tc.wantRenewed {
			t.Errorf("%s: counted as a renewal: %v; want %v", tc.name, renewed, tc.wantRenewed)
		}
		if got == ownWrite && c.needRead {
			t.Errorf("%s: still reading before writing", tc.name)
		}
	}
}

// TestMemberCoreRebalanceConverges: from every assignment of up to three
// shards to nobody, a live member, a dead one or a member's earlier
// session, with every set of live members, one write reaches an
// assignment the next round leaves alone, in which every shard has a live
// owner, none above its share, a shard taken from a live session waits
// for it, and a shard that changes hands has a higher term.
func TestMemberCoreRebalanceConverges(t *testing.T) {
	owners := []Holder{{}, {Owner: "me", Session: "me-1"}, {Owner: "b", Session: "b-1"}, {Owner: "c", Session: "c-1"}, {Owner: "b", Session: "b-0"}}
	lives := []map[string]string{
		{"me": "me-1"},
		{"me": "me-1", "b": "b-1"},
		{"me": "me-1", "c": "c-1"},
		{"me": "me-1", "b": "b-1", "c": "c-1"},
	}
	n := 0
	for ns := 1; ns <= 3; ns++ {
		shards := []string{"s1", "s2", "s3"}[:ns]
		for combo := 0; combo < pow(len(owners), ns); combo++ {
			cur := Assignment{Epoch: 4, Shards: map[string]Entry{}}
			for i, k := 0, combo; i < ns; i, k = i+1, k/len(owners) {
				o := owners[k%len(owners)]
				cur.Shards[shards[i]] = Entry{Owner: o.Owner, Session: o.Session, Term: uint64(3 + i)}
			}
			for _, live := range lives {
				n++
				name := fmt.Sprintf("%d shards from %v, live %v", ns, cur.Shards, live)
				c := testMemberCore()
				c.myVersion, c.renewStart = "m1", at(0)
				c.setAssign(newTable(cur, nil), "a4", true, false, at(0))
				in := balanceInput{live: live, pendingGen: 1, ended: func() map[string]uint64 { return nil }}
				next, cond, _ := c.rebalance(in)
				if next == nil {
					if !balanced(cur, live, shards) {
						t.Errorf("%s: no change to an assignment that needs one", name)
					}
					continue
				}
				if cond != store.IfMatch("a4") || next.hdr.Epoch != 5 || next.hdr.UpdatedBy != "me" {
					t.Errorf("%s: writes epoch %d by %q on %+v", name, next.hdr.Epoch, next.hdr.UpdatedBy, cond)
				}
				got := tableAssignment(next)
				share := (ns + len(live) - 1) / len(live)
				count := map[string]int{}
				for id, e := range got.Shards {
					count[e.Owner]++
					if live[e.Owner] != e.Session {
						t.Errorf("%s: %s goes to %s (%s), not live", name, id, e.Owner, e.Session)
					}
					p := cur.Shards[id]
					if p.Session != e.Session && e.Term <= p.Term {
						t.Errorf("%s: %s changes hands at term %d after %d", name, id, e.Term, p.Term)
					}
					if p.Session != e.Session && p.Owner != "" && live[p.Owner] == p.Session &&
						!slices.Contains(e.Waits, Holder{Owner: p.Owner, Session: p.Session, Term: p.Term}) {
						t.Errorf("%s: %s taken from live %s without waiting for it: %+v", name, id, p.Session, e)
					}
				}
				for o, k := range count {
					if k > share {
						t.Errorf("%s: %s gets %d shards; the share is %d", name, o, k, share)
					}
				}
				c.assignWritten(next, "a5", at(time.Second), at(time.Second))
				if again, _, _ := c.rebalance(in); again != nil {
					t.Errorf("%s: a second change after %+v: %+v", name, got.Shards, tableAssignment(again).Shards)
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestMemberCoreLiveMembers: the live members are the sessions not
// evicted and not foreign, one per owner: the one the assignment names,
// else the one seen first. We count only while our own record is current,
// and another session of our owner that wins makes us the duplicate.
func TestMemberCoreLiveMembers(t *testing.T) {
	type sess struct {
		name  string
		since time.Duration // -1: no record
		state string        // "", "evicted", "foreign"
	}
	n := 0
	for _, current := range []bool{false, true} {
		for _, twinSince := range []time.Duration{-1, 0, 2 * time.Second, 5 * time.Second} {
			for _, twinState := range []string{"", "evicted", "foreign"} {
				for _, named := range []string{"", "me-1", "me-2", "b-1", "b-2"} {
					for _, b := range [][]sess{
						nil,
						{{"b-1", 1 * time.Second, ""}},
						{{"b-1", 1 * time.Second, "evicted"}},
						{{"b-1", 3 * time.Second, ""}, {"b-2", 1 * time.Second, ""}},
						{{"b-1", 1 * time.Second, ""}, {"b-2", 1 * time.Second, "foreign"}},
					} {
						n++
						c := testMemberCore()
						if current {
							c.myVersion, c.renewStart = "m1", at(0)
						}
						mine := []sess{{"me-1", 2 * time.Second, ""}}
						if twinSince >= 0 {
							mine = append(mine, sess{"me-2", twinSince, twinState})
						}
						a := Assignment{Epoch: 1, Shards: map[string]Entry{}}
						if named != "" {
							a.Shards["s1"] = Entry{Owner: named[:len(named)-2], Session: named, Term: 1}
						}
						c.setAssign(newTable(a, nil), "a1", true, false, at(0))
						want := map[string]string{}
						for _, group := range [][]sess{mine, b} {
							best := sess{since: -1}
							for _, s := range group {
								if s.state != "" {
									continue
								}
								switch {
								case best.since < 0, s.name == named,
									best.name != named && (s.since < best.since || s.since == best.since && s.name < best.name):
									best = s
								}
							}
							if best.since >= 0 {
								want[best.name[:len(best.name)-2]] = best.name
							}
						}
						for _, s := range append(slices.Clone(mine), b...) {
							owner := s.name[:len(s.name)-2]
							c.views[memberKey(owner, s.name)] = &memberView{owner: owner, session: s.name, since: at(s.since),
								evicted: s.state == "evicted", foreign: s.state == "foreign"}
						}
						if !current && want["me"] == "me-1" {
							delete(want, "me")
						}
						wantDup := twinSince >= 0 && twinState == "" && want["me"] != "me-1"
						name := fmt.Sprintf("current %v, twin since %v %q, named %q, b %v", current, twinSince, twinState, named, b)
						got, dup := c.live()
						if !maps.Equal(got, want) || dup != wantDup {
							t.Errorf("%s: live %v, duplicate %v; want %v, %v", name, got, dup, want, wantDup)
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}
