package faultstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// Option configures a Store or a Transport.
type Option func(*options)

type options struct {
	seed    uint64
	hasSeed bool
}

// WithSeed makes every random draw (fault probabilities, latencies) come
// from a source seeded with seed, so that a sequence of calls meets the same
// faults on every run. Without it the seed is random. Concurrent calls still
// draw in whatever order they arrive.
func WithSeed(seed uint64) Option {
	return func(o *options) { o.seed, o.hasSeed = seed, true }
}

func newRand(opts []Option) *rand.Rand {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !o.hasSeed {
		o.seed = rand.Uint64()
	}
	return rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
}

// Partition is the state of the simulated network between the caller and the
// store.
type Partition int

const (
	// Connected: calls go through (subject to the other knobs).
	Connected Partition = iota
	// Partitioned: every call fails at once with a Transient error, without
	// reaching the store.
	Partitioned
	// BlackHoled: every call hangs until its ctx ends, then fails with a
	// Transient error that wraps ctx.Err(), without reaching the store. A
	// call hanging when the partition heals keeps hanging, as a call on a
	// dead TCP connection would.
	BlackHoled
)

func (p Partition) String() string {
	switch p {
	case Connected:
		return "connected"
	case Partitioned:
		return "partitioned"
	case BlackHoled:
		return "black-holed"
	}
	return fmt.Sprintf("Partition(%d)", int(p))
}

// Call describes one finished call, for an observer set with SetObserver.
type Call struct {
	Op     Op     // a single operation
	Key    string // the key, or the prefix for List
	Result Result
	Err    error // what the caller got
	// Injected is true when a rule or the partition changed the call's
	// outcome; latency alone does not count.
	Injected bool
	// Reached is true when the call was passed to the inner store, so a
	// write may have taken effect whatever Err says.
	Reached bool
}

// Store is a driver.Store that wraps another, counts every call and injects
// the faults it is told to. It is safe for concurrent use, and every knob
// may be changed while calls are in flight; a call sees the knobs as they
// were when it started.
type Store struct {
	inner driver.Store

	mu        sync.Mutex // guards the fields below and rng
	rng       *rand.Rand
	rules     []*rule
	nextID    uint64
	latency   [numOps]Latency
	partition Partition
	ignore    Op

	observer atomic.Pointer[func(Call)]
	counts   [numOps][numResults]atomic.Int64
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
	_ driver.Reader = (*Store)(nil)
)

// New returns a Store that passes every call to inner until it is told to
// do otherwise. It owns inner: Close closes it.
func New(inner driver.Store, opts ...Option) *Store {
	return &Store{inner: inner, rng: newRand(opts)}
}

// Counts returns a snapshot of the calls made since New or the last Reset,
// by operation and result, injected faults included.
func (s *Store) Counts() Snapshot {
	out := Snapshot{}
	for i := range numOps {
		for r := range numResults {
			if n := s.counts[i][r].Load(); n != 0 {
				out[Key{Op: 1 << i, Result: Result(r)}] = n
			}
		}
	}
	return out
}

// Reset zeroes the counters. Faults stay as they are set; see ClearFaults.
func (s *Store) Reset() {
	for i := range numOps {
		for r := range numResults {
			s.counts[i][r].Store(0)
		}
	}
}

// SetObserver calls f after every call, in the caller's goroutine, before
// the call returns; nil removes it. f must be safe for concurrent use if
// the Store is used concurrently, and must not block.
func (s *Store) SetObserver(f func(Call)) {
	if f == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&f)
}

// SetLatency adds a delay drawn from l to every call of the operations in
// ops; nil removes it. The delay comes before any fault and ends early,
// returning ctx.Err(), if the caller's ctx ends.
func (s *Store) SetLatency(ops Op, l Latency) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range numOps {
		if ops&(1<<i) != 0 {
			s.latency[i] = l
		}
	}
}

// SetPartition cuts the store off (Partitioned, BlackHoled) or heals it
// (Connected).
func (s *Store) SetPartition(p Partition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partition = p
}

// IgnoreConditions makes the writes in ops unconditional, as a store that
// does not enforce conditions would: a create overwrites an existing key, a
// compare-and-swap or a delete applies whatever the version. It replaces
// the previous set; IgnoreConditions(0) restores conditional writes.
//
// The inner store need not accept unconditional writes: a Put whose
// condition is ignored reads the key and writes with the condition that
// holds now, retrying if another writer gets in between. Those inner calls
// are not counted.
func (s *Store) IgnoreConditions(ops Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignore = ops & Writes
}

// AddRule adds r after the existing rules and returns a function that
// removes it (safe to call more than once). It returns an error, and adds
// nothing, if r is invalid.
func (s *Store) AddRule(r Rule) (remove func(), err error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	id := s.add(r, knob{})
	return func() { s.remove(id) }, nil
}

// FailRate makes each call of the operations in ops fail with an error of
// kind with chance p, without reaching the store. Calling it again with the
// same ops and kind replaces the rate; p <= 0 removes it.
func (s *Store) FailRate(ops Op, kind driver.Kind, p float64) {
	s.setRate(knob{name: "fail", ops: ops, kind: kind}, Rule{Ops: ops, P: p, Action: Fail, Kind: kind})
}

// Throttle makes each call of the operations in ops fail with a Throttled
// error (S3's 503 SlowDown) with chance p. Calling it again with the same
// ops replaces the rate; p <= 0 removes it.
func (s *Store) Throttle(ops Op, p float64) {
	s.FailRate(ops, driver.Throttled, p)
}

// AmbiguousRate applies each call of the operations in ops and then fails
// it with a Transient error with chance p (ApplyThenFail). Calling it again
// with the same ops replaces the rate; p <= 0 removes it.
func (s *Store) AmbiguousRate(ops Op, p float64) {
	s.setRate(knob{name: "ambiguous", ops: ops}, Rule{Ops: ops, P: p, Action: ApplyThenFail})
}

// FailNext makes the next n calls of the operations in ops fail with an
// error of kind, without reaching the store.
func (s *Store) FailNext(ops Op, kind driver.Kind, n int) {
	if ops&AllOps != 0 && n > 0 {
		s.add(Rule{Ops: ops & AllOps, P: 1, Times: n, Action: Fail, Kind: kind}, knob{})
	}
}

// AmbiguousNext applies the next n calls of the operations in ops and then
// fails them with a Transient error (ApplyThenFail): the write landed, the
// caller does not know it.
func (s *Store) AmbiguousNext(ops Op, n int) {
	if ops&AllOps != 0 && n > 0 {
		s.add(Rule{Ops: ops & AllOps, P: 1, Times: n, Action: ApplyThenFail}, knob{})
	}
}

// ClearFaults removes every rule, every latency, the partition and ignored
// conditions. The counters and the observer stay.
func (s *Store) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
	s.latency = [numOps]Latency{}
	s.partition = Connected
	s.ignore = 0
}

func (s *Store) add(r Rule, k knob) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.rules = append(s.rules, &rule{Rule: r, id: s.nextID, knob: k})
	return s.nextID
}

func (s *Store) remove(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = slices.DeleteFunc(s.rules, func(r *rule) bool { return r.id == id })
}

// setRate replaces the rule of knob k in place, so that its order among the
// other rules does not change when a test turns a rate up or down.
func (s *Store) setRate(k knob, r Rule) {
	r.Ops &= AllOps
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.rules, func(x *rule) bool { return x.knob == k })
	switch {
	case r.P <= 0 || r.Ops == 0 || math.IsNaN(r.P):
		if i >= 0 {
			s.rules = slices.Delete(s.rules, i, i+1)
		}
	case i >= 0:
		s.rules[i].Rule = r
	default:
		s.nextID++
		s.rules = append(s.rules, &rule{Rule: r, id: s.nextID, knob: k})
	}
}

// plan is what happens to one call, decided under the lock when it starts.
type plan struct {
	partition Partition
	latency   time.Duration
	fault     *Rule
	ignore    bool
}

func (s *Store) plan(op Op, key string) plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := plan{partition: s.partition, ignore: s.ignore&op != 0}
	if p.partition != Connected {
		return p
	}
	if l := s.latency[op.index()]; l != nil {
		p.latency = l(s.rng)
	}
	for i, r := range s.rules {
		if !r.matches(op, key) {
			continue
		}
		r.matched++
		if r.matched <= r.Skip || !fires(s.rng, r.P) {
			continue
		}
		r.hits++
		f := r.Rule
		p.fault = &f
		if r.Times > 0 && r.hits >= r.Times {
			s.rules = slices.Delete(s.rules, i, i+1)
		}
		break
	}
	return p
}

// do runs one call through the knobs, counts it and reports it. call gets
// whether to ignore the write's condition.
func (s *Store) do(ctx context.Context, op Op, key string, call func(ctx context.Context, ignore bool) error) error {
	injected, reached, err := s.run(ctx, op, key, call)
	result := OK
	if err != nil {
		result = ResultOf(driver.Classify(s.inner, err))
	}
	s.counts[op.index()][result].Add(1)
	if f := s.observer.Load(); f != nil {
		(*f)(Call{Op: op, Key: key, Result: result, Err: err, Injected: injected, Reached: reached})
	}
	return err
}

// run returns the call's error and whether a fault was injected and the
// inner store reached.
func (s *Store) run(ctx context.Context, op Op, key string, call func(context.Context, bool) error) (injected, reached bool, err error) {
	p := s.plan(op, key)
	switch p.partition {
	case Connected:
	case BlackHoled:
		<-ctx.Done()
		return true, false, driver.Errorf(driver.Transient, "faultstore: injected partition: no response to %s before the context ended: %w", op, ctx.Err())
	default:
		return true, false, driver.Errorf(driver.Transient, "faultstore: injected partition: %s could not reach the store", op)
	}
	if err := sleep(ctx, p.latency); err != nil {
		return false, false, err
	}
	f := p.fault
	if f == nil {
		return false, true, call(ctx, p.ignore)
	}
	// The caller gave up while waiting on an injected fault: it sees its
	// ctx's error, but as the Transient failure the fault is.
	ended := func(what string) error {
		return driver.Errorf(driver.Transient, "faultstore: injected %s on %s: no response before the context ended: %w", what, op, ctx.Err())
	}
	switch f.Action {
	case Fail:
		if err := sleep(ctx, f.Delay); err != nil {
			return true, false, ended(f.Kind.String() + " error")
		}
		if f.Err != nil {
			return true, false, driver.Errorf(f.Kind, "faultstore: injected %s error on %s: %w", f.Kind, op, f.Err)
		}
		return true, false, driver.Errorf(f.Kind, "faultstore: injected %s error on %s", f.Kind, op)
	case Hang:
		if err := hang(ctx, f.Delay); err != nil {
			return true, false, ended("lost request")
		}
		return true, false, driver.Errorf(driver.Transient, "faultstore: injected lost request: no response to %s within %v: %w", op, f.Delay, os.ErrDeadlineExceeded)
	case ApplyThenFail:
		_ = call(ctx, p.ignore)
		if err := sleep(ctx, f.Delay); err != nil {
			return true, true, ended("ambiguous success")
		}
		return true, true, driver.Errorf(driver.Transient, "faultstore: injected ambiguous success: the %s reached the store, then the connection broke: %w", op, syscall.ECONNRESET)
	default: // ApplyThenHang
		_ = call(ctx, p.ignore)
		if err := hang(ctx, f.Delay); err != nil {
			return true, true, ended("lost response")
		}
		return true, true, driver.Errorf(driver.Transient, "faultstore: injected lost response: the %s reached the store, but no response came within %v: %w", op, f.Delay, os.ErrDeadlineExceeded)
	}
}

// hang waits d, or until ctx ends if d is zero; it returns ctx.Err() if ctx
// ends first.
func hang(ctx context.Context, d time.Duration) error {
	if d > 0 {
		return sleep(ctx, d)
	}
	<-ctx.Done()
	return ctx.Err()
}

// Get counts and passes the call to the inner store, unless a fault says
// otherwise.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	var (
		data    []byte
		version string
	)
	err := s.do(ctx, OpGet, key, func(ctx context.Context, _ bool) (err error) {
		data, version, err = s.inner.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return data, version, nil
}

// ReadInto is GetLimited without the version (driver.Reader), passed on
// to the inner store's ReadInto, or its GetLimited if it has none; it
// meets the faults of a Get.
func (s *Store) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	var data []byte
	err := s.do(ctx, OpGet, key, func(ctx context.Context, _ bool) (err error) {
		if r, ok := s.inner.(driver.Reader); ok {
			data, err = r.ReadInto(ctx, key, buf, max)
		} else {
			data, _, err = s.inner.GetLimited(ctx, key, max)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// Put counts and passes the call to the inner store, unless a fault says
// otherwise; with IgnoreConditions it drops cond.
// GetLimited is Get with a limit, passed on to the inner store; it meets
// the faults of a Get.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	var (
		data    []byte
		version string
	)
	err := s.do(ctx, OpGet, key, func(ctx context.Context, _ bool) (err error) {
		data, version, err = s.inner.GetLimited(ctx, key, max)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return data, version, nil
}

func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	op := OpPutCAS
	if cond.Kind == driver.IfAbsent {
		op = OpPutCreate
	}
	var version string
	err := s.do(ctx, op, key, func(ctx context.Context, ignore bool) (err error) {
		if ignore {
			version, err = s.overwrite(ctx, key, data)
		} else {
			version, err = s.inner.Put(ctx, key, data, cond)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return version, nil
}

// overwriteAttempts bounds overwrite under contention; it is only reached
// when other writers change the key faster than we can read it.
const overwriteAttempts = 100

// overwrite writes data whatever the key holds, using only the conditional
// writes every driver supports.
func (s *Store) overwrite(ctx context.Context, key string, data []byte) (string, error) {
	for range overwriteAttempts {
		cond := driver.Cond{Kind: driver.IfAbsent}
		_, current, err := s.inner.Get(ctx, key)
		switch {
		case err == nil:
			cond = driver.Cond{Kind: driver.IfMatch, Version: current}
		case driver.Classify(s.inner, err) != driver.NotFound:
			return "", err
		}
		version, err := s.inner.Put(ctx, key, data, cond)
		if err == nil || driver.Classify(s.inner, err) != driver.PreconditionFailed {
			return version, err
		}
	}
	return "", driver.Errorf(driver.Conflict, "faultstore: ignoring conditions: %q changed under each of %d attempts to overwrite it", key, overwriteAttempts)
}

// Delete counts and passes the call to the inner store, unless a fault says
// otherwise; with IgnoreConditions it drops cond.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	return s.do(ctx, OpDelete, key, func(ctx context.Context, ignore bool) error {
		if ignore {
			return s.inner.Delete(ctx, key, driver.Cond{})
		}
		return s.inner.Delete(ctx, key, cond)
	})
}

// List counts and passes the call to the inner store, unless a fault says
// otherwise. Rules match prefix as if it were a key.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	var items []driver.Item
	err := s.do(ctx, OpList, prefix, func(ctx context.Context, _ bool) (err error) {
		items, err = s.inner.List(ctx, prefix, after, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// Pack is passed on to the inner store (driver.Packer), without faults:
// it decides how the inner store keeps keys, which the faults do not
// model.
func (s *Store) Pack(ctx context.Context, prefix string) (bool, error) {
	return driver.Pack(ctx, s.inner, prefix)
}

// Packs is the inner store's (driver.Packer).
func (s *Store) Packs() bool { return driver.Packs(s.inner) }

// ListKeys is List without versions (driver.KeyLister), passed on to the
// inner store's ListKeys, or its List if it has none; it meets the faults
// of a List.
func (s *Store) ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	var keys []string
	err := s.do(ctx, OpList, prefix, func(ctx context.Context, _ bool) (err error) {
		keys, err = driver.ListKeys(ctx, s.inner, prefix, after, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// ErrorKind classifies the inner store's errors; faultstore's own errors
// carry their kind.
func (s *Store) ErrorKind(err error) driver.Kind { return s.inner.ErrorKind(err) }

// CheckKey applies the inner store's key limits, if it has any.
func (s *Store) CheckKey(key string) error {
	if l, ok := s.inner.(driver.Limits); ok {
		return l.CheckKey(key)
	}
	return nil
}

// Close closes the inner store. It is not counted and no fault applies.
func (s *Store) Close() error { return s.inner.Close() }
