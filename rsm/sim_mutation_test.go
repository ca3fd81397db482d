package rsm

import (
	"flag"
	"strings"
	"testing"
)

var simMutationSeeds = flag.Int("sim.mutation-seeds", 3000, "seeds TestSimulationCatchesMutations tries per mutation before it gives up")

// TestSimulationCatchesMutations puts each historical bug back into the
// pure core and runs seeds until the simulation reports a violation: a
// simulation that passes with the bug in would not have caught it. It
// stops at the first failing seed of each and names it, with the
// violation the run reported.
func TestSimulationCatchesMutations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     mutation
		check string // the check that must catch it
	}{
		{"rule 9: a retry after eviction taken for a new session's first command", mutateUnknownSessionIsNew, "exactly-once"},
		{"rule 10: the session bound from the node's options", mutateLocalSessionBound, "agreement"},
		{"rule 11: waiters registered after the last round dropped at the end", mutateDropLateWaiters, "rule 11"},
		{"follow: a Follow that failed waited out like a refusal", mutateFollowFailureWaits, "availability"},
		{"judge: the record of the term given up on read as moved", mutateJudgeSameTermMoved, "availability"},
		{"judge: a node listed among the followers read as dropped", mutateCutOffIgnoresFollowers, "availability"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(*simMutationSeeds); seed++ {
				s := runSimMutated(seed, false, tc.m)
				if s.fail == "" {
					continue
				}
				t.Logf("caught by seed %d (%d seeds run): %s", seed, seed, s.fail)
				if !strings.Contains(s.fail, tc.check) {
					t.Errorf("seed %d reported %q; want the %s check to catch it", seed, s.fail, tc.check)
				}
				if clean := runSim(seed, false); clean.fail != "" {
					t.Errorf("seed %d fails without the mutation too: %s", seed, clean.fail)
				}
				return
			}
			t.Fatalf("no seed of %d caught the mutation: the simulation misses this bug", *simMutationSeeds)
		})
	}
}
