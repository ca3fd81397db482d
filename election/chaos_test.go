package election_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
)

// TestChaosNoOverlap runs five members for six virtual hours while a seeded
// random schedule crashes and restarts them, cuts them off from the store
// (failing fast or black-holed), stalls their writes past the lease (the
// in-process analogue of a paused process), throttles them, fails and loses
// the answers of their calls, and jumps their wall clocks. Throughout, no
// two members may believe they lead at the same moment and terms must only
// grow; after the faults stop, exactly one leader must emerge within the
// bound.
func TestChaosNoOverlap(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { runChaos(t, seed, election.Config{}, false) })
	}
	// Followers that poll at the frequent interval all the time see every
	// version soon after it is written, which is when an expiry rule that
	// is too eager would show.
	for _, seed := range []uint64{4, 5} {
		t.Run(fmt.Sprintf("frequent-only/seed%d", seed), func(t *testing.T) {
			runChaos(t, seed, election.Config{InfrequentInterval: election.DefaultFrequentInterval}, false)
		})
	}
}

// TestChaosMixedTimings is TestChaosNoOverlap with members that each run
// their own valid timings, drawn again at every restart (a rolling change
// of settings that never ends): a follower must wait for the holder's
// lease, whatever its own.
func TestChaosMixedTimings(t *testing.T) {
	var total int64
	for _, seed := range []uint64{11, 12} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { total += runChaos(t, seed, election.Config{}, true) })
	}
	if !t.Failed() && total < 1000 {
		t.Fatalf("%d faults injected in all; want at least 1000", total)
	}
}

// randomTimings draws a valid configuration: LeaderTimeout 3-60 s,
// RenewDeadline 40-90 % of it, FrequentInterval 20-70 % of that,
// InfrequentInterval 1-4 times FrequentInterval.
func randomTimings(rng *rand.Rand) election.Config {
	lt := time.Duration(3000+rng.IntN(57000)) * time.Millisecond
	rd := lt*4/10 + time.Duration(rng.Int64N(int64(lt/2)))
	freq := rd/5 + time.Duration(rng.Int64N(int64(rd/2)))
	return election.Config{LeaderTimeout: lt, RenewDeadline: rd, FrequentInterval: freq,
		InfrequentInterval: freq * time.Duration(1+rng.IntN(4))}
}

// runChaos runs the schedule and returns how many faults it injected.
func runChaos(t *testing.T, seed uint64, base election.Config, mixed bool) int64 {
	var injected int64
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, seed*31))
		c := newCluster(t, base)
		offsets := map[string]*atomic.Int64{}
		// The longest timings any member has run with, for the bound on
		// recovery after healing.
		longest := election.Config{LeaderTimeout: election.DefaultLeaderTimeout, RenewDeadline: election.DefaultRenewDeadline,
			InfrequentInterval: election.DefaultInfrequentInterval}
		add := func(id string) *member {
			off := new(atomic.Int64)
			offsets[id] = off
			var timings election.Config
			prio := rng.IntN(3)
			if mixed {
				timings = randomTimings(rng)
				longest.LeaderTimeout = max(longest.LeaderTimeout, timings.LeaderTimeout)
				longest.RenewDeadline = max(longest.RenewDeadline, timings.RenewDeadline)
				longest.InfrequentInterval = max(longest.InfrequentInterval, timings.InfrequentInterval)
			}
			return c.add(id, func(cfg *election.Config) {
				cfg.Clock = clockWithWall(func() time.Duration { return time.Duration(off.Load()) })
				// Preferred members ask the leader to hand over.
				cfg.Priority = prio
				if mixed {
					cfg.LeaderTimeout, cfg.RenewDeadline = timings.LeaderTimeout, timings.RenewDeadline
					cfg.FrequentInterval, cfg.InfrequentInterval = timings.FrequentInterval, timings.InfrequentInterval
					if err := cfg.Validate(); err != nil {
						t.Fatalf("drew invalid timings: %v", err)
					}
				}
			})
		}
		ids := []string{"m0", "m1", "m2", "m3", "m4"}
		live := map[string]*member{}
		for _, id := range ids {
			live[id] = add(id)
		}
		var events int
		var faulty []*faultstore.Store
		for _, m := range live {
			faulty = append(faulty, m.fs)
		}

		end := time.Now().Add(6 * time.Hour)
		for time.Now().Before(end) {
			time.Sleep(time.Duration(5+rng.IntN(40)) * time.Second)
			id := ids[rng.IntN(len(ids))]
			m := live[id]
			events++
			switch rng.IntN(9) {
			case 0: // crash and restart after a while
				m.crash(t)
				time.Sleep(time.Duration(rng.IntN(30)) * time.Second)
				live[id] = add(id)
				faulty = append(faulty, live[id].fs)
			case 1: // graceful restart
				m.stop(t)
				live[id] = add(id)
				faulty = append(faulty, live[id].fs)
			case 2: // cut off from the store, failing fast
				m.fs.SetPartition(faultstore.Partitioned)
				time.Sleep(time.Duration(1+rng.IntN(40)) * time.Second)
				m.fs.SetPartition(faultstore.Connected)
			case 3: // black-holed: calls hang until their deadline
				m.fs.SetPartition(faultstore.BlackHoled)
				time.Sleep(time.Duration(1+rng.IntN(40)) * time.Second)
				m.fs.SetPartition(faultstore.Connected)
			case 4: // paused: the next writes land, but their answers
				// come back only after the lease could have lapsed
				m.fs.AddRule(faultstore.Rule{Ops: faultstore.Writes, P: 1, Times: 1 + rng.IntN(3),
					Action: faultstore.ApplyThenHang, Delay: time.Duration(5+rng.IntN(20)) * time.Second})
			case 5: // throttling and transient errors for a while
				m.fs.Throttle(faultstore.AllOps, rng.Float64()*0.5)
				m.fs.FailRate(faultstore.AllOps, driver.Transient, rng.Float64()*0.5)
				time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
				m.fs.ClearFaults()
			case 6: // ambiguous writes
				m.fs.AmbiguousRate(faultstore.Writes, 0.2+rng.Float64()*0.6)
				time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
				m.fs.ClearFaults()
			case 7: // slow store
				m.fs.SetLatency(faultstore.AllOps, faultstore.Exponential(time.Duration(100+rng.IntN(2000))*time.Millisecond))
				time.Sleep(time.Duration(10+rng.IntN(60)) * time.Second)
				m.fs.SetLatency(faultstore.AllOps, nil)
			case 8: // wall-clock jump
				offsets[id].Store(int64(time.Duration(rng.IntN(48)-24) * time.Hour))
			}
		}

		// Faults stop: heal everything, then exactly one leader within the
		// bound (a stale record needs LeaderTimeout unchanged, seen after
		// up to one infrequent poll).
		for _, m := range live {
			m.fs.ClearFaults()
			m.fs.SetPartition(faultstore.Connected)
			m.fs.SetLatency(faultstore.AllOps, nil)
		}
		healed := time.Now()
		// Calls that were hanging when the faults stopped end at their
		// deadlines (at most RenewDeadline later) and may still cost the
		// current leader its term; the bound covers that, then a stale
		// record's LeaderTimeout seen across two stable polls.
		bound := longest.RenewDeadline + 2*longest.InfrequentInterval*12/10 + longest.LeaderTimeout + 5*time.Second
		time.Sleep(longest.RenewDeadline)
		c.waitLeader(bound)
		t.Logf("one leader %v after the faults stopped (bound %v)", time.Since(healed), bound)
		for stable := time.Now().Add(10 * time.Minute); time.Now().Before(stable); time.Sleep(time.Second) {
			if n := len(c.leaders()); n != 1 {
				t.Fatalf("%d leaders after healing", n)
			}
		}
		c.stopAll()
		n := c.checkOverlap()

		for _, fs := range faulty {
			cs := fs.Counts()
			injected += cs.ResultTotal(faultstore.Throttled) + cs.ResultTotal(faultstore.Transient) + cs.ResultTotal(faultstore.Canceled)
		}
		t.Logf("seed %d: %d fault events, %d failed or lost store calls, %d terms", seed, events, injected, n)
		injected += int64(events)
		if injected < 400 || n < 10 {
			t.Fatalf("the schedule injected too little to prove anything: %d faults, %d terms", injected, n)
		}
	})
	return injected
}
