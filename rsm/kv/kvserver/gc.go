package kvserver

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/tenure-io/tenure/rsm"
)

// kv serve's default collector policy. A node's heap is mostly its state,
// and the state's values are byte slices, which the collector does not
// scan: a collection costs about the same whatever the headroom, so the
// headroom is what the process's memory pays for fewer of them. With a
// fixed GOGC the headroom grows with the state (25% of a 1 GiB state is
// 256 MiB more memory); this policy lets the heap grow kvGCGrowth percent
// above the live heap, and at least kvGCFloor bytes, so that a small state
// is not collected every few requests (docs/BENCHMARKS.md): under a
// thousand etcd clients a node's heap is mostly their streams and
// requests, and with 4 MiB of headroom it was collected every thousand
// puts or so, its collector a fifth of its CPU. From
// kvLoadLargeFrom of live heap it lets it grow kvGCGrowthLarge percent: a
// collection then marks millions of keys and values, some 300 ms of CPU
// for a million, and at 10% a node under writes spent a fifth of its time
// marking, its puts slowed by the marks; the process's own memory is then a
// small part of the whole, and with values of a KiB a live heap of 1.14
// times the data, plus 25%, stays well below twice the data.
//
// While the node loads a snapshot from the store, that policy would
// collect the heap every 10% of the state's growth, some 40 times for a
// gigabyte, each collection marking the tree loaded so far. So the
// collector is off meanwhile, under a memory limit: the memory in use
// besides the live heap, plus the live heap, plus kvLoadGrowth percent of
// it (at least kvLoadFloor bytes), the heap collected only if it would
// pass that. The live heap the limit starts from is the one found, plus
// the base's size: a base restores the whole state and makes little
// garbage. After each collection the limit follows the live heap found,
// never below where it started.
// The segments applied after the base may grow the state (a fill) or
// only make garbage (overwrites, each segment's buffers and decoded
// entries); a limit sized by their bytes, as it was, let a cold start
// after sustained overwrites peak at 2.3 to 3 times the data
// (measured then: docs/BENCHMARKS.md in git history). From kvLoadLargeFrom of live heap the headroom is
// kvLoadGrowthLarge percent: the process's own memory (its binary's pages,
// the runtime's, some 30 MiB) is then a small part of the whole, so with
// values of a KiB (a live heap 1.14 times the data) the peak stays far
// below twice the data, and a gigabyte load is collected about half as
// often. The policy comes back when the load ends.
const (
	kvGCGrowth      = 10       // percent of the live heap
	kvGCGrowthLarge = 25       // percent, from kvLoadLargeFrom
	kvGCFloor       = 16 << 20 // bytes of headroom at least
	kvGCMaxPercent  = 100      // Go's default, for the smallest heaps
	kvGCEvery       = 10 * time.Millisecond

	kvLoadGrowth      = 20        // percent of the live heap, during a load
	kvLoadGrowthLarge = 50        // percent, from kvLoadLargeFrom
	kvLoadLargeFrom   = 512 << 20 // bytes of live heap
	kvLoadFloor       = 16 << 20  // bytes of headroom at least, during a load
)

// kvLoadPercent is the headroom during a load over a live heap of live
// bytes, in percent of it.
func kvLoadPercent(live uint64) uint64 {
	if live >= kvLoadLargeFrom {
		return kvLoadGrowthLarge
	}
	return kvLoadGrowth
}

// kvGCPercentFor is the GOGC that lets a live heap of live bytes grow by
// kvGCGrowth percent of it (kvGCGrowthLarge from kvLoadLargeFrom), or
// kvGCFloor bytes if that is more, up to kvGCMaxPercent.
func kvGCPercentFor(live uint64) int {
	if live == 0 {
		return kvGCMaxPercent
	}
	if live >= kvLoadLargeFrom {
		return kvGCGrowthLarge
	}
	p := (uint64(kvGCFloor)*100 + live - 1) / live
	return int(min(kvGCMaxPercent, max(kvGCGrowth, p)))
}

// kvLoadLimit is the memory limit during a load for a live heap of live
// bytes in a process that uses over bytes besides it.
func kvLoadLimit(over, live uint64) int64 {
	l := over + live + max(kvLoadFloor, live/100*kvLoadPercent(live))
	if l < live || l > math.MaxInt64 {
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
	percent   int    // the GOGC set
	loading   bool   // the collector is off for a load
	over      uint64 // during a load: the memory in use besides the live heap when it began
	floor     int64  // the load's first limit: it never sets a lower one
	limit     int64  // the load's memory limit
	prevLimit int64  // the memory limit before the load
	loadGCs   uint64 // the collections counted when the limit was last set
}

// step applies the policy for a node loading the snapshot r (none: the
// zero Restore).
func (t *gcTuner) step(r rsm.Restore, s gcState) {
	switch {
	case r.Size() > 0 && !t.loading:
		t.prevLimit = debug.SetMemoryLimit(-1)
		t.over = s.inUse - min(s.inUse, s.live)
		t.floor = 0
		t.setLimit(s.live+r.Base, s.gcs)
		t.floor = t.limit
		debug.SetGCPercent(-1)
		t.percent, t.loading = -1, true
		return
	case t.loading && r.Size() > 0:
		if s.gcs != t.loadGCs {
			t.setLimit(s.live, s.gcs)
		}
		return
	case t.loading:
		debug.SetMemoryLimit(t.prevLimit)
		t.loading = false
	}
	if p := kvGCPercentFor(s.live); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// setLimit sets the load's memory limit for a live heap of live bytes,
// after gcs collections; never below the load's first limit (collections
// while the base loads find only part of it), nor above the limit before
// the load.
func (t *gcTuner) setLimit(live, gcs uint64) {
	t.limit = min(t.prevLimit, max(t.floor, kvLoadLimit(t.over, live)))
	t.loadGCs = gcs
	debug.SetMemoryLimit(t.limit)
}

// stop puts back the memory limit a load changed.
func (t *gcTuner) stop() {
	if t.loading {
		debug.SetMemoryLimit(t.prevLimit)
		t.loading = false
	}
}

// tuneGC sets GOGC from the live heap every period, and the load's policy
// while restoring (nil: never) gives a load, until ctx ends; then it
// restores the GOGC and memory limit it found. A stale setting is
// harmless: GOGC is a proportion of the heap found live by the last
// collection.
func tuneGC(ctx context.Context, period time.Duration, restoring func() rsm.Restore) {
	if restoring == nil {
		restoring = func() rsm.Restore { return rsm.Restore{} }
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
