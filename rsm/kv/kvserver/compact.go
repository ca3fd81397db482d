package kvserver

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// compactEvery is how often the leader compacts the kv machine's
// history, to the revision the machine had one period before, as etcd's
// periodic compaction does (Kubernetes asks for every 5 minutes). From
// the group's first etcd write on, the machine keeps every version until
// a compaction; the HTTP API reads only the current ones, so this bounds
// the memory history takes. Before it (the legacy era) the compact
// revision follows the current one, and none is proposed.
const compactEvery = 5 * time.Minute

// history is what compactHistory needs of a node and its kv machine.
type history struct {
	leads   func() bool
	rev     func() (current, compacted int64)
	command func(ctx context.Context, cmd []byte) ([]byte, error)
}

func nodeHistory(node *rsm.Node, m *kv.Machine) history {
	return history{
		leads: func() bool { return node.Status().Role == rsm.Leader.String() },
		rev: func() (int64, int64) {
			v := m.ReadView()
			return v.Revision(), v.CompactRevision()
		},
		command: func(ctx context.Context, cmd []byte) ([]byte, error) {
			return node.Command(ctx, kv.MachineName, cmd)
		},
	}
}

// compactHistory proposes, each period while the node leads, a
// compaction at the revision the machine had a period before. A
// compaction that fails (another leader's went first) is tried again at
// the next period. It returns when ctx is done.
func compactHistory(ctx context.Context, h history, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var before int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, compacted := h.rev(); before > compacted && h.leads() {
			if cmd, err := kv.CompactCommand(&pb.CompactionRequest{Revision: before}); err == nil {
				_, _ = h.command(ctx, cmd) // its result matters to nobody
			}
		}
		before, _ = h.rev()
	}
}
