package kvserver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/rsm/kv"
)

// TestCompactHistory: while the node leads, each period compacts the
// machine's history at the revision it had a period before; a follower
// proposes nothing, and the loop ends with its context.
func TestCompactHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := kv.New()
		m.Apply(kv.LeaseExpireCommand(1)) // an etcd write: history from now on, from revision 1
		leads := true
		var proposed int
		h := history{
			leads: func() bool { return leads },
			rev: func() (int64, int64) {
				v := m.ReadView()
				return v.Revision(), v.CompactRevision()
			},
			command: func(ctx context.Context, cmd []byte) ([]byte, error) {
				proposed++
				return m.Apply(cmd), nil
			},
		}
		put := func() { m.Apply([]byte{0x01, 1, 'k', 1, 'v'}) } // Client's put of "k"
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			compactHistory(ctx, h, time.Minute)
		}()
		for range 3 {
			put()
		}
		time.Sleep(time.Minute + time.Second) // first tick: nothing to compact yet
		synctest.Wait()
		if proposed != 0 {
			t.Fatalf("%d compactions at the first tick; want 0", proposed)
		}
		put()
		time.Sleep(time.Minute)
		synctest.Wait()
		if v := m.ReadView(); proposed != 1 || v.CompactRevision() != 4 {
			t.Fatalf("%d compactions, compacted at %d; want 1 at 4", proposed, v.CompactRevision())
		}
		leads = false
		put()
		time.Sleep(time.Minute)
		synctest.Wait()
		if proposed != 1 {
			t.Fatalf("a follower proposed %d compactions", proposed-1)
		}
		cancel()
		<-done
	})
}

// TestCompactHistoryLegacy: a group written only through Client's
// commands keeps no history (its compact revision follows its revision),
// and the leader proposes no compaction.
func TestCompactHistoryLegacy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := kv.New()
		var proposed int
		h := history{
			leads: func() bool { return true },
			rev: func() (int64, int64) {
				v := m.ReadView()
				return v.Revision(), v.CompactRevision()
			},
			command: func(ctx context.Context, cmd []byte) ([]byte, error) {
				proposed++
				return m.Apply(cmd), nil
			},
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			compactHistory(ctx, h, time.Minute)
		}()
		for range 3 {
			m.Apply([]byte{0x01, 1, 'k', 1, 'v'}) // Client's put of "k"
			time.Sleep(time.Minute)
			synctest.Wait()
		}
		if proposed != 0 {
			t.Fatalf("%d compactions proposed for a group without history", proposed)
		}
		cancel()
		<-done
	})
}
