package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// checkRSMCase checks one case of a run without faults and without
// snapshots, where every store request is accounted for: a committed batch
// costs exactly one store write, and each confirmation round one read of
// leader_state.json, shared by the batches waiting in it.
// runRSM runs the benchmark with cfg.
func runRSM(t *testing.T, cfg RSMConfig) *RSMResult {
	t.Helper()
	var stderr strings.Builder
	cfg.Stderr = &stderr
	res, err := RSM(t.Context(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	return res
}

func checkRSMCase(t *testing.T, c rsmCase) {
	t.Helper()
	name := fmt.Sprintf("%v/b%d/p%d", c.Latency, c.Batch, c.Pipeline)
	if c.Failed != 0 {
		t.Errorf("%s: %d commands failed", name, c.Failed)
	}
	if c.Clients != 2*c.Batch*c.Pipeline {
		t.Errorf("%s: %d clients; want 2 × batch × pipeline", name, c.Clients)
	}
	if c.Commands <= 0 || c.CommandsPerSec <= 0 || c.Acked < c.Commands || c.P50 <= 0 || c.P99 < c.P50 || c.CPUPerSec <= 0 {
		t.Errorf("%s: a measurement is missing: %+v", name, c)
	}
	// Every acknowledged command was applied once, and the warm-up.
	if c.Applied != uint64(c.Acked)+1 {
		t.Errorf("%s: the counter shows %d commands applied; %d were acknowledged, plus the warm-up", name, c.Applied, c.Acked)
	}
	if c.Batches <= 0 || c.Rounds <= 0 {
		t.Fatalf("%s: %d batches in %d rounds", name, c.Batches, c.Rounds)
	}
	if c.LogPuts != c.Batches {
		t.Errorf("%s: %d log writes for %d committed batches; want exactly one each", name, c.LogPuts, c.Batches)
	}
	if c.LeaderStateGets != c.Rounds || c.Rounds > c.Batches {
		t.Errorf("%s: %d reads of leader_state.json, %d confirmation rounds, %d batches; want one read a round, at most one round a batch",
			name, c.LeaderStateGets, c.Rounds, c.Batches)
	}
	// Nothing else touched the store.
	want := map[string]int64{"get": c.Rounds, "put-create": c.Batches, "put-cas": 0, "delete": 0, "list": 0}
	for op, n := range want {
		if c.Requests[op] != n {
			t.Errorf("%s: %d %s requests; want %d (all: %v)", name, c.Requests[op], op, n, c.Requests)
		}
	}
	if got, want := c.PerCommand["PUT"], float64(c.Batches)/float64(c.Acked); got != want {
		t.Errorf("%s: %v puts per command; want %v", name, got, want)
	}
	if c.CommandsPerBatch < 1 || c.CommandsPerBatch > float64(c.Batch) || (c.Batch == 1 && c.CommandsPerBatch != 1) {
		t.Errorf("%s: %.2f commands per batch with BatchMinCount %d", name, c.CommandsPerBatch, c.Batch)
	}
	if c.AppendMean < c.Latency || c.ConfirmMean < c.Latency {
		t.Errorf("%s: mean log write %v and confirmation read %v, below the injected latency", name, c.AppendMean, c.ConfirmMean)
	}
	if c.LatencyRatio <= 0 || c.RateRatio <= 0 {
		t.Errorf("%s: ratios to the store's puts missing: %v %v", name, c.LatencyRatio, c.RateRatio)
	}
	// A command waits for its batch's write and a confirmation read.
	if c.Latency > 0 && c.P50 < 2*c.Latency {
		t.Errorf("%s: p50 %v below two injected round trips", name, c.P50)
	}
}

func TestBenchRSM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicated-state-machine groups for a few seconds")
	}
	t.Run("one node", func(t *testing.T) {
		res := runRSM(t, RSMConfig{Store: "mem://", Latencies: []time.Duration{0, 5 * time.Millisecond}, Batches: []int{1, 8},
			Pipelines: []int{1, 4}, Duration: 300 * time.Millisecond, RefDuration: 50 * time.Millisecond, Nodes: 1,
			Flush: 200 * time.Millisecond, Snapshot: 1000000000})
		if res.Nodes != 1 || res.Store != "mem://" || res.Duration != 300*time.Millisecond || res.Snapshot != 1000000000 {
			t.Errorf("header: %+v", res)
		}
		if len(res.Refs) != 2 || len(res.Cases) != 8 || len(res.Speedups) != 4 {
			t.Fatalf("%d store references, %d cases, %d speedups; want 2, 8, 4", len(res.Refs), len(res.Cases), len(res.Speedups))
		}
		for i, ref := range res.Refs {
			if ref.Ops < 20 || ref.P50 <= 0 || ref.P99 < ref.P50 || ref.OpsPerSec <= 0 || ref.P50 < ref.Latency {
				t.Errorf("store reference %d: %+v", i, ref)
			}
		}
		if res.Refs[1].Latency != 5*time.Millisecond {
			t.Errorf("second reference at %v", res.Refs[1].Latency)
		}
		for _, c := range res.Cases {
			checkRSMCase(t, c)
		}
		for _, s := range res.Speedups {
			if s.Pipeline != 4 || s.Base <= 0 || s.Rate <= 0 || s.Ratio != s.Rate/s.Base {
				t.Errorf("speedup: %+v", s)
			}
		}
	})

	t.Run("three nodes", func(t *testing.T) {
		res := runRSM(t, RSMConfig{Store: "mem://", Nodes: 3, Latencies: []time.Duration{2 * time.Millisecond}, Batches: []int{4},
			Pipelines: []int{2}, Duration: 300 * time.Millisecond, RefDuration: 20 * time.Millisecond,
			Flush: 200 * time.Millisecond, Snapshot: 1000000000})
		if res.Nodes != 3 || len(res.Cases) != 1 {
			t.Fatalf("%d nodes, %d cases", res.Nodes, len(res.Cases))
		}
		// Followers are kept up to date over RPC: the store sees only
		// the leader's writes and reads.
		checkRSMCase(t, res.Cases[0])
	})

	t.Run("table with snapshots", func(t *testing.T) {
		res := runRSM(t, RSMConfig{Store: "file://" + t.TempDir(), Latencies: []time.Duration{time.Millisecond}, Batches: []int{4},
			Pipelines: []int{2}, Duration: 300 * time.Millisecond, RefDuration: 20 * time.Millisecond, Nodes: 1,
			Flush: 200 * time.Millisecond, Snapshot: 5})
		var text strings.Builder
		if err := res.Print(&text); err != nil {
			t.Fatal(err)
		}
		out := text.String()
		for _, want := range []string{"the store's own sequential create-if-absent puts", "cmds/s", "cmds/batch", "PUT/cmd", "GET/cmd",
			"LIST/cmd", "DEL/cmd", "log PUT/batch", "p50/put p50", "rate/put rate", "SnapshotThreshold 5"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}
