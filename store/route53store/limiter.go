package route53store

import (
	"context"
	"math"
	"sync"
	"time"
)

// limiter is a token bucket that paces requests: rate tokens a second, at
// most burst saved up. A nil *limiter lets everything through.
type limiter struct {
	rate  float64
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
	now    func() time.Time // time.Now; tests replace it
}

// newLimiter returns a bucket that starts full, or nil if rate is not
// positive (no pacing).
func newLimiter(rate float64, burst int) *limiter {
	if rate <= 0 || math.IsInf(rate, 1) {
		return nil
	}
	b := float64(max(burst, 1))
	return &limiter{rate: rate, burst: b, tokens: b, now: time.Now}
}

// reserve takes a token and returns how long to wait before using it.
func (l *limiter) reserve() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = math.Min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}

// refund gives back a token that was reserved but not used.
func (l *limiter) refund() {
	l.mu.Lock()
	l.tokens = math.Min(l.burst, l.tokens+1)
	l.mu.Unlock()
}

// drain empties the bucket: the server said we are too fast, so the next
// requests wait for fresh tokens.
func (l *limiter) drain() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.tokens = math.Min(l.tokens, 0)
	l.mu.Unlock()
}

// wait blocks until a request may be sent, or ctx ends.
func (l *limiter) wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	d := l.reserve()
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		l.refund()
		return ctx.Err()
	}
}
