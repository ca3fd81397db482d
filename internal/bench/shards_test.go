package bench

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

func TestBenchShards(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two shard groups for several seconds")
	}
	rs, err := Shards(t.Context(), ShardsConfig{Store: "mem://bench-shards-test", Modes: []lease.Mode{lease.MemberLeases, lease.ShardLeases},
		Shards: 200, Members: 3, Lease: 1500 * time.Millisecond, Renew: 500 * time.Millisecond, Window: 3 * time.Second,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil || len(rs) != 2 {
		t.Fatalf("%d results: %v", len(rs), err)
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
	var out strings.Builder
	if err := PrintShards(&out, rs); err != nil || !strings.Contains(out.String(), "member-leases") || !strings.Contains(out.String(), "death takeover") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
}

// TestBenchShardsUnnamedMemStore: an unnamed mem:// store is private to
// each Open; the bench's members must still share one.
func TestBenchShardsUnnamedMemStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a shard group for several seconds")
	}
	rs, err := Shards(t.Context(), ShardsConfig{Store: "mem://", Modes: []lease.Mode{lease.MemberLeases},
		Shards: 20, Members: 2, Lease: 1500 * time.Millisecond, Renew: 500 * time.Millisecond, Window: time.Second,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil || len(rs) != 1 || rs[0].Settle <= 0 || rs[0].Join <= 0 {
		t.Fatalf("%+v: %v", rs, err)
	}
}
