package rsm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// putBytes counts the bytes of the writes that succeeded.
type putBytes struct {
	driver.Store
	n atomic.Int64
}

func (c *putBytes) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	v, err := c.Store.Put(ctx, key, data, cond)
	if err == nil {
		c.n.Add(int64(len(data)))
	}
	return v, err
}

// storeBytesPerPut fills a key-value group to keys keys, then returns the
// store bytes written per put over puts puts of writers writers on random
// existing keys.
func storeBytesPerPut(t *testing.T, keys, puts, writers int) float64 {
	t.Helper()
	pb := &putBytes{Store: memstore.New()}
	h := startHost(t, store.New(pb), "a")
	n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{kv.MachineName: kv.New()}, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	c := kv.NewClient(n)
	value := make([]byte, 32)
	run := func(total int, key func(w, i int) int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < total; i += writers {
					if _, err := c.Put(ctxT(t, 30*time.Second), fmt.Sprintf("k%07d", key(w, i)), value); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(keys, func(_, i int) int { return i })
	if t.Failed() {
		t.FailNow()
	}
	before := pb.n.Load()
	rngs := make([]*rand.Rand, writers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), uint64(keys)))
	}
	run(puts, func(w, _ int) int { return rngs[w].IntN(keys) })
	return float64(pb.n.Load()-before) / float64(puts)
}

// TestStoreBytesPerPutFlatInStateSize: the store bytes a put costs do not
// grow with the state (incremental snapshots): ten times the keys cost
// less than twice the bytes per put, measured over enough puts to include
// the rewrites of the base that the segments trigger. With a whole
// snapshot every SnapshotThreshold entries they grew with the state.
func TestStoreBytesPerPutFlatInStateSize(t *testing.T) {
	const small, large, puts, writers = 300, 3000, 3000, 4
	a := storeBytesPerPut(t, small, puts, writers)
	b := storeBytesPerPut(t, large, puts, writers)
	t.Logf("store bytes per put: %.0f at %d keys, %.0f at %d keys", a, small, b, large)
	if b > 2*a {
		t.Fatalf("store bytes per put grow with the state: %.0f at %d keys, %.0f at %d keys", a, small, b, large)
	}
}
