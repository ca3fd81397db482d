package lease_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store/faultstore"
)

// TestShardLeasesMixedLeaseDurations: members with different
// LeaseDuration (a rolling change of settings). The holder has the longer
// lease; when it is cut off from the store, the other member must wait for
// the holder's lease, not its own shorter one, before taking its shards.
func TestShardLeasesMixedLeaseDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shards := shardIDs(3)
		g := newGroup(t, lease.Config{Mode: lease.ShardLeases, ShardIDs: shards})
		a := g.add("a", func(cfg *lease.Config) {
			cfg.LeaseDuration, cfg.RenewPeriod = time.Minute, 10*time.Second
		})
		g.settled(shards, time.Minute)
		g.add("b", nil) // LeaseDuration 15 s
		time.Sleep(time.Minute)
		a.fs.SetPartition(faultstore.BlackHoled)
		time.Sleep(3 * time.Minute)
		for shard, owners := range g.holders(shards) {
			if len(owners) != 1 || owners[0] != "b" {
				t.Errorf("shard %s led by %v; want b", shard, owners)
			}
		}
		a.fs.SetPartition(faultstore.Connected)
		g.stopAll()
		if _, n := g.check(time.Time{}); n < 2*len(shards) {
			t.Fatalf("%d leadership intervals; want each shard led by a, then b", n)
		}
	})
}
