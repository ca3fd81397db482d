package main

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// kv serve's default collector policy. A node's heap is mostly its state,
// and the state's values are byte slices, which the collector does not
// scan: a collection costs about the same whatever the headroom, so the
// headroom is what the process's memory pays for fewer of them. With a
// fixed GOGC the headroom grows with the state (25% of a 1 GiB state is
// 256 MiB more memory); this policy lets the heap grow kvGCGrowth percent
// above the live heap, and at least kvGCFloor bytes, so that a small state
// is not collected every few requests (docs/BENCHMARKS.md).
//
// While the node loads a snapshot from the store, that policy would
// collect the heap every 10% of the state's growth, some 40 times for a
// gigabyte, each collection marking the tree loaded so far. A load makes
// little garbage (the state it builds is live, and the objects it reads
// are read into the same buffers), so the collector is off meanwhile,
// under a memory limit of the memory in use when the load began plus
// kvLoadPercent of the snapshot's stored size: the heap is collected only
// if it would pass that. The limit keeps the process within twice the
// state's size whatever the load's garbage; the policy comes back when the
// load ends, or at once if a collection under the limit finds more than
// kvLoadLive of it live (a state larger in memory than on the store: small
// keys and values).
const (
	kvGCGrowth     = 10      // percent of the live heap
	kvGCFloor      = 4 << 20 // bytes of headroom at least
	kvGCMaxPercent = 100     // Go's default, for the smallest heaps
	kvGCEvery      = 10 * time.Millisecond

	kvLoadPercent = 100 // of the snapshot's size, above the memory in use
	kvLoadLive    = 75  // percent of the limit live after a collection: back to the policy
)

// kvGCPercentFor is the GOGC that lets a live heap of live bytes grow by
// kvGCGrowth percent of it, or kvGCFloor bytes if that is more, up to
// kvGCMaxPercent.
func kvGCPercentFor(live uint64) int {
	if live == 0 {
		return kvGCMaxPercent
	}
	p := (uint64(kvGCFloor)*100 + live - 1) / live
	return int(min(kvGCMaxPercent, max(kvGCGrowth, p)))
}

// kvLoadLimit is the memory limit while a snapshot of size bytes loads
// into a process that uses inUse bytes.
func kvLoadLimit(inUse, size uint64) int64 {
	l := inUse + size/100*kvLoadPercent
	if l < inUse || l > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(l)
}

// gcState is what tuneGC reads from the runtime.
type gcState struct {
	live  uint64 // the heap found live by the last collection
	inUse uint64 // the memory the memory limit counts
	gcs   uint64 // collections so far
}

var gcSamples = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/cycles/total:gc-cycles",
}

func readGCState() gcState {
	s := make([]metrics.Sample, len(gcSamples))
	for i, n := range gcSamples {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return gcState{live: u(0), inUse: u(1) - min(u(1), u(2)), gcs: u(3)}
}

// gcTuner is tuneGC's state.
type gcTuner struct {
	percent   int   // the GOGC set
	loading   bool  // the collector is off for a load
	gaveUp    bool  // this load passed kvLoadLive: the policy until it ends
	limit     int64 // the load's memory limit
	prevLimit int64 // the memory limit before the load
	loadGCs   uint64
}

// step applies the policy for a node loading a snapshot of restoring
// bytes (0: none).
func (t *gcTuner) step(restoring uint64, s gcState) {
	switch {
	case restoring > 0 && !t.loading && !t.gaveUp:
		t.prevLimit = debug.SetMemoryLimit(-1)
		t.limit = min(t.prevLimit, kvLoadLimit(s.inUse, restoring))
		debug.SetMemoryLimit(t.limit)
		debug.SetGCPercent(-1)
		t.percent, t.loading, t.loadGCs = -1, true, s.gcs
		return
	case t.loading && restoring > 0 && (s.gcs == t.loadGCs || s.live <= uint64(t.limit)/100*kvLoadLive):
		return
	case t.loading:
		debug.SetMemoryLimit(t.prevLimit)
		t.loading, t.gaveUp = false, restoring > 0
	case restoring == 0:
		t.gaveUp = false
	}
	if p := kvGCPercentFor(s.live); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// stop puts back the memory limit a load changed.
func (t *gcTuner) stop() {
	if t.loading {
		debug.SetMemoryLimit(t.prevLimit)
		t.loading = false
	}
}

// tuneGC sets GOGC from the live heap every period, and the load's policy
// while restoring (nil: never) gives a size, until ctx ends; then it
// restores the GOGC and memory limit it found. A stale setting is
// harmless: GOGC is a proportion of the heap found live by the last
// collection.
func tuneGC(ctx context.Context, period time.Duration, restoring func() uint64) {
	if restoring == nil {
		restoring = func() uint64 { return 0 }
	}
	t := &gcTuner{percent: kvGCPercentFor(readGCState().live)}
	prev := debug.SetGCPercent(t.percent)
	defer debug.SetGCPercent(prev)
	defer t.stop()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		t.step(restoring(), readGCState())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
