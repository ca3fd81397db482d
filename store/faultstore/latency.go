package faultstore

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Latency returns the delay to add to one call. It is given the Store's
// random source (and called with the Store's lock held, so it must not call
// the Store) so that a seeded Store draws the same delays on every run. A
// negative result counts as no delay.
type Latency func(r *rand.Rand) time.Duration

// Fixed adds d to every call.
func Fixed(d time.Duration) Latency {
	return func(*rand.Rand) time.Duration { return d }
}

// Uniform draws from [lo, hi]; if hi <= lo every call gets lo.
func Uniform(lo, hi time.Duration) Latency {
	return func(r *rand.Rand) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	}
}

// Exponential draws from an exponential distribution with the given mean:
// mostly short delays, occasionally long ones.
func Exponential(mean time.Duration) Latency {
	return func(r *rand.Rand) time.Duration {
		return toDuration(r.ExpFloat64() * float64(mean))
	}
}

// LogNormal draws from a log-normal distribution with the given median and
// shape sigma (the standard deviation of the log): the usual model of
// request latency to an object store, where p99 is several times p50.
// sigma 0.5 gives p99 ≈ 3.2 × median; sigma 1 gives p99 ≈ 10 × median.
func LogNormal(median time.Duration, sigma float64) Latency {
	return func(r *rand.Rand) time.Duration {
		return toDuration(float64(median) * math.Exp(sigma*r.NormFloat64()))
	}
}

// Sum adds the delays of ls, for a fixed floor with a random tail such as
// Sum(Fixed(10*time.Millisecond), Exponential(5*time.Millisecond)).
func Sum(ls ...Latency) Latency {
	return func(r *rand.Rand) time.Duration {
		var d time.Duration
		for _, l := range ls {
			d += max(l(r), 0)
		}
		return d
	}
}

// toDuration converts without the undefined behaviour of converting a float
// beyond the range of int64.
func toDuration(f float64) time.Duration {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f > 0:
		return time.Duration(f)
	}
	return 0
}

// sleep waits d, or returns ctx.Err() as soon as ctx ends. With no delay it
// does not look at ctx: whether a call with an ended ctx fails is then up to
// the inner store, as it would be without faultstore.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
