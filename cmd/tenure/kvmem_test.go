package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
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
		tuneGC(ctx, time.Millisecond)
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
