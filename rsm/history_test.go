package rsm

import (
	"slices"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// Replay gives a machine exactly the commands the group applied: a
// deposed leader's late entry and a retried command's second copy are
// skipped, and the log ends at its first hole.
func TestReplaySkipsWhatReplicasSkip(t *testing.T) {
	ctx := t.Context()
	st := store.New(memstore.New())
	gs := newGroupStore(st, testGroup, testOptions().withDefaults().Retry, 0, snapshot.Options{})
	entries := []*rsmpb.Entry{
		settingsSeal(1, 1, 10, "tape"),
		mkEntry(2, 1, regCmd("a"), sCmd(1, 1, "tape", "x1")),
		mkEntry(3, 2), // a new leader's seal
		mkEntry(4, 1, sCmd(1, 2, "tape", "late")),                         // the deposed leader's late write
		mkEntry(5, 2, sCmd(1, 1, "tape", "x1"), sCmd(1, 2, "tape", "x2")), // a retry, then the next
		mkEntry(6, 2, sCmd(1, 3, "tape", "x3"), sCmd(1, 5, "tape", "ahead")),
		mkEntry(8, 2, sCmd(1, 4, "tape", "after the hole")),
	}
	for _, e := range entries {
		e.Group = testGroup
		if found, err := gs.createEntry(ctx, e); err != nil || found != nil {
			t.Fatalf("writing entry %d: %v, %v", e.Index, found, err)
		}
	}
	m := &tape{}
	last, err := Replay(ctx, st, testGroup, map[string]StateMachine{"tape": m})
	if err != nil {
		t.Fatal(err)
	}
	if last != 6 {
		t.Fatalf("replayed up to index %d, want 6 (7 is a hole)", last)
	}
	if want := []string{"x1", "x2", "x3"}; !slices.Equal(m.strings(), want) {
		t.Fatalf("applied %q, want %q", m.strings(), want)
	}
}
