package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// runMainEnv makes this test binary act as the tenure command when set:
// tenure bench runs its members by re-executing os.Executable(), which in a
// test is the test binary.
const runMainEnv = "TENURE_TEST_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits
	}
}

func TestBenchElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes and runs elections for several seconds")
	}
	t.Setenv(runMainEnv, "1")

	t.Run("address only and certificates", func(t *testing.T) {
		const nodes, rounds = 3, 2
		code, out, errs := runCmd(t, "bench", "election", "--timing", "fast", "--nodes", "3", "--rounds", "2",
			"--window", "2s", "--config", "addr,tls", "--json", "--store", "file://"+t.TempDir())
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		var res []electionBenchResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		if len(res) != 2 || res[0].Config != "addr" || res[1].Config != "tls" {
			t.Fatalf("%d results: %+v", len(res), res)
		}
		for _, r := range res {
			checkBenchResult(t, r, nodes, rounds, true)
		}
	})

	t.Run("default configs", func(t *testing.T) {
		code, out, errs := runCmd(t, "bench", "election", "--timing", "fast", "--nodes", "2", "--rounds", "1", "--window", "2s")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		for _, want := range []string{"2 members as OS processes", "store only", "an address only", "crash: leaderless gap after SIGKILL",
			"config  crash gap min / p50 / max",
			"limit: lease expiry as the followers saw it", "gap - limit", "handover: leaderless gap",
			"leader", "follower", "group", "two members seen leading in one /status pass: 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}

func checkBenchResult(t *testing.T, res electionBenchResult, nodes, rounds int, peer bool) {
	t.Helper()
	if res.Nodes != nodes || res.Rounds != rounds || res.Peer != peer || res.Timing != "fast" || res.Store == "" {
		t.Errorf("header: %+v", res)
	}
	if len(res.Crash) != rounds || len(res.Handover) != rounds {
		t.Fatalf("%d crash and %d handover rounds; want %d each", len(res.Crash), len(res.Handover), rounds)
	}
	// A follower may take the lock only once its lease has expired: the
	// gap can exceed the limit, never fall far below it. The slack covers
	// the sampling (the bench reads /status on a loaded machine), not
	// the protocol.
	slack := benchTimings[1].timeout / 2
	for i, c := range res.Crash {
		if c.Killed == "" || c.NewLeader == "" || c.NewLeader == c.Killed || c.NewTerm <= c.Term {
			t.Errorf("crash round %d: no new leader: %+v", i+1, c)
		}
		if c.Gap <= 0 || c.Limit <= 0 || c.Gap < c.Limit-slack || c.OverLimit != c.Gap-c.Limit {
			t.Errorf("crash round %d: gap %v, limit %v, over %v", i+1, c.Gap, c.Limit, c.OverLimit)
		}
		if c.Followers != nodes-1 || c.FollowersCurrent > c.Followers || c.LimitFollower == "" || c.LimitFollower == c.Killed {
			t.Errorf("crash round %d: followers %+v", i+1, c)
		}
	}
	for i, h := range res.Handover {
		if h.Stopped == "" || h.NewLeader == "" || h.NewLeader == h.Stopped || h.NewTerm <= h.Term {
			t.Errorf("handover round %d: no new leader: %+v", i+1, h)
		}
		if h.Gap < 0 || h.StepDown < 0 {
			t.Errorf("handover round %d: gap %v, step-down %v", i+1, h.Gap, h.StepDown)
		}
	}
	for name, s := range map[string]benchStats{"crash gap": res.CrashGap, "limit": res.CrashLimit, "handover gap": res.HandoverGap} {
		if s.N != rounds || s.Min > s.P50 || s.P50 > s.P90 || s.P90 > s.Max {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if res.Overlaps != 0 {
		t.Errorf("two members led in %d /status passes", res.Overlaps)
	}

	c := res.Cost
	if len(c.Members) != nodes || c.Followers != nodes-1 || c.Window <= 0 {
		t.Fatalf("cost: %+v", c)
	}
	leaders, sum := 0, 0.0
	for _, m := range c.Members {
		sum += m.PerHour
		if m.Role == "leader" {
			leaders++
			// The leader renews: at least one write in the window.
			if m.ByOp["put if-match"] <= 0 || m.PerHour != c.Leader {
				t.Errorf("leader's requests: %+v (leader per hour %v)", m, c.Leader)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("cost window: %d leaders", leaders)
	}
	if diff := sum - c.Group; diff > 1e-6 || diff < -1e-6 {
		t.Errorf("group %v is not the sum of the members' %v", c.Group, sum)
	}
}

func TestBenchElectionRefusesBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"one node", []string{"--nodes", "1"}, 2, "--nodes must be between 2"},
		{"no rounds", []string{"--rounds", "0"}, 2, "--rounds must be at least 1"},
		{"unknown timing", []string{"--timing", "slow"}, 2, `--timing "slow"`},
		{"short window", []string{"--window", "10s"}, 2, "shorter than the InfrequentInterval"},
		{"bad poll", []string{"--poll", "0s"}, 2, "--poll must be positive"},
		{"positional", []string{"file:///tmp/x"}, 2, "Usage: tenure bench election"},
		{"unknown config", []string{"--config", "store,peer"}, 2, `--config "store,peer"`},
		{"config twice", []string{"--config", "addr,addr"}, 2, `--config "addr,addr"`},
		{"unknown scheme", []string{"--store", "ftp://example/x"}, 1, `unknown URL scheme "ftp"`},
		{"no scheme", []string{"--store", "bucket/prefix"}, 1, "has no scheme"},
		{"mem", []string{"--store", "mem://x"}, 1, "separate processes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"bench", "election"}, c.args...)...)
			if code != c.code || !strings.Contains(errs, c.says) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, c.code, c.says)
			}
		})
	}
	if code, _, errs := runCmd(t, "bench", "nope"); code != 2 || !strings.Contains(errs, `unknown benchmark "nope"`) {
		t.Fatalf("unknown benchmark: exit %d, %q", code, errs)
	}
	if code, _, errs := runCmd(t, "bench"); code != 2 || !strings.Contains(errs, "tenure bench election") {
		t.Fatalf("bench alone: exit %d, %q", code, errs)
	}
}

func TestParseStoreRequests(t *testing.T) {
	text := `# HELP tenure_store_requests_total Store requests by operation, condition and result.
# TYPE tenure_store_requests_total counter
tenure_store_requests_total{cond="if-match",op="put",result="ok"} 12
tenure_store_requests_total{cond="if-match",op="put",result="precondition"} 1
tenure_store_requests_total{cond="unconditional",op="get",result="ok"} 3
tenure_store_requests_total{cond="if-absent",op="put",result="ok"} 2
tenure_store_request_duration_seconds_count{op="get"} 3
`
	got, err := parseStoreRequests(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"put if-match": 13, "get": 3, "put if-absent": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v; want %v", k, got[k], v)
		}
	}
	if _, err := parseStoreRequests("tenure_store_requests_total{op=\"get\"} many\n"); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}
