package main

import (
	"context"
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
const (
	kvGCGrowth     = 10      // percent of the live heap
	kvGCFloor      = 4 << 20 // bytes of headroom at least
	kvGCMaxPercent = 100     // Go's default, for the smallest heaps
	kvGCEvery      = 100 * time.Millisecond
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

// tuneGC sets GOGC from the live heap every period until ctx ends, then
// restores the GOGC it found. A stale setting is harmless: GOGC is a
// proportion of the heap found live by the last collection.
func tuneGC(ctx context.Context, period time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() int {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return kvGCMaxPercent
		}
		return kvGCPercentFor(sample[0].Value.Uint64())
	}
	cur := read()
	prev := debug.SetGCPercent(cur)
	defer debug.SetGCPercent(prev)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p := read(); p != cur {
			debug.SetGCPercent(p)
			cur = p
		}
	}
}
