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

// candidate is one client's part in an election.
type candidate interface {
	// campaign waits until the candidate leads, and returns its fencing
	// token: the create revision of its key.
	campaign(ctx context.Context) (int64, error)
	// fence writes as the leader, on condition that its key is still the
	// one it leads with.
	fence(ctx context.Context) error
	// resign deletes the candidate's key.
	resign(ctx context.Context) error
	// key and lease are the candidate's key and its lease.
	key() string
	lease() clientv3.LeaseID
	// close ends the candidate in order: its lease is revoked.
	close()
}

// electionCandidate campaigns with concurrency.Election.
type electionCandidate struct {
	who string
	c   *clientv3.Client
	s   *concurrency.Session
	e   *concurrency.Election
}

func newElectionCandidate(t *testing.T, c *clientv3.Client, who string, ttl int) candidate {
	s := session(t, c, ttl)
	return &electionCandidate{who: who, c: c, s: s, e: concurrency.NewElection(s, "election")}
}

func (ec *electionCandidate) campaign(ctx context.Context) (int64, error) {
	for {
		err := ec.e.Campaign(ctx, ec.who)
		if err == nil {
			return ec.e.Rev(), nil
		}
		if !again(err) {
			return 0, err
		}
	}
}

func (ec *electionCandidate) fence(ctx context.Context) error {
	for {
		err := ec.e.Proclaim(ctx, ec.who+" leads")
		if err == nil || !again(err) {
			return err
		}
	}
}

func (ec *electionCandidate) resign(ctx context.Context) error {
	k, rev := ec.e.Key(), ec.e.Rev()
	err := ec.e.Resign(ctx)
	// Resign forgets the key even when its delete's outcome is unknown:
	// delete it again, as Resign does.
	for err != nil && again(err) {
		_, err = ec.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", rev)).Then(clientv3.OpDelete(k)).Commit()
	}
	return err
}

func (ec *electionCandidate) key() string             { return ec.e.Key() }
func (ec *electionCandidate) lease() clientv3.LeaseID { return ec.s.Lease() }
func (ec *electionCandidate) close()                  { _ = ec.s.Close() }

// seedCandidate campaigns as the etcd-leader library does, on clientv3:
// it puts its key under the prefix with its lease, reads the prefix in
// create revision order, leads if its key is first, and otherwise waits
// for the key just before its own to be deleted, then reads again.
type seedCandidate struct {
	who    string
	c      *clientv3.Client
	id     clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{}
	myKey  string
	myRev  int64
}

const seedPrefix = "seed/"

func newSeedCandidate(t *testing.T, c *clientv3.Client, who string, ttl int) candidate {
	t.Helper()
	gr, err := c.Grant(t.Context(), int64(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ka, err := c.KeepAlive(ctx, gr.ID)
	if err != nil {
		t.Fatal(err)
	}
	sc := &seedCandidate{who: who, c: c, id: gr.ID, cancel: cancel, done: make(chan struct{}), myKey: seedPrefix + who}
	go func() {
		defer close(sc.done)
		for range ka {
		}
	}()
	return sc
}

func (sc *seedCandidate) campaign(ctx context.Context) (int64, error) {
	if sc.myRev == 0 {
		for {
			_, err := sc.c.Put(ctx, sc.myKey, sc.who, clientv3.WithLease(sc.id))
			if err == nil {
				break
			}
			if !again(err) {
				return 0, err
			}
		}
	}
	for {
		r, err := sc.c.Get(ctx, seedPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			if again(err) {
				continue
			}
			return 0, err
		}
		i := 0
		for i < len(r.Kvs) && string(r.Kvs[i].Key) != sc.myKey {
			i++
		}
		if i == len(r.Kvs) {
			return 0, fmt.Errorf("%s: its key is gone while its lease is kept alive", sc.who)
		}
		sc.myRev = r.Kvs[i].CreateRevision
		if i == 0 {
			return sc.myRev, nil
		}
		if err := sc.waitDeleted(ctx, string(r.Kvs[i-1].Key), r.Header.Revision+1); err != nil {
			return 0, err
		}
	}
}

// waitDeleted waits for key's deletion at or after rev, or for the watch
// to end (the caller reads again).
func (sc *seedCandidate) waitDeleted(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range sc.c.Watch(wctx, key, clientv3.WithRev(rev)) {
		if wr.Err() != nil {
			return nil
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}

func (sc *seedCandidate) fence(ctx context.Context) error {
	for {
		r, err := sc.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(sc.myKey), "=", sc.myRev)).
			Then(clientv3.OpPut("seed-fence", sc.who)).
			Commit()
		switch {
		case err != nil && again(err):
			continue
		case err != nil:
			return err
		case !r.Succeeded:
			return fmt.Errorf("%s: its key is not the one it leads with", sc.who)
		}
		return nil
	}
}

func (sc *seedCandidate) resign(ctx context.Context) error {
	for {
		_, err := sc.c.Delete(ctx, sc.myKey)
		if err == nil {
			sc.myRev = 0
			return nil
		}
		if !again(err) {
			return err
		}
	}
}

func (sc *seedCandidate) key() string             { return sc.myKey }
func (sc *seedCandidate) lease() clientv3.LeaseID { return sc.id }
func (sc *seedCandidate) close() {
	sc.cancel()
	<-sc.done
	_, _ = sc.c.Revoke(context.Background(), sc.id)
}

// TestElection: candidates take turns leading with concurrency.Election
// (Campaign, Proclaim, Resign) while another observes; a candidate killed
// while it leads (its client closed, its lease left to expire) is
// replaced once the leader expires its lease, and again across a stop of
// the leader's node; no two lead at once, and the observer sees leaders
// in the order of their keys.
func TestElection(t *testing.T) {
	testElection(t, newElectionCandidate, true)
}

// TestSeedElection: TestElection with the etcd-leader library's
// algorithm written on clientv3: each candidate watches the key just
// before its own.
func TestSeedElection(t *testing.T) {
	testElection(t, newSeedCandidate, false)
}

func testElection(t *testing.T, newCandidate func(t *testing.T, c *clientv3.Client, who string, ttl int) candidate, observe bool) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 60*time.Second)
	runCtx, stop := context.WithCancel(ctx)
	// The first Campaign is the new group's first write: at revision 2,
	// as on an empty etcd, so it waits for keys created up to revision 1
	// (none) and leads at once.
	h := &holders{t: t}
	const survivors = 3
	after := make([]atomic.Int64, survivors) // terms since the leader stopped
	var stopped atomic.Bool
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for i := range survivors {
		who := fmt.Sprint("candidate ", i)
		cand := newCandidate(t, g.client(), who, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cand.close()
			for {
				token, err := cand.campaign(runCtx)
				if runCtx.Err() != nil {
					return
				}
				if err != nil {
					t.Errorf("%s: campaign: %v", who, err)
					return
				}
				h.enter(who, token)
				if err := cand.fence(ctx); err != nil {
					t.Errorf("%s: %v", who, err)
				}
				h.exit(who)
				if stopped.Load() {
					after[i].Add(1)
				}
				if err := cand.resign(ctx); err != nil {
					t.Errorf("%s: resign: %v", who, err)
					return
				}
			}
		}()
	}
	type seen struct {
		rev int64
		val string
	}
	var obsMu sync.Mutex
	var observed []seen
	if observe {
		e := concurrency.NewElection(session(t, g.client(), 3), "election")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				// Observe ends when its watch does: observe again.
				for r := range e.Observe(runCtx) {
					obsMu.Lock()
					observed = append(observed, seen{r.Kvs[0].CreateRevision, string(r.Kvs[0].Value)})
					obsMu.Unlock()
				}
			}
		}()
	}

	// kill has a candidate campaign until it leads, then closes its
	// client, as if its process were killed: its lease is left to expire.
	kill := func(who string) (clientv3.LeaseID, string) {
		t.Helper()
		c := g.client()
		cand := newCandidate(t, c, who, 2)
		leads := make(chan error, 1)
		go func() {
			token, err := cand.campaign(ctx)
			if err == nil {
				h.enter(who, token)
			}
			leads <- err
		}()
		select {
		case err := <-leads:
			if err != nil {
				t.Fatalf("%s: campaign: %v", who, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s does not lead within 20s", who)
		}
		h.exit(who)
		_ = c.Close()
		return cand.lease(), cand.key()
	}
	// replaced waits for another candidate to lead after a killed one,
	// which it can only do once the killed one's lease expired.
	replaced := func(who string, n int, killed time.Time) {
		t.Helper()
		waitFor(t, 20*time.Second, who+" replaced", func() bool { return h.count() > n })
		if d := time.Since(killed); d < time.Second {
			t.Errorf("%s, with a lease of 2s, replaced %v after it was killed", who, d)
		}
		t.Logf("%s replaced after %v", who, time.Since(killed).Round(time.Millisecond))
	}
	expired := func(id clientv3.LeaseID, key string) {
		t.Helper()
		c := g.client(g.leader())
		if r, err := c.Get(ctx, key); err != nil || len(r.Kvs) != 0 {
			t.Errorf("the key %s of an expired lease: %v %+v", key, err, r)
		}
		if r, err := c.TimeToLive(ctx, id); err != nil || r.TTL != -1 {
			t.Errorf("the expired lease of %s: %v %+v", key, err, r)
		}
	}

	waitFor(t, 20*time.Second, "10 terms", func() bool { return h.count() >= 10 })
	id, key := kill("killed 0")
	n, killed := h.count(), time.Now()
	replaced("killed 0", n, killed)
	expired(id, key)

	id, key = kill("killed 1")
	n, killed = h.count(), time.Now()
	l := g.stopLeader()
	stopped.Store(true)
	t.Logf("node %d, the leader, stopped after %d terms", l, n)
	replaced("killed 1", n, killed)
	waitFor(t, 30*time.Second, "every candidate's terms after the leader stopped", func() bool {
		for i := range after {
			if after[i].Load() < 2 {
				return false
			}
		}
		return true
	})
	expired(id, key)
	stop()
	wg.Wait()
	t.Logf("%d terms, %d after the leader stopped", h.count(), h.count()-n)

	if !observe {
		return
	}
	var saw bool
	for i, o := range observed {
		if i > 0 && o.rev < observed[i-1].rev {
			t.Errorf("observed %q at %d after %q at %d", o.val, o.rev, observed[i-1].val, observed[i-1].rev)
		}
		saw = saw || o.val == "killed 0"
	}
	if !saw || len(observed) < 10 {
		t.Errorf("observed %d leaders, killed 0 among them: %t", len(observed), saw)
	}
}

// TestCampaignFirstWrite: a Campaign that is a new group's first write
// leads at once, as on an empty etcd: its put is at revision 2, so it
// waits for the keys created up to revision 1, none.
func TestCampaignFirstWrite(t *testing.T) {
	g := startGroup(t, nil)
	ctx := ctxT(t, 20*time.Second)
	c := g.client()
	resp, err := c.Get(ctx, "election", clientv3.WithPrefix())
	if err != nil || resp.Header.Revision != 1 {
		t.Fatalf("new group: %v, %v; want revision 1", resp, err)
	}
	e := concurrency.NewElection(session(t, c, 3), "election")
	if err := e.Campaign(ctx, "first"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if rev := e.Rev(); rev != 2 {
		t.Errorf("the leader's key is at revision %d; want 2", rev)
	}
}
