package rsm_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/rsmtest"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

// A group's log replayed from the store holds every command the group
// acknowledged, in order; once a snapshot may have truncated the log,
// Replay says so instead of giving part of the history.
func TestReplayGivesTheGroupsHistory(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold int
	}{{"whole log", 1 << 20}, {"snapshotted", 5}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			st := store.New(memstore.New())
			opts := fastOptions()
			opts.SnapshotThreshold = tc.threshold
			opts.BatchMinCount = 1
			n, err := startHost(t, st, "a").Join(ctx, "g", map[string]rsm.StateMachine{"c": &counter{}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			waitLeader(t, n)
			const cmds = 30
			for i := range cmds {
				if _, err := n.Command(ctx, "c", fmt.Appendf(nil, "%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.threshold < cmds {
				deadline := time.Now().Add(20 * time.Second)
				for n.Status().SnapshotIndex == 0 {
					if time.Now().After(deadline) {
						t.Fatal("no snapshot within 20 s")
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			tape := &recorder{}
			_, err = rsm.Replay(ctx, st, "g", map[string]rsm.StateMachine{"c": tape})
			if tc.threshold < cmds {
				if !errors.Is(err, rsm.ErrHistoryTruncated) {
					t.Fatalf("Replay of a snapshotted group: %v, want ErrHistoryTruncated", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tape.cmds) != cmds {
				t.Fatalf("replayed %d commands, want %d", len(tape.cmds), cmds)
			}
			for i, c := range tape.cmds {
				if want := fmt.Sprint(i); c != want {
					t.Fatalf("command %d is %q, want %q", i, c, want)
				}
			}
		})
	}
}

// recorder is a counter that also keeps every command applied to it.
type recorder struct {
	rsmtest.Counter
	cmds []string
}

func (r *recorder) Apply(cmd []byte) []byte {
	r.cmds = append(r.cmds, string(cmd))
	return r.Counter.Apply(cmd)
}
