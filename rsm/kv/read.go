package kv

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/rsm"
)

// ReadView is the machine's state at one revision, for reads that do not
// go through the node: serializable ranges, watches catching up from
// history, lease lookups. It shares the machine's trees copy-on-write, so
// it never changes, and reading it holds up nothing. A ReadView is also
// the rsm.StateView Capture returns. It is safe for concurrent use.
//
// A view keeps alive whatever the machine has changed since it was
// taken; drop it (there is nothing to close) to let that memory go.
type ReadView struct {
	s state
}

var _ rsm.StateView = (*ReadView)(nil)

// ReadView returns a view of the current state. It takes the machine's
// lock for as long as one command's apply at most, and the view is
// shared by every caller until the next change; the first write after a
// new view copies the tree nodes it changes (about 4 of a few KiB each).
func (m *Machine) ReadView() *ReadView {
	m.mu.RLock()
	v := m.pub
	m.mu.RUnlock()
	if v != nil {
		return v
	}
	m.mu.Lock() // Clone changes the trees' ownership marks
	defer m.mu.Unlock()
	m.settle()
	if m.pub == nil {
		m.pub = &ReadView{s: m.state.clone()}
	}
	return m.pub
}

// Capture returns the state as it is now, in constant time: the view
// shares the machine's trees, which copy the nodes they change from then
// on (copy on write). See rsm.Capturer. Right after a cold start's
// prepared commands, with no command applied since, it first puts the
// deferred puts in the tree: at most two runs, bounded in bytes and in
// puts whatever the state's size.
func (m *Machine) Capture() rsm.StateView { return m.ReadView() }

// Revision is the view's revision.
func (v *ReadView) Revision() int64 { return int64(v.s.rev) }

// CompactRevision is the revision history was last compacted at: reads
// and events before it fail with ErrGRPCCompacted.
func (v *ReadView) CompactRevision() int64 { return int64(v.s.compact) }

// Len is the number of live keys.
func (v *ReadView) Len() int { return v.s.live }

// Range answers an etcd Range as of the view, as a serializable read:
// every option, and the errors etcd gives (ErrGRPCCompacted,
// ErrGRPCFutureRev, ErrGRPCEmptyKey, ErrGRPCInvalidSortOption). The
// response's header holds the view's revision. Its values share the
// view's memory: marshal them, never change them.
func (v *ReadView) Range(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRangeRequest(r); err != nil {
		return nil, err
	}
	return v.s.rangeAt(r, v.s.rev)
}

// Events is EventsUntil to the view's revision.
func (v *ReadView) Events(key, end []byte, from int64) ([]*mvccpb.Event, error) {
	return v.EventsUntil(key, end, from, 0)
}

// EventsUntil lists the changes to the keys of [key, end) (end empty for
// key alone, "\x00" for every key from key) with revisions from from to to,
// both included (to 0, or past the view's revision, for the view's), in
// revision order and within a revision in the order they were made: what
// a watch from revision from catches up with before it streams what the
// Observer tells from to on. Each event of a put has the key's previous
// version as PrevKv if it was live and history holds it; a delete's Kv
// holds the key and the revision. It fails with ErrGRPCCompacted if from
// is before the compact revision, as etcd's watch does. It walks the
// range's keys and their history since from.
func (v *ReadView) EventsUntil(key, end []byte, from, to int64) ([]*mvccpb.Event, error) {
	if from < int64(v.s.compact) {
		return nil, errCompacted
	}
	from = max(from, 1)
	if to <= 0 || to > int64(v.s.rev) {
		to = int64(v.s.rev)
	}
	if from > to {
		return nil, nil
	}
	return v.s.events(rangeOf(key, end), uint64(from), uint64(to)), nil
}

// Lease is a lease as granted: its ID and TTL in seconds. How long is
// left is the server's to track: the machine knows no time.
type Lease struct {
	ID  int64
	TTL int64
}

// Leases lists the leases, by ID.
func (v *ReadView) Leases() []Lease {
	var ls []Lease
	for _, it := range v.s.leaseList() {
		ls = append(ls, Lease{ID: it.id, TTL: it.ttl})
	}
	return ls
}

// LeaseTTL reports lease id's TTL and whether it exists, without listing
// its keys.
func (v *ReadView) LeaseTTL(id int64) (ttl int64, ok bool) { return v.s.leaseOf(id) }

// Lease reports lease id's TTL and keys (in key order), and whether it
// exists.
func (v *ReadView) Lease(id int64) (l Lease, keys []string, ok bool) {
	ttl, ok := v.s.leaseOf(id)
	if !ok {
		return Lease{}, nil, false
	}
	return Lease{ID: id, TTL: ttl}, v.s.leaseKeys(id), true
}
