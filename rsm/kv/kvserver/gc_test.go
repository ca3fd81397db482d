package kvserver

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
)

func TestKVGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 << 20, 100},        // 16 MiB of headroom would be 1600%: Go's default at most
		{32 << 20, 50},        // 16 MiB
		{160 << 20, 10},       // 10% is 16 MiB
		{100 << 20, 16},       // 16 MiB
		{(512 << 20) - 1, 10}, // 51 MiB
		{512 << 20, 25},       // 128 MiB: a large state
		{1 << 30, 25},         // 256 MiB
		{(160 << 20) - 1, 11}, // just under: the floor, rounded up
		{1<<40 + 12345, 25},   // no overflow
		{12 << 20, 100},       // the cap
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
// under a memory limit of the memory in use besides the live heap, plus
// the live heap expected (the one found, plus the base), plus
// kvLoadGrowth percent of it; after each collection the limit follows the
// live heap found, never below the first; the policy and the memory limit
// found come back when the load ends. (The sizes are terabytes, so that
// the limits set never bind this test.)
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
	limit := func(what string, want int64) {
		t.Helper()
		if got := memLimit(t); got != want || tu.limit != want {
			t.Fatalf("%s: memory limit %d (tuner %d), want %d", what, got, tu.limit, want)
		}
	}
	grown := func(live int64) int64 { return live + live/100*int64(kvLoadPercent(uint64(live))) }

	tu.step(rsm.Restore{}, gcState{live: 1 << 30, inUse: 2 << 30, gcs: 10})
	off(false)
	if tu.percent != kvGCPercentFor(1<<30) || memLimit(t) != prevLimit {
		t.Fatalf("no load: GOGC %d, limit %d; want %d, %d", tu.percent, memLimit(t), kvGCPercentFor(1<<30), prevLimit)
	}

	// A load of a 2 TiB base and 3 TiB of segments, in a process whose
	// 1 TiB live heap is half the memory it uses.
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: tb, inUse: 2 * tb, gcs: 10})
	off(true)
	first := tb + grown(3*tb)
	limit("as the load begins", first)
	// No collection: the limit stays.
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: tb, inUse: 4 * tb, gcs: 10})
	limit("before a collection", first)
	// A collection while the base loads finds part of it: not lower.
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: 2 * tb, inUse: 4 * tb, gcs: 11})
	off(true)
	limit("after a collection during the base", first)
	// The segments grow the state: the limit follows.
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: 5 * tb, inUse: 6 * tb, gcs: 12})
	off(true)
	limit("after the state grew", tb+grown(5*tb))
	// Overwrites: the state shrinks back; the limit with it, to the first.
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: 4 * tb, inUse: 6 * tb, gcs: 13})
	limit("after the state shrank", tb+grown(4*tb))
	tu.step(rsm.Restore{Base: 2 * tb, Segments: 3 * tb}, gcState{live: tb, inUse: 6 * tb, gcs: 14})
	limit("after the state shrank below the base", first)
	// The load ends.
	tu.step(rsm.Restore{}, gcState{live: 3 * tb, inUse: 3 * tb, gcs: 15})
	off(false)
	if tu.percent != kvGCPercentFor(3*tb) || memLimit(t) != prevLimit {
		t.Fatalf("after the load: GOGC %d, limit %d; want %d, %d", tu.percent, memLimit(t), kvGCPercentFor(3*tb), prevLimit)
	}

	// A load without a base (the replica is past it), in a small process:
	// the floor of headroom, and never above the limit found.
	tu.step(rsm.Restore{Segments: 1 << 20}, gcState{live: 1 << 20, inUse: 3 << 20, gcs: 20})
	off(true)
	limit("segments only", (2<<20)+(1<<20)+kvLoadFloor)
	tu.step(rsm.Restore{Segments: 1 << 20}, gcState{live: prevLimit, inUse: prevLimit, gcs: 21})
	limit("past the limit found", prevLimit)
	// The headroom: 20% of a live heap below 512 MiB, 50% from there
	// (over the 2 MiB the process used besides its heap as the load began).
	tu.step(rsm.Restore{Segments: 1 << 20}, gcState{live: kvLoadLargeFrom - 100, inUse: kvLoadLargeFrom, gcs: 22})
	limit("below 512 MiB live", (2<<20)+(kvLoadLargeFrom-100)+(kvLoadLargeFrom-100)/100*20)
	tu.step(rsm.Restore{Segments: 1 << 20}, gcState{live: kvLoadLargeFrom, inUse: kvLoadLargeFrom + 100, gcs: 23})
	limit("at 512 MiB live", (2<<20)+kvLoadLargeFrom+kvLoadLargeFrom/100*50)
	tu.stop()
	if memLimit(t) != prevLimit {
		t.Fatalf("memory limit %d after stop, want %d", memLimit(t), prevLimit)
	}
}

// TestTuneGCFollowsLoads: tuneGC turns the collector off while restoring
// gives a load, and back on after, with the memory limit it found.
func TestTuneGCFollowsLoads(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(333))
	const prevLimit = 1 << 60
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(prevLimit))
	var restoring atomic.Pointer[rsm.Restore]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tuneGC(ctx, time.Millisecond, func() rsm.Restore {
			if r := restoring.Load(); r != nil {
				return *r
			}
			return rsm.Restore{}
		})
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC %d, limit %d", what, gogc(t), memLimit(t))
			}
		}
	}
	restoring.Store(&rsm.Restore{Base: 1 << 50, Segments: 1 << 50})
	waitFor("a load", func() bool { return memLimit(t) < prevLimit && memLimit(t) >= 1<<50 && gogc(t) < 0 })
	restoring.Store(nil)
	waitFor("after the load", func() bool { return memLimit(t) == prevLimit && gogc(t) <= kvGCMaxPercent })
	cancel()
	<-done
	if got := gogc(t); got != 333 {
		t.Fatalf("GOGC %d after tuneGC returned, want 333", got)
	}
}
