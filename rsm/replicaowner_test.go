package rsm

import (
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store/memstore"
)

// A node's replica is used on its owner's goroutine only: the check every
// node of this package's tests runs fails a use from another goroutine.
func TestReplicaUsedByAnotherGoroutinePanics(t *testing.T) {
	n := newTestNode(t, memstore.New(), "a", testOptions())
	var r *replica
	n.onReplica(func(rep *replica) {
		rep.apply(&rsmpb.Entry{Index: 1, Term: 1, Noop: true})
		r = rep
	})
	if got := n.rep.index(); got != 1 {
		t.Fatalf("applied %d on the owner's goroutine, want 1", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("the replica was used by the test's goroutine without the check failing")
		}
		if got := n.rep.index(); got != 1 {
			t.Fatalf("applied %d after the refused use, want 1", got)
		}
	}()
	r.apply(&rsmpb.Entry{Index: 2, Term: 1, Noop: true})
}
