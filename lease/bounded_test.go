package lease_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// boundedOnly counts unbounded reads: a coordinator must read every record
// with a limit, so that a huge object at a record's key is never loaded.
type boundedOnly struct {
	driver.Store
	unbounded, bounded, refused atomic.Int64
	largest                     atomic.Int64 // the largest limit asked for
}

func (b *boundedOnly) Get(ctx context.Context, key string) ([]byte, string, error) {
	b.unbounded.Add(1)
	return b.Store.Get(ctx, key)
}

func (b *boundedOnly) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	b.bounded.Add(1)
	for l := b.largest.Load(); max > l && !b.largest.CompareAndSwap(l, max); l = b.largest.Load() {
	}
	data, v, err := b.Store.GetLimited(ctx, key, max)
	if driver.Classify(b.Store, err) == driver.TooLarge {
		b.refused.Add(1)
	}
	return data, v, err
}

// TestRecordsAreReadWithALimit puts an object larger than any record
// where a record of another member (member leases) or a shard's lock
// (shard leases) would be: it is refused by the read, and every other
// read is bounded too.
func TestRecordsAreReadWithALimit(t *testing.T) {
	forModes(t, func(t *testing.T, mode lease.Mode) {
		b := &boundedOnly{Store: memstore.New()}
		st := store.New(b)
		huge := make([]byte, 16<<20+1)
		key := lease.DefaultPrefix + "members/ghost/GHOSTGHOSTGHOST1"
		want := shardIDs(4)
		if mode == lease.ShardLeases {
			key = lease.DefaultPrefix + "lock/s000"
			want = want[1:] // s000's lock cannot be read: what becomes of it is the election's rule
		}
		if _, err := st.Put(context.Background(), key, huge, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		c, err := lease.New(lease.Config{Store: st, Mode: mode, ShardIDs: shardIDs(4), OwnerID: "a", Logger: quiet(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute)
		held := c.Held()
		for _, id := range want {
			if !slices.Contains(held, id) {
				t.Errorf("leads %v; want at least %v", held, want)
				break
			}
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := b.unbounded.Load(); n != 0 {
			t.Errorf("%d reads without a limit", n)
		}
		if b.refused.Load() == 0 || b.bounded.Load() == 0 {
			t.Errorf("the huge object was not refused by a bounded read (%d bounded reads, %d refused)", b.bounded.Load(), b.refused.Load())
		}
		if l := b.largest.Load(); l > 16<<20 {
			t.Errorf("a read asked for up to %d bytes", l)
		}
	})
}
