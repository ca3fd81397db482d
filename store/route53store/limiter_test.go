package route53store

import (
	"context"
	"testing"
	"time"
)

func TestLimiterPaces(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(5, 2)
	l.now = func() time.Time { return now }
	want := []time.Duration{0, 0, 200 * time.Millisecond, 400 * time.Millisecond}
	for i, w := range want {
		if got := l.reserve(); got != w {
			t.Errorf("request %d at once: wait %v, want %v", i, got, w)
		}
	}
	// A second later five tokens have come back, three of them owed.
	now = now.Add(time.Second)
	if got := l.reserve(); got != 0 {
		t.Errorf("after a second: wait %v, want 0", got)
	}
	// Told to slow down, the bucket empties.
	l.drain()
	if got := l.reserve(); got != 200*time.Millisecond {
		t.Errorf("after drain: wait %v, want 200ms", got)
	}
	// Never more than burst saved up.
	now = now.Add(time.Hour)
	for i := 0; i < 2; i++ {
		l.reserve()
	}
	if got := l.reserve(); got == 0 {
		t.Error("a third request after an hour went at once: burst is 2")
	}
}

func TestLimiterWaitEndsWithTheContext(t *testing.T) {
	l := newLimiter(0.001, 1)
	if err := l.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.wait(ctx); err != context.Canceled {
		t.Errorf("wait with a cancelled context: %v", err)
	}
	if newLimiter(-1, 0) != nil || newLimiter(0, 5) != nil {
		t.Error("no rate should mean no limiter")
	}
	var none *limiter
	if err := none.wait(context.Background()); err != nil {
		t.Errorf("nil limiter: %v", err)
	}
	none.drain()
}
