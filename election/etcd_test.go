package election_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/etcdstore"
)

// On etcd, followers watch the lock instead of polling it: while
// leadership is stable they make no store requests at all, and a crashed
// leader is replaced within the lease bound. Real etcd, real time, short
// timings; the assertions are about what happened, not how fast.
func TestEtcdFollowersWatchInsteadOfPolling(t *testing.T) {
	srv := testutil.Etcd(t)
	url := srv.URL(fmt.Sprintf("election-watch-%d", time.Now().UnixNano()))
	timings := election.Config{
		FrequentInterval:   200 * time.Millisecond,
		InfrequentInterval: time.Second,
		LeaderTimeout:      1500 * time.Millisecond,
		RenewDeadline:      time.Second,
		RetrySchedule:      []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond},
		PeerTimeout:        300 * time.Millisecond,
	}
	type member struct {
		e     *election.Elector
		st    *store.Store
		calls atomic.Int64
		stop  context.CancelFunc
		done  chan error
	}
	var members []*member
	var mu sync.Mutex
	for i := 0; i < 3; i++ {
		m := &member{done: make(chan error, 1)}
		st, err := store.Open(t.Context(), url, store.WithObserver(func(store.Call) { m.calls.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		m.st = st
		cfg := timings
		cfg.Store, cfg.ServerID, cfg.Logger = st, fmt.Sprintf("n%d", i), quietLogger(t)
		e, err := election.New(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.e = e
		ctx, cancel := context.WithCancel(context.Background())
		m.stop = cancel
		go func() { m.done <- e.Run(ctx) }()
		mu.Lock()
		members = append(members, m)
		mu.Unlock()
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.stop()
			<-m.done
			m.st.Close()
		}
	})
	leader := func() *member {
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			var ls []*member
			for _, m := range members {
				if m.e.IsLeader() {
					ls = append(ls, m)
				}
			}
			if len(ls) > 1 {
				t.Fatal("two leaders")
			}
			if len(ls) == 1 {
				return ls[0]
			}
		}
		t.Fatal("no leader")
		return nil
	}
	first := leader()
	time.Sleep(time.Second)
	for _, m := range members {
		m.calls.Store(0)
	}
	time.Sleep(3 * time.Second)
	for _, m := range members {
		if m == first {
			if n := m.calls.Load(); n < 10 {
				t.Fatalf("the leader made %d store requests in 3 s at a 200 ms renewal", n)
			}
			continue
		}
		if n := m.calls.Load(); n != 0 {
			t.Fatalf("a follower on etcd made %d store requests while leadership was stable", n)
		}
		if mode := m.e.Status().Mode; mode != "watch" {
			t.Fatalf("a follower on etcd is in mode %q", mode)
		}
	}
	// Crash: close the leader's store under it, so it can neither renew
	// nor release, then stop it.
	first.st.Close()
	crashed := time.Now()
	first.stop()
	<-first.done
	first.done <- nil
	next := leader()
	if next == first {
		t.Fatal("the crashed member leads")
	}
	t.Logf("failover on etcd with watching followers: %v (LeaderTimeout %v)", time.Since(crashed).Round(time.Millisecond), timings.LeaderTimeout)
}
