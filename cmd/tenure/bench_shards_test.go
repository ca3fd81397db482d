package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchShards(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two shard groups for several seconds")
	}
	var out, errb strings.Builder
	err := runBenchShards(t.Context(), &env{stdout: &out, stderr: &errb}, []string{"--store", "mem://bench-shards-test",
		"--shards", "200", "--members", "3", "--lease", "1500ms", "--renew", "500ms", "--window", "3s", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var rs []shardsResult
	if err := json.Unmarshal([]byte(out.String()), &rs); err != nil || len(rs) != 2 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	member, shard := rs[0], rs[1]
	if member.Mode != "member-leases" || shard.Mode != "shard-leases" {
		t.Fatalf("modes %q %q", member.Mode, shard.Mode)
	}
	for _, r := range rs {
		if r.Requests <= 0 || r.RequestsPerHour <= 0 || r.Death <= 0 || r.Settle <= 0 || r.HeapBytes == 0 || r.Goroutines == 0 ||
			r.PeakHeapBytes < r.HeapBytes || r.MaxRSSBytes <= 0 {
			t.Errorf("%s: a measurement is missing: %+v", r.Mode, r)
		}
	}
	if member.Join <= 0 {
		t.Errorf("member leases: no join rebalance measured")
	}
	// The point of member leases: cost grows with members, not shards.
	if member.RequestsPerHour*10 > shard.RequestsPerHour {
		t.Errorf("member leases cost %.0f requests/h against %.0f for one lease per shard; want far fewer", member.RequestsPerHour, shard.RequestsPerHour)
	}
	if code, _, _ := runCmd(t, "bench", "shards"); code != 2 {
		t.Errorf("bench shards without --store: exit %d", code)
	}
}

// TestBenchShardsUnnamedMemStore: an unnamed mem:// store is private to
// each Open; the bench's members must still share one.
func TestBenchShardsUnnamedMemStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a shard group for several seconds")
	}
	var out, errb strings.Builder
	err := runBenchShards(t.Context(), &env{stdout: &out, stderr: &errb}, []string{"--store", "mem://",
		"--shards", "20", "--members", "2", "--mode", "member", "--lease", "1500ms", "--renew", "500ms", "--window", "1s", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var rs []shardsResult
	if err := json.Unmarshal([]byte(out.String()), &rs); err != nil || len(rs) != 1 || rs[0].Settle <= 0 || rs[0].Join <= 0 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
}
