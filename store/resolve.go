package store

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// ResolveOptions tune PutResolved. The zero value is the default.
type ResolveOptions struct {
	// Attempts is the number of write attempts, at least 1. Default 3.
	Attempts int
	// Backoff returns the pause before write attempt n (n >= 1 is the first
	// retry). Default: 100 ms, then 1 s, each with ±20% jitter.
	Backoff func(n int) time.Duration
	// Owns reports whether a stored value is the one this call wrote.
	// Default: byte equality, which is exact because every tenure record
	// carries a random nonce.
	Owns func(stored []byte) bool
	// AttemptTimeout bounds each write and each read-back; a write that
	// times out is ambiguous and is settled by reading back. Default: none
	// beyond ctx.
	AttemptTimeout time.Duration
	// MaxSize is the largest value the key may hold, in bytes: read-backs
	// use GetLimited with it, so that a huge object at the key is not
	// loaded (a read-back that finds one leaves the outcome unknown and the
	// write is tried again). Default: read-backs are not bounded.
	MaxSize int64
}

// bounded returns ctx limited to d, if d is set.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// DefaultBackoff is the retry schedule of DESIGN.md: immediately, then after
// 100 ms, then 1 s, with ±20% jitter.
func DefaultBackoff(n int) time.Duration {
	var d time.Duration
	switch {
	case n <= 0:
		return 0
	case n == 1:
		d = 100 * time.Millisecond
	default:
		d = time.Second
	}
	return Jitter(d, 0.2)
}

// Jitter returns d scaled by a random factor in [1-frac, 1+frac].
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 - frac + 2*frac*rand.Float64()))
}

// PutResolved writes like Put and settles every ambiguous outcome by reading
// the key back: a timeout, a 5xx, a broken connection, throttling, or a
// precondition failure on a retry (our own earlier attempt may be what made
// the condition false). If the stored value is ours, the write succeeded and
// its version is returned. If the condition still holds, the write is
// retried. Otherwise the write did not land and the result matches
// ErrPreconditionFailed.
//
// A precondition failure or other definite error on the first attempt is
// returned at once. If the outcome cannot be settled within the attempts or
// before ctx ends, the first ambiguous error is returned and IsAmbiguous
// reports true for it: the caller must then assume the write may have
// landed, or may yet land.
func PutResolved(ctx context.Context, s *Store, key string, data []byte, cond Cond, opts ResolveOptions) (string, error) {
	attempts := opts.Attempts
	if attempts < 1 {
		attempts = 3
	}
	backoff := opts.Backoff
	if backoff == nil {
		backoff = DefaultBackoff
	}
	owns := opts.Owns
	if owns == nil {
		owns = func(stored []byte) bool { return bytes.Equal(stored, data) }
	}

	// ambiguous is the first error after which our write may have
	// landed. From then on only a read-back can settle the outcome: a
	// later definite answer (a 412 caused by our own earlier write, a
	// permanent error, a closed store) must not be reported as final.
	var ambiguous error
	for n := 0; n < attempts; n++ {
		if n > 0 {
			if err := sleep(ctx, backoff(n)); err != nil {
				return "", ambiguous
			}
		}
		actx, cancel := bounded(ctx, opts.AttemptTimeout)
		version, err := s.Put(actx, key, data, cond)
		cancel()
		if err == nil {
			return version, nil
		}
		definite := errors.Is(err, ErrPreconditionFailed) || !IsAmbiguous(err)
		switch {
		case ambiguous == nil && definite:
			// Nothing of ours can have landed: the answer is final.
			return "", err
		case ambiguous == nil:
			ambiguous = err
		case definite && !errors.Is(err, ErrPreconditionFailed):
			// Cannot retry (permanent, closed), and an earlier attempt
			// may have landed.
			return "", ambiguous
		}

		actx, cancel = bounded(ctx, opts.AttemptTimeout)
		landed, retry, version, rerr := readBack(actx, s, key, cond, owns, opts.MaxSize)
		cancel()
		switch {
		case rerr != nil:
			// Could not read: the outcome stays unknown; try the write
			// again, which either lands or tells us with a 412 that the
			// next read-back settles.
			continue
		case landed:
			return version, nil
		case !retry:
			// Not ours, and the condition no longer holds, so our write
			// cannot land later either.
			return "", &Error{Op: "put", Key: key, Kind: driver.PreconditionFailed,
				Err: errors.New("the write did not land and its condition no longer holds (earlier attempt: " + err.Error() + ")")}
		}
	}
	return "", ambiguous
}

// readBack reads key and reports whether our value is stored (landed), or
// whether cond still holds so a retry may apply (retry).
func readBack(ctx context.Context, s *Store, key string, cond Cond, owns func([]byte) bool, max int64) (landed, retry bool, version string, err error) {
	var data []byte
	if max > 0 {
		data, version, err = s.GetLimited(ctx, key, max)
	} else {
		data, version, err = s.Get(ctx, key)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return false, cond.Kind == driver.IfAbsent, "", nil
	case err != nil:
		return false, false, "", err
	case owns(data):
		return true, false, version, nil
	default:
		return false, cond.Kind == driver.IfMatch && version == cond.Version, "", nil
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
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
