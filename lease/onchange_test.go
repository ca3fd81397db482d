package lease_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// TestShardLeasesLastOnChangeIsTheHeldSet: in shard mode each shard's
// election reports on its own goroutine; the notifications must still
// reach OnChange in the order the held set changed, so that the last one
// is the set held. The first change is held up on its way to the queue
// while the second shard is taken.
func TestShardLeasesLastOnChangeIsTheHeldSet(t *testing.T) {
	shards := shardIDs(2)
	g := newGroup(t, lease.Config{Mode: lease.ShardLeases, ShardIDs: shards})
	var mu sync.Mutex
	var last []string
	var once sync.Once
	g.beforeNotify = map[string]func([]string){"a": func(held []string) {
		if len(held) == 1 {
			once.Do(func() { time.Sleep(time.Second) })
		}
	}}
	a := g.add("a", func(cfg *lease.Config) {
		cfg.OnChange = func(held []string) {
			mu.Lock()
			last = held
			mu.Unlock()
		}
	})
	g.settled(shards, time.Minute)
	time.Sleep(2 * time.Second)
	held := a.c.Held()
	mu.Lock()
	got := slices.Clone(last)
	mu.Unlock()
	slices.Sort(held)
	slices.Sort(got)
	if len(held) != len(shards) || !slices.Equal(got, held) {
		t.Fatalf("OnChange last reported %v; the coordinator holds %v", got, held)
	}
	g.stopAll()
}
