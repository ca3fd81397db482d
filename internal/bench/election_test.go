package bench

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestBenchElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes and runs elections for several seconds")
	}
	exe := buildTenure(t)
	fast, _ := TimingNamed("fast")
	cfg := func(nodes, rounds int, configs ...string) ElectionConfig {
		return ElectionConfig{Exe: exe, Nodes: nodes, Rounds: rounds, Configs: configs, Timing: fast, Window: 2 * time.Second,
			Poll: 2 * time.Millisecond, Stderr: io.Discard}
	}

	t.Run("address only and certificates", func(t *testing.T) {
		const nodes, rounds = 3, 2
		c := cfg(nodes, rounds, "addr", "tls")
		c.Store = "file://" + t.TempDir()
		res, err := Election(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 2 || res[0].Config != "addr" || res[1].Config != "tls" {
			t.Fatalf("%d results: %+v", len(res), res)
		}
		for _, r := range res {
			checkBenchResult(t, *r, nodes, rounds, true)
		}
	})

	t.Run("default configs", func(t *testing.T) {
		res, err := Election(t.Context(), cfg(2, 1, "store", "addr"))
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := PrintElection(&out, res); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"2 members as OS processes", "store only", "an address only", "crash: leaderless gap after SIGKILL",
			"config  crash gap min / p50 / max",
			"limit: lease expiry as the followers saw it", "gap - limit", "handover: leaderless gap",
			"leader", "follower", "group", "two members seen leading in one /status pass: 0"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	})
}

func checkBenchResult(t *testing.T, res ElectionResult, nodes, rounds int, peer bool) {
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
	fast, _ := TimingNamed("fast")
	slack := fast.Timeout / 2
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
