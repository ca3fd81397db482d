package rsm

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// showLanded makes n's store show each landed write of a key for which
// match holds before it is durable (store.WithVisible), then "sync": sync
// runs before the put returns.
func showLanded(n *testNode, match func(key string) bool, sync func()) {
	n.hooks.mu.Lock()
	defer n.hooks.mu.Unlock()
	n.hooks.onLanded = func(ctx context.Context, key string) {
		if !match(key) {
			return
		}
		if f := driver.VisibleFunc(ctx); f != nil {
			f()
		}
		sync()
	}
}

// TestConfirmationBesideTheSync: on a store that shows a log write before
// it is durable, the leader reads leader_state.json for the write while the
// write syncs (rule 5(b): the read is issued after the write is visible),
// and answers the command only once the write is durable.
func TestConfirmationBesideTheSync(t *testing.T) {
	a := newTestNode(t, memstore.New(), "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1) // seal 1, registration 2, command 3
	slot := logKey(testGroup, 4)
	lsKey := a.gs.key(leaderStateKey)
	syncing, confirmed, durable := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	showLanded(a, func(k string) bool { return k == slot }, func() {
		close(syncing)
		<-durable
	})
	a.hooks.set(nil, func(k string) {
		if k == lsKey {
			select {
			case confirmed <- struct{}{}:
			default:
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := a.command(t.Context())
		done <- err
	}()
	<-syncing
	select {
	case <-confirmed:
	case <-time.After(10 * time.Second):
		close(durable)
		t.Fatal("no read of leader_state.json while the write synced")
	}
	select {
	case err := <-done:
		t.Fatalf("the command was answered (err %v) before its write was durable", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(durable)
	if err := <-done; err != nil {
		t.Fatalf("command: %v", err)
	}
	if got := a.count(t); got != 2 {
		t.Fatalf("count %d after the command, want 2", got)
	}
}
