package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

func TestKVGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 << 20, 100},       // 4 MiB of headroom would be 400%: Go's default at most
		{8 << 20, 50},        // 4 MiB
		{40 << 20, 10},       // 10% is 4 MiB
		{100 << 20, 10},      // 10 MiB
		{1 << 30, 10},        // 102 MiB, where 25% was 256 MiB
		{(40 << 20) - 1, 11}, // just under: the floor, rounded up
		{1<<40 + 12345, 10},  // no overflow
		{3 << 20, 100},       // the cap
	} {
		if got := kvGCPercentFor(c.live); got != c.want {
			t.Errorf("kvGCPercentFor(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestTuneGC: tuneGC sets GOGC from the live heap and restores the one it
// found when its context ends.
func TestTuneGC(t *testing.T) {
	// A GOGC the policy never sets, so the change is seen.
	defer debug.SetGCPercent(debug.SetGCPercent(333))
	before := gogc(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tuneGC(ctx, time.Millisecond, nil)
	}()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		metrics.Read(live)
		want := kvGCPercentFor(live[0].Value.Uint64())
		if got := gogc(t); got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d, want %d for a live heap of %d bytes", gogc(t), want, live[0].Value.Uint64())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if got := gogc(t); got != before {
		t.Fatalf("GOGC %d after tuneGC returned, want %d as before", got, before)
	}
}

func memLimit(t *testing.T) int64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestGCDuringLoad: while the node loads a snapshot the collector is off
// under a memory limit of the memory in use plus kvLoadPercent of the snapshot;
// the policy and the memory limit found come back when the load ends, or
// as soon as a collection finds more than 75% of the limit live. (The
// sizes are terabytes, so that the limits set never bind this test.)
func TestGCDuringLoad(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(333))
	const prevLimit = 1 << 60
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(prevLimit))
	const tb = 1 << 40
	tu := &gcTuner{percent: 333}
	off := func(want bool) {
		t.Helper()
		if got := debug.SetGCPercent(tu.percent) < 0; got != want || (tu.percent < 0) != want {
			t.Fatalf("collector off: %v (GOGC %d), want %v", got, tu.percent, want)
		}
	}

	tu.step(0, gcState{live: 1 << 30, inUse: 2 << 30, gcs: 10})
	off(false)
	if tu.percent != kvGCPercentFor(1<<30) || memLimit(t) != prevLimit {
		t.Fatalf("no load: GOGC %d, limit %d; want %d, %d", tu.percent, memLimit(t), kvGCPercentFor(1<<30), prevLimit)
	}

	// A load of 1 TiB in a process using 2 TiB.
	tu.step(tb, gcState{live: tb, inUse: 2 * tb, gcs: 10})
	off(true)
	if want := int64(2*tb + tb/100*kvLoadPercent); memLimit(t) < want-100 || memLimit(t) > want {
		t.Fatalf("memory limit %d during the load; want %d", memLimit(t), want)
	}
	// No collection yet, or one that found the state within 75%: on.
	tu.step(tb, gcState{live: tb, inUse: 3 * tb, gcs: 10})
	tu.step(tb, gcState{live: 2 * tb, inUse: 3 * tb, gcs: 11})
	off(true)
	// The load ends.
	tu.step(0, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 11})
	off(false)
	if tu.percent != kvGCPercentFor(3*tb) || memLimit(t) != prevLimit {
		t.Fatalf("after the load: GOGC %d, limit %d; want %d, %d", tu.percent, memLimit(t), kvGCPercentFor(3*tb), prevLimit)
	}

	// A load whose state outgrows the estimate: a collection finds 3 of
	// the limit's 3 TiB live.
	tu.step(tb, gcState{live: tb, inUse: 2 * tb, gcs: 20})
	off(true)
	tu.step(tb, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 21})
	off(false)
	if memLimit(t) != prevLimit {
		t.Fatalf("memory limit %d after giving up, want %d", memLimit(t), prevLimit)
	}
	// And it stays with the policy until that load ends.
	tu.step(tb, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 22})
	off(false)
	tu.step(0, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 22})
	tu.step(tb, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 22})
	off(true)
	tu.stop()
	if memLimit(t) != prevLimit {
		t.Fatalf("memory limit %d after stop, want %d", memLimit(t), prevLimit)
	}
}

// TestTuneGCFollowsLoads: tuneGC turns the collector off while restoring
// gives a size, and back on after, with the memory limit it found.
func TestTuneGCFollowsLoads(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(333))
	const prevLimit = 1 << 60
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(prevLimit))
	var restoring atomic.Uint64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tuneGC(ctx, time.Millisecond, restoring.Load)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC %d, limit %d", what, gogc(t), memLimit(t))
			}
		}
	}
	restoring.Store(1 << 50)
	waitFor("a load", func() bool { return memLimit(t) < prevLimit && memLimit(t) >= (1<<50)/100*kvLoadPercent })
	restoring.Store(0)
	waitFor("after the load", func() bool { return memLimit(t) == prevLimit && gogc(t) <= kvGCMaxPercent })
	cancel()
	<-done
	if got := gogc(t); got != 333 {
		t.Fatalf("GOGC %d after tuneGC returned, want 333", got)
	}
}
