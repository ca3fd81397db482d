package rsmtest

import (
	"context"
	"math/rand/v2"
	"sync"

	"github.com/tenure-io/tenure/store/driver"
)

// gate is the store as one paused process sees it: while paused, every
// call waits until the process resumes (or its ctx ends) before it reaches
// the store, except that some writes land at once and only their responses
// wait, as a request sent just before the pause would. It is safe for
// concurrent use.
type gate struct {
	inner driver.Store

	mu     sync.Mutex
	paused chan struct{} // non-nil while paused; closed on resume
	land   float64       // chance that a write made while paused lands at once
	rng    *rand.Rand
	// passed counts the calls past the gate that have not returned;
	// drained is closed and replaced each time it falls to 0.
	passed  int
	drained chan struct{}
}

var (
	_ driver.Store  = (*gate)(nil)
	_ driver.Limits = (*gate)(nil)
)

func newGate(inner driver.Store, seed uint64) *gate {
	return &gate{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

// pause holds calls from now on; land is the chance that a write lands
// before its response is held.
func (g *gate) pause(land float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
	g.land = land
}

// resume lets every held call go on.
func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

// check returns the channel to wait on (nil when not paused) and whether a
// write should land first.
func (g *gate) check(write bool) (wait chan struct{}, landFirst bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		return nil, false
	}
	return g.paused, write && g.land > 0 && g.rng.Float64() < g.land
}

// enter counts a call reaching the inner store; the call must run the
// returned function when it returns.
func (g *gate) enter() (leave func()) {
	g.mu.Lock()
	g.passed++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.passed--; g.passed == 0 && g.drained != nil {
			close(g.drained)
			g.drained = nil
		}
	}
}

// settle waits until no call is past the gate (while paused: the calls
// that passed before the pause have returned), or ctx ends.
func (g *gate) settle(ctx context.Context) error {
	g.mu.Lock()
	if g.passed == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.drained == nil {
		g.drained = make(chan struct{})
	}
	ch := g.drained
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func held(ctx context.Context, wait chan struct{}) error {
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return driver.Errorf(driver.Transient, "rsmtest: the process was paused until the context ended: %w", ctx.Err())
	}
}

func (g *gate) Get(ctx context.Context, key string) ([]byte, string, error) {
	wait, _ := g.check(false)
	if err := held(ctx, wait); err != nil {
		return nil, "", err
	}
	defer g.enter()()
	return g.inner.Get(ctx, key)
}

func (g *gate) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	wait, _ := g.check(false)
	if err := held(ctx, wait); err != nil {
		return nil, "", err
	}
	defer g.enter()()
	return g.inner.GetLimited(ctx, key, max)
}

func (g *gate) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	wait, landFirst := g.check(true)
	if landFirst {
		leave := g.enter()
		v, err := g.inner.Put(ctx, key, data, cond)
		leave()
		if herr := held(ctx, wait); herr != nil {
			return "", herr
		}
		return v, err
	}
	if err := held(ctx, wait); err != nil {
		return "", err
	}
	defer g.enter()()
	return g.inner.Put(ctx, key, data, cond)
}

func (g *gate) Delete(ctx context.Context, key string, cond driver.Cond) error {
	wait, landFirst := g.check(true)
	if landFirst {
		leave := g.enter()
		err := g.inner.Delete(ctx, key, cond)
		leave()
		if herr := held(ctx, wait); herr != nil {
			return herr
		}
		return err
	}
	if err := held(ctx, wait); err != nil {
		return err
	}
	defer g.enter()()
	return g.inner.Delete(ctx, key, cond)
}

func (g *gate) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	wait, _ := g.check(false)
	if err := held(ctx, wait); err != nil {
		return nil, err
	}
	defer g.enter()()
	return g.inner.List(ctx, prefix, after, limit)
}

func (g *gate) ErrorKind(err error) driver.Kind { return g.inner.ErrorKind(err) }

func (g *gate) CheckKey(key string) error {
	if l, ok := g.inner.(driver.Limits); ok {
		return l.CheckKey(key)
	}
	return nil
}

// Close closes the inner store.
func (g *gate) Close() error { return g.inner.Close() }

// shared is a driver.Store whose Close does nothing: the store shared by
// every host, which each host's wrappers must not close.
type shared struct{ driver.Store }

func (shared) Close() error { return nil }

func (s shared) CheckKey(key string) error {
	if l, ok := s.Store.(driver.Limits); ok {
		return l.CheckKey(key)
	}
	return nil
}
