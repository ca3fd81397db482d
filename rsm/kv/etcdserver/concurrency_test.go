package etcdserver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// holders records who holds a lock or leads, and fails the test when two
// hold at once or a holder's fencing token is not above the last one's.
// It is safe for concurrent use.
type holders struct {
	t      *testing.T
	mu     sync.Mutex
	holder string
	token  int64
	n      int
}

func (h *holders) enter(who string, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder != "" {
		h.t.Errorf("%s holds while %s holds", who, h.holder)
	}
	if token <= h.token {
		h.t.Errorf("%s holds with token %d, not above the last holder's %d", who, token, h.token)
	}
	h.holder, h.token = who, token
	h.n++
}

func (h *holders) exit(who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder != who {
		h.t.Errorf("%s leaves while %q holds", who, h.holder)
	}
	h.holder = ""
}

func (h *holders) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// again says whether a call failed in a way the etcd client leaves to its
// caller while the group changes leader: unavailable (a write in flight
// to a stopped node, or refused while nobody leads, or of unknown
// outcome), or applied with its result lost. The caller settles it by
// trying again in a way that is safe to repeat.
func again(err error) bool {
	var ee rpctypes.EtcdError
	switch {
	case status.Code(err) == codes.Unavailable:
		return true
	case errors.As(err, &ee) && ee.Code() == codes.Unavailable:
		return true
	case errors.As(err, &ee) && ee.Code() == codes.Unknown:
		return true
	}
	return false
}

// stopLeader stops the leader's node as TestLeaderStops does, and
// returns it.
func (g *group) stopLeader() int {
	g.t.Helper()
	l := g.leader()
	g.stop(l)
	if err := g.c.Crash(l); err != nil {
		g.t.Fatal(err)
	}
	return l
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func session(t *testing.T, c *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMutex: clients of every node take turns at a concurrency.Mutex
// across a stop of the leader's node; no two hold it at once, each
// holder's revision is above the last's, and a counter each holder
// increments under the lock (guarded by the lock's key) counts every turn.
func TestMutex(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 60*time.Second)
	const clients = 4
	if _, err := g.client().Put(ctx, "counter", "0"); err != nil {
		t.Fatal(err)
	}
	h := &holders{t: t}
	var stopping atomic.Bool
	after := make([]atomic.Int64, clients) // turns since the leader stopped
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for i := range clients {
		c := g.client()
		s := session(t, c, 3)
		who := fmt.Sprint("client ", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = s.Close() }()
			m := concurrency.NewMutex(s, "lock")
			for !stopping.Load() && ctx.Err() == nil {
				if err := m.Lock(ctx); err != nil {
					if !again(err) {
						t.Errorf("%s: lock: %v", who, err)
						return
					}
					continue
				}
				h.enter(who, m.Header().Revision)
				if err := increment(ctx, c, m); err != nil {
					t.Errorf("%s: %v", who, err)
				}
				h.exit(who)
				if stopped.Load() {
					after[i].Add(1)
				}
				for {
					err := m.Unlock(ctx)
					if err == nil {
						break
					}
					if !again(err) {
						t.Errorf("%s: unlock: %v", who, err)
						return
					}
				}
			}
		}()
	}
	t.Cleanup(func() { stopping.Store(true); wg.Wait() })
	waitFor(t, 20*time.Second, "20 turns", func() bool { return h.count() >= 20 })
	before := h.count()
	l := g.stopLeader()
	stopped.Store(true)
	t.Logf("node %d, the leader, stopped after %d turns", l, before)
	waitFor(t, 30*time.Second, "every client's turns after the leader stopped", func() bool {
		for i := range after {
			if after[i].Load() < 3 {
				return false
			}
		}
		return true
	})
	stopping.Store(true)
	wg.Wait()
	r, err := g.client().Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if n := h.count(); string(r.Kvs[0].Value) != strconv.Itoa(n) {
		t.Fatalf("counter %s after %d turns", r.Kvs[0].Value, n)
	}
	t.Logf("%d turns, %d after the leader stopped", h.count(), h.count()-before)
}

// increment adds one to counter as the holder of m: a read, then a write
// on condition that m's key is still the one that took the lock and the
// counter unchanged. A write of unknown outcome is written again on the
// same condition, or found applied.
func increment(ctx context.Context, c *clientv3.Client, m *concurrency.Mutex) error {
	var n int
	for {
		r, err := c.Get(ctx, "counter")
		if err == nil {
			n, err = strconv.Atoi(string(r.Kvs[0].Value))
			if err != nil {
				return err
			}
			break
		}
		if !again(err) {
			return fmt.Errorf("read the counter: %w", err)
		}
	}
	was, want := strconv.Itoa(n), strconv.Itoa(n+1)
	for {
		r, err := c.Txn(ctx).
			If(m.IsOwner(), clientv3.Compare(clientv3.Value("counter"), "=", was)).
			Then(clientv3.OpPut("counter", want)).
			Else(clientv3.OpGet("counter"), clientv3.OpGet(m.Key())).
			Commit()
		switch {
		case err != nil && again(err):
			continue
		case err != nil:
			return fmt.Errorf("increment the counter: %w", err)
		case r.Succeeded:
			return nil
		}
		if len(r.Responses[1].GetResponseRange().Kvs) == 0 {
			return fmt.Errorf("the lock's key %s is gone while it holds the lock", m.Key())
		}
		if got := string(r.Responses[0].GetResponseRange().Kvs[0].Value); got != want {
			return fmt.Errorf("the counter is %s under the lock; it was %s", got, was)
		}
		return nil // the write of unknown outcome was applied
	}
}

// TestSTM: clients move amounts between accounts with concurrency.NewSTM,
// serializable and serializable snapshot, across a stop of the leader's
// node. Each transfer writes its own marker in the same transaction and
// does nothing if the marker is there, so a transfer of unknown outcome
// is run again safely; at the end every account holds exactly what the
// transfers, each applied once, leave in it.
func TestSTM(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 60*time.Second)
	const clients, transfers, accounts, initial = 4, 30, 5, 100
	c := g.client()
	for a := range accounts {
		if _, err := c.Put(ctx, fmt.Sprint("account/", a), strconv.Itoa(initial)); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]int, accounts)
	for a := range want {
		want[a] = initial
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range clients {
		c := g.client()
		iso := concurrency.SerializableSnapshot
		if i%2 == 1 {
			iso = concurrency.Serializable
		}
		rnd := rand.New(rand.NewPCG(uint64(i), 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range transfers {
				from, to, amount := rnd.IntN(accounts), rnd.IntN(accounts-1), 1+rnd.IntN(10)
				if to >= from {
					to++
				}
				mu.Lock()
				want[from] -= amount
				want[to] += amount
				mu.Unlock()
				marker := fmt.Sprintf("transfer/%d/%d", i, j)
				fk, tk := fmt.Sprint("account/", from), fmt.Sprint("account/", to)
				apply := func(s concurrency.STM) error {
					if s.Get(marker) != "" {
						return nil
					}
					fb, err := strconv.Atoi(s.Get(fk))
					if err != nil {
						return err
					}
					tb, err := strconv.Atoi(s.Get(tk))
					if err != nil {
						return err
					}
					s.Put(fk, strconv.Itoa(fb-amount))
					s.Put(tk, strconv.Itoa(tb+amount))
					s.Put(marker, "1")
					return nil
				}
				for {
					_, err := concurrency.NewSTM(c, apply, concurrency.WithIsolation(iso), concurrency.WithAbortContext(ctx))
					if err == nil {
						break
					}
					if !again(err) {
						t.Errorf("transfer %s: %v", marker, err)
						return
					}
				}
				done.Add(1)
			}
		}()
	}
	t.Cleanup(wg.Wait)
	waitFor(t, 20*time.Second, "a third of the transfers", func() bool { return done.Load() >= clients*transfers/3 })
	l := g.stopLeader()
	t.Logf("node %d, the leader, stopped after %d transfers", l, done.Load())
	wg.Wait()
	if t.Failed() {
		return
	}
	r, err := c.Get(ctx, "account/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for a, kv := range r.Kvs {
		b, err := strconv.Atoi(string(kv.Value))
		if err != nil {
			t.Fatal(err)
		}
		sum += b
		if b != want[a] {
			t.Errorf("account %d holds %d, want %d", a, b, want[a])
		}
	}
	if sum != accounts*initial {
		t.Errorf("the accounts hold %d in all, want %d", sum, accounts*initial)
	}
	m, err := c.Get(ctx, "transfer/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || m.Count != clients*transfers {
		t.Fatalf("%v; %d transfers marked, want %d", err, m.Count, clients*transfers)
	}
}
