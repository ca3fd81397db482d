package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// ProbePrefix is where Probe writes its scratch keys.
const ProbePrefix = driver.ScratchPrefix

// probeMaxSize bounds the probe's reads of its scratch key: its records are
// a few dozen bytes, and whatever else is there is not loaded.
const probeMaxSize = 64 << 10

// ProbeResult is what Probe found out about a store.
type ProbeResult struct {
	// Each check is true when the store refused a write whose condition
	// did not hold. CreateIfAbsent and IfMatch are required.
	CreateIfAbsent bool `json:"createIfAbsentEnforced"`
	IfMatch        bool `json:"ifMatchEnforced"`
	// DeleteIfMatch: a conditional delete keeps its contract, refused on
	// a stale version and on a missing key.
	DeleteIfMatch bool `json:"deleteIfMatchEnforced"`
	// DeleteUnsupported, when not empty, is the error with which the
	// Store refused conditional deletes (ErrUnsupported): its driver
	// found that the server ignores their condition (MinIO, versitygw), so
	// it sends none, and deletes nothing. That is accepted: no tenure
	// component makes conditional deletes. A store whose conditional
	// delete is neither kept nor refused, but ignored, is not.
	DeleteUnsupported string `json:"deleteIfMatchUnsupported,omitempty"`

	Rounds int `json:"rounds"`
	// Round-trip latency of each kind of call, over all rounds.
	Get       LatencyStats `json:"get"`
	CreatePut LatencyStats `json:"createIfAbsent"`
	CASPut    LatencyStats `json:"compareAndSwap"`
	// RefusedPut holds two calls a round: the refused create and the
	// refused stale swap.
	RefusedPut  LatencyStats `json:"refusedPut"`
	DeleteMatch LatencyStats `json:"delete"`
}

// OK reports whether the conditions tenure relies on were enforced, and a
// conditional delete is either kept or refused.
func (r ProbeResult) OK() bool {
	return r.CreateIfAbsent && r.IfMatch && (r.DeleteIfMatch || r.DeleteUnsupported != "")
}

// LatencyStats summarises a set of round trips.
type LatencyStats struct {
	N   int           `json:"n"`
	Min time.Duration `json:"minNanos"`
	P50 time.Duration `json:"p50Nanos"`
	Max time.Duration `json:"maxNanos"`
}

func (l LatencyStats) String() string {
	if l.N == 0 {
		return "not measured"
	}
	return fmt.Sprintf("min %v  p50 %v  max %v  (n=%d)", round(l.Min), round(l.P50), round(l.Max), l.N)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func stats(ds []time.Duration) LatencyStats {
	if len(ds) == 0 {
		return LatencyStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return LatencyStats{N: len(s), Min: s[0], P50: s[len(s)/2], Max: s[len(s)-1]}
}

// probeCleanupTries and probeCleanupTimeout bound how hard Probe tries to
// remove a scratch key after a failure: the store may be failing, and the
// caller's context may have ended, so each attempt gets a context of its own.
const (
	probeCleanupTries   = 3
	probeCleanupTimeout = 10 * time.Second
)

// Probe checks on scratch keys under ProbePrefix that the store enforces
// conditional writes (a second create-if-absent fails, a compare-and-swap
// on a stale version fails, a delete on a stale version and one of a
// missing key fail, or conditional deletes are refused with
// ErrUnsupported), and measures round-trip latency over rounds rounds (5
// if rounds < 1). It removes its scratch keys, on failure too (even after ctx ended,
// within a bounded time); a key it could not remove is named in its error.
//
// If the store accepted a write it should have refused, Probe returns the
// result with an error matching ErrConditionsIgnored; every long-lived tenure
// component refuses to run on such a store. Other errors are the store's.
func Probe(ctx context.Context, s *Store, rounds int) (ProbeResult, error) {
	if rounds < 1 {
		rounds = 5
	}
	p := prober{s: s, res: ProbeResult{CreateIfAbsent: true, IfMatch: true, DeleteIfMatch: true, Rounds: rounds}}
	for i := 0; i < rounds; i++ {
		key := ProbePrefix + randomHex(12)
		removed, err := p.round(ctx, key)
		if !removed {
			// Whatever happened, the key may exist: an ambiguous create
			// may have landed, a failed delete may not have.
			err = errors.Join(err, removeScratch(ctx, s, key))
		}
		if err != nil {
			return p.res, err
		}
	}
	res := p.res
	res.Get, res.CreatePut, res.CASPut, res.RefusedPut, res.DeleteMatch = stats(p.get), stats(p.create), stats(p.cas), stats(p.refused), stats(p.del)
	if len(p.ignored) > 0 {
		slices.Sort(p.ignored)
		ignored := slices.Compact(p.ignored)
		why := "tenure cannot keep leases or a log safely on this store"
		if res.CreateIfAbsent && res.IfMatch {
			why = "a conditional delete on it would delete a value it must keep"
		}
		return res, fmt.Errorf("probe: %w: %s; %s", ErrConditionsIgnored, strings.Join(ignored, "; "), why)
	}
	return res, nil
}

// prober holds what Probe's rounds find out.
type prober struct {
	s                              *Store
	res                            ProbeResult
	get, create, cas, refused, del []time.Duration
	ignored                        []string
}

func (p *prober) timed(dst *[]time.Duration, f func() error) error {
	start := time.Now()
	err := f()
	*dst = append(*dst, time.Since(start))
	return err
}

// round runs one round on key and reports whether it removed the key itself.
func (p *prober) round(ctx context.Context, key string) (removed bool, err error) {
	s := p.s
	record := func(step string) []byte { return []byte(fmt.Sprintf(`{"probe":%q,"nonce":%q}`, step, randomHex(16))) }

	var v1 string
	if err := p.timed(&p.create, func() (err error) {
		v1, err = s.Put(ctx, key, record("create"), IfAbsent())
		return err
	}); err != nil {
		return false, fmt.Errorf("probe: create-if-absent on a fresh key: %w", err)
	}

	err = p.timed(&p.refused, func() error {
		_, err := s.Put(ctx, key, record("second-create"), IfAbsent())
		return err
	})
	switch {
	case err == nil:
		p.res.CreateIfAbsent = false
		p.ignored = append(p.ignored, "a second create-if-absent on an existing key succeeded")
		// The store overwrote our record: read the current version.
		if _, v1, err = s.GetLimited(ctx, key, probeMaxSize); err != nil {
			return false, fmt.Errorf("probe: read back: %w", err)
		}
	case !errors.Is(err, ErrPreconditionFailed):
		return false, fmt.Errorf("probe: second create-if-absent: %w", err)
	}

	var v2 string
	if err := p.timed(&p.cas, func() (err error) {
		v2, err = s.Put(ctx, key, record("swap"), IfMatch(v1))
		return err
	}); err != nil {
		return false, fmt.Errorf("probe: compare-and-swap on the current version: %w", err)
	}
	if v2 == v1 {
		return false, fmt.Errorf("probe: %w: a write of new bytes returned the old version %q", ErrConditionsIgnored, v1)
	}

	err = p.timed(&p.refused, func() error {
		_, err := s.Put(ctx, key, record("stale-swap"), IfMatch(v1))
		return err
	})
	switch {
	case err == nil:
		p.res.IfMatch = false
		p.ignored = append(p.ignored, "a compare-and-swap on a stale version succeeded")
		if _, v2, err = s.GetLimited(ctx, key, probeMaxSize); err != nil {
			return false, fmt.Errorf("probe: read back: %w", err)
		}
	case !errors.Is(err, ErrPreconditionFailed):
		return false, fmt.Errorf("probe: compare-and-swap on a stale version: %w", err)
	}

	if err := p.timed(&p.get, func() error {
		_, v, err := s.GetLimited(ctx, key, probeMaxSize)
		if err == nil && v != v2 {
			err = fmt.Errorf("read version %q after writing %q", v, v2)
		}
		return err
	}); err != nil {
		return false, fmt.Errorf("probe: get: %w", err)
	}

	err = s.Delete(ctx, key, IfMatch(v1))
	switch {
	case err == nil:
		p.res.DeleteIfMatch = false
		p.ignored = append(p.ignored, "a delete on a stale version succeeded")
		return true, nil
	case errors.Is(err, ErrUnsupported):
		// The driver refuses conditional deletes on this server, which
		// would ignore them: kept safe, and accepted, as no tenure
		// component makes them. The clean-up deletes unconditionally.
		p.res.DeleteIfMatch = false
		p.res.DeleteUnsupported = err.Error()
		return false, nil
	case !errors.Is(err, ErrPreconditionFailed):
		return false, fmt.Errorf("probe: delete on a stale version: %w", err)
	}
	if err := p.timed(&p.del, func() error { return s.Delete(ctx, key, IfMatch(v2)) }); err != nil {
		return false, fmt.Errorf("probe: delete on the current version: %w", err)
	}
	// The key is gone now: a conditional delete of it must fail.
	err = s.Delete(ctx, key, IfMatch(v2))
	switch {
	case err == nil:
		p.res.DeleteIfMatch = false
		p.ignored = append(p.ignored, "a delete of a missing key succeeded")
	case !errors.Is(err, ErrPreconditionFailed):
		return true, fmt.Errorf("probe: delete of a missing key: %w", err)
	}
	return true, nil
}

// removeScratch deletes key unconditionally (a missing key is success),
// retrying a few times on contexts of its own, and says so if it cannot.
func removeScratch(ctx context.Context, s *Store, key string) error {
	base := context.WithoutCancel(ctx)
	var err error
	for try := 0; try < probeCleanupTries; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		}
		c, cancel := context.WithTimeout(base, probeCleanupTimeout)
		err = s.Delete(c, key, Cond{})
		cancel()
		if err == nil || !IsRetryable(err) || errors.Is(err, ErrClosed) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("probe: could not remove its scratch key %q (delete it by hand): %w", key, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
