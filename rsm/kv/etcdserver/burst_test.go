package etcdserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBurstOfPuts: one etcd client puts 400 keys at once through a
// follower and through the leader, as an apiserver's many writes over one
// connection do. Every put is acknowledged within the request timeout,
// under its own revision, and each key reads back its value.
func TestBurstOfPuts(t *testing.T) {
	const burst = 400
	g := startGroup(t, nil)
	for _, tc := range []struct {
		name string
		node int
	}{{"follower", g.follower()}, {"leader", g.leader()}} {
		c := g.client(tc.node)
		var wg sync.WaitGroup
		var mu sync.Mutex
		revs := map[int64]string{}
		errs := make(chan error, burst)
		for i := range burst {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), fastOptions().RequestTimeout)
				defer cancel()
				k := fmt.Sprintf("%s/%03d", tc.name, i)
				r, err := c.Put(ctx, k, "v"+k)
				if err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if other, ok := revs[r.Header.Revision]; ok {
					t.Errorf("%s: puts of %s and %s acknowledged at the same revision %d", tc.name, k, other, r.Header.Revision)
				}
				revs[r.Header.Revision] = k
			})
		}
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if failed < 5 {
				t.Errorf("%s: %v", tc.name, err)
			}
			failed++
		}
		if failed > 0 {
			t.Fatalf("%s: %d of %d puts failed", tc.name, failed, burst)
		}
		ctx := ctxT(t, 30*time.Second)
		for i := range burst {
			k := fmt.Sprintf("%s/%03d", tc.name, i)
			r, err := c.Get(ctx, k)
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v"+k {
				t.Fatalf("get %s: %v, want value v%s", k, r.Kvs, k)
			}
			if r.Kvs[0].Version != 1 {
				t.Fatalf("get %s: version %d, want 1 (put once)", k, r.Kvs[0].Version)
			}
		}
	}
}
