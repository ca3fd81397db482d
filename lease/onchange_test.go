package lease_test

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// TestShardLeasesLastOnChangeIsTheHeldSet: in shard mode each shard's
// election reports on its own goroutine; the notifications must still
// reach OnChange in the order the held set changed, so that the last one
// is the set held. The first change is held up on its way to the queue
// until the second shard's election is reporting its change too.
func TestShardLeasesLastOnChangeIsTheHeldSet(t *testing.T) {
	shards := shardIDs(2)
	g := newGroup(t, lease.Config{Mode: lease.ShardLeases, ShardIDs: shards})
	changes := make(chan []string, 16)
	second := make(chan struct{}) // closed when the second change is on its way to the queue
	g.beforeNotify = map[string]func([]string){"a": func(held []string) {
		switch len(held) {
		case 1:
			waitReporting(t, 2, second)
		case 2:
			close(second)
		}
	}}
	a := g.add("a", func(cfg *lease.Config) {
		cfg.OnChange = func(held []string) { changes <- held }
	})
	defer g.stopAll()
	var last []string
	for range 2 { // one change per shard taken
		select {
		case last = <-changes:
		case <-time.After(time.Minute):
			t.Fatalf("OnChange not called for each shard taken; last %v", last)
		}
	}
	g.settled(shards, time.Minute)
	held := a.c.Held()
	got := slices.Clone(last)
	slices.Sort(held)
	slices.Sort(got)
	if len(held) != len(shards) || !slices.Equal(got, held) {
		t.Fatalf("OnChange last reported %v; the coordinator holds %v", got, held)
	}
}

// waitReporting waits until n goroutines are reporting a change of the
// held set (inside setHeld, whether running or waiting for its turn), or
// until overtaken is closed.
func waitReporting(t *testing.T, n int, overtaken <-chan struct{}) {
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-overtaken:
			return
		default:
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if strings.Count(string(buf), "lease.(*shardMode).setHeld(") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d shard elections never reported at once", n)
			return
		}
		time.Sleep(time.Millisecond) // polls the condition; not a stand-in for it
	}
}
