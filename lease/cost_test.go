package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// TestMemberLeasesCostGrowsWithMembersNotShards counts the store requests
// of an hour of stable running (virtual time): 1,000 shards on 3 members in
// MemberLeases mode against 3 single elections with the same timings. The
// issue's bound is 2x; one lease per shard would be about 1,000x.
func TestMemberLeasesCostGrowsWithMembersNotShards(t *testing.T) {
	var shards, elections int64
	synctest.Test(t, func(t *testing.T) {
		ids := shardIDs(1000)
		g := newGroup(t, memberConfig(ids))
		for i := 0; i < 3; i++ {
			g.add(fmt.Sprintf("m%d", i), nil)
		}
		g.settled(ids, 2*time.Minute)
		time.Sleep(time.Minute)
		for _, n := range g.nodes {
			n.fs.Reset()
		}
		time.Sleep(time.Hour)
		for _, n := range g.nodes {
			shards += n.fs.Counts().Total()
		}
		g.stopAll()
	})
	synctest.Test(t, func(t *testing.T) {
		var fss []*faultstore.Store
		var stops []func()
		for e := 0; e < 3; e++ {
			inner := memstore.New()
			for i := 0; i < 3; i++ {
				fs := faultstore.New(inner)
				fss = append(fss, fs)
				el, err := election.New(t.Context(), election.Config{
					Store: store.New(fs), ServerID: fmt.Sprintf("m%d", i),
					FrequentInterval: lease.DefaultRenewPeriod, LeaderTimeout: lease.DefaultLeaseDuration,
					Logger: slog.New(slog.DiscardHandler),
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := el.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				stops = append(stops, func() { _ = el.Stop(context.Background()) })
			}
		}
		time.Sleep(2 * time.Minute)
		for _, fs := range fss {
			fs.Reset()
		}
		time.Sleep(time.Hour)
		for _, fs := range fss {
			elections += fs.Counts().Total()
		}
		for _, stop := range stops {
			stop()
		}
	})
	t.Logf("store requests in an hour: 1,000 shards on 3 members (member leases) %d; 3 single elections of 3 members %d; ratio %.2f",
		shards, elections, float64(shards)/float64(elections))
	if shards > 2*elections {
		t.Fatalf("1,000 shards cost %d requests an hour, more than twice the %d of 3 single elections", shards, elections)
	}
}
