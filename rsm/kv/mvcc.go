package kv

import (
	"bytes"
	"cmp"
	"math"
	"sort"

	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// version is one revision of a key: a put, or a tombstone for a delete.
// Versions are immutable once stored (captured views and read views
// share them), so compaction copies the ones it keeps.
type version struct {
	value []byte
	// create is the revision that created the key's generation; 0 for a
	// tombstone.
	create uint64
	// mod is the main revision of the change and sub its place among the
	// changes of that revision (a Txn makes several).
	mod uint64
	sub uint32
	// tomb marks a delete.
	tomb bool
	// ver counts the puts of the generation, from 1; lease is the lease
	// the key is attached to, 0 for none.
	ver   int64
	lease int64
	// prev is the key's version before this one, until compaction drops
	// it.
	prev *version
}

// entry is one key in the tree: its latest version, the older ones
// chained behind it. A key whose latest version is a tombstone stays in
// the tree until compaction passes it. Entries are values, replaced whole
// and never changed in place.
type entry struct {
	key string
	version
}

func lessKey(a, b entry) bool { return a.key < b.key }

// treeDegree: nodes hold up to 2×treeDegree-1 entries. 32 keeps a 1M-key
// tree four levels deep while a copy-on-write copy of a node stays a few
// KiB.
const treeDegree = 32

func newTree() *btree.BTreeG[entry] { return btree.NewG(treeDegree, lessKey) }

// leaseItem is a lease (key "", with its granted TTL) or the attachment
// of a key to a lease. Ordered by lease, then key, so a lease's keys
// follow its header.
type leaseItem struct {
	id  int64
	key string
	ttl int64
}

func lessLease(a, b leaseItem) bool {
	if a.id != b.id {
		return a.id < b.id
	}
	return a.key < b.key
}

func newLeases() *btree.BTreeG[leaseItem] { return btree.NewG(treeDegree, lessLease) }

// state is what a snapshot holds: the keys with their history, the
// leases, the current and the compact revision, the legacy era flag, and
// the number of live keys. The machine owns one; a read view holds clones.
type state struct {
	rev, compact uint64
	// legacy marks the legacy era: no etcd write has been applied yet, so
	// the group may still be loaded from a format 1 snapshot, which holds
	// no history, versions nor leases. Client's commands then keep none
	// (put keeps Version 1 and no older version, delete removes the key,
	// the compact revision follows the current one), so that every
	// replica has the same state at the same index whether it restored
	// a format 1 snapshot or applied the log from further back. The first
	// etcd write (any command of etcd's API but a compaction) ends it.
	legacy bool
	tree   *btree.BTreeG[entry]
	leases *btree.BTreeG[leaseItem]
	live   int
}

func newState() state { return state{tree: newTree(), leases: newLeases()} }

// clone returns a copy of s sharing its trees copy-on-write. It changes
// the trees' ownership marks: only under the machine's write lock.
func (s *state) clone() state {
	c := *s
	c.tree, c.leases = s.tree.Clone(), s.leases.Clone()
	return c
}

// at is the version of the key at revision rev, nil if the key did not
// exist then.
func (e *entry) at(rev uint64) *version {
	v := &e.version
	for v != nil && v.mod > rev {
		v = v.prev
	}
	if v == nil || v.tomb {
		return nil
	}
	return v
}

// get is key's live version now, nil if none.
func (s *state) get(key string) (string, *version) {
	e, ok := s.tree.Get(entry{key: key})
	if !ok || e.tomb {
		return "", nil
	}
	return e.key, &e.version
}

func kvOf(key string, v *version) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: v.value, CreateRevision: int64(v.create), ModRevision: int64(v.mod), Version: v.ver, Lease: v.lease}
}

// keyRange is a range of keys as etcd requests name one: end empty for
// the key alone, "\x00" for every key from key on, else [key, end).
type keyRange struct {
	key, end string
	single   bool
}

func rangeOf(key, end []byte) keyRange {
	switch {
	case len(end) == 0:
		return keyRange{key: string(key), single: true}
	case len(end) == 1 && end[0] == 0:
		return keyRange{key: string(key)}
	}
	return keyRange{key: string(key), end: string(end)}
}

// ascend calls f for each entry of the range in key order until f
// returns false.
func (s *state) ascend(r keyRange, f func(e *entry) bool) {
	if r.single {
		if e, ok := s.tree.Get(entry{key: r.key}); ok {
			f(&e)
		}
		return
	}
	if r.end != "" && r.end <= r.key {
		return
	}
	s.tree.AscendGreaterOrEqual(entry{key: r.key}, func(e entry) bool {
		if r.end != "" && e.key >= r.end {
			return false
		}
		return f(&e)
	})
}

// checkRev resolves a request's revision against the current one cur:
// 0 or less is cur.
func (s *state) checkRev(rev int64, cur uint64) (uint64, error) {
	switch {
	case rev > int64(cur):
		return 0, errFutureRev
	case rev <= 0:
		return cur, nil
	case uint64(rev) < s.compact:
		return 0, errCompacted
	}
	return uint64(rev), nil
}

// rangeAt answers r as of cur (the current revision, or the one a Txn's
// writes so far make), as etcd does: limit, more and count, revision,
// count_only, keys_only (etcd 3.7's: no value, and no lease unless
// sorting by value), sort order and target, min and max create and mod revision filters. The header's
// revision is cur, or 1 for 0: a group never written to reads as an
// empty etcd, empty at revision 1.
func (s *state) rangeAt(r *pb.RangeRequest, cur uint64) (*pb.RangeResponse, error) {
	cur = max(cur, 1)
	rev, err := s.checkRev(r.Revision, cur)
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: int64(cur)}}
	kr := rangeOf(r.Key, r.RangeEnd)
	if r.CountOnly {
		s.ascend(kr, func(e *entry) bool {
			if e.at(rev) != nil {
				resp.Count++
			}
			return true
		})
		return resp, nil
	}
	limit := r.Limit
	if !defaultOrdering(r.SortTarget, r.SortOrder) || hasRevisionFilters(r) {
		limit = 0
	}
	if limit > 0 && limit < 1<<62 {
		limit++
	}
	var kvs []*mvccpb.KeyValue
	s.ascend(kr, func(e *entry) bool {
		v := e.at(rev)
		if v == nil {
			return true
		}
		resp.Count++
		if limit <= 0 || int64(len(kvs)) < limit {
			kvs = append(kvs, kvOf(e.key, v))
		}
		return true
	})
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		keysOnlyKVs(kvs, r.SortTarget)
	}
	resp.Kvs = kvs
	return resp, nil
}

func defaultOrdering(t pb.RangeRequest_SortTarget, o pb.RangeRequest_SortOrder) bool {
	return o == pb.RangeRequest_NONE || (t == pb.RangeRequest_KEY && o == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	if !hasRevisionFilters(r) {
		return kvs
	}
	out := kvs[:0]
	for _, kv := range kvs {
		switch {
		case r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision,
			r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision,
			r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision,
			r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// sortKVs sorts as etcd does (sort.Sort, not stable: ties keep etcd's
// order only as far as its algorithm does, and this is the same one).
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if defaultOrdering(r.SortTarget, order) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	default: // VALUE; the request was checked
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	}
	s := &kvSorter{kvs: kvs, less: less}
	if order == pb.RangeRequest_DESCEND {
		sort.Sort(sort.Reverse(s))
	} else {
		sort.Sort(s)
	}
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s *kvSorter) Len() int           { return len(s.kvs) }
func (s *kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s *kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }

// events lists the changes to keys of the range with revisions from
// from to to, both included, in revision order, each with the key's
// version before it as PrevKv where history still holds it.
func (s *state) events(kr keyRange, from, to uint64) []*mvccpb.Event {
	type ev struct {
		mod uint64
		sub uint32
		e   *mvccpb.Event
	}
	var out []ev
	s.ascend(kr, func(e *entry) bool {
		for v := &e.version; v != nil && v.mod >= from; v = v.prev {
			if v.mod > to {
				continue
			}
			out = append(out, ev{v.mod, v.sub, eventOf(e.key, v)})
		}
		return true
	})
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool {
		if c := cmp.Compare(out[i].mod, out[j].mod); c != 0 {
			return c < 0
		}
		return out[i].sub < out[j].sub
	})
	evs := make([]*mvccpb.Event, len(out))
	for i, o := range out {
		evs[i] = o.e
	}
	return evs
}

// eventOf is the watch event of version v of key: a put with the key's
// value then, or a delete naming the key and revision; PrevKv is the
// key's version at the revision before v's if it was live and history
// holds it, except for a put that creates the key.
func eventOf(key string, v *version) *mvccpb.Event {
	ev := &mvccpb.Event{Type: mvccpb.PUT}
	if v.tomb {
		ev.Type = mvccpb.DELETE
		ev.Kv = &mvccpb.KeyValue{Key: []byte(key), ModRevision: int64(v.mod)}
	} else {
		ev.Kv = kvOf(key, v)
	}
	// etcd reads the previous value at the revision before the event's,
	// and never for a put that creates the key: a key a Txn put and
	// deleted in one revision deletes with the value it had before that
	// revision, if any; one it deleted and put again is created anew.
	if !v.tomb && v.ver == 1 {
		return ev
	}
	p := v.prev
	for p != nil && p.mod == v.mod {
		p = p.prev
	}
	if p != nil && !p.tomb {
		ev.PrevKv = kvOf(key, p)
	}
	return ev
}

// compactChain is e's chain after a compaction at rev, as etcd 3.7
// compacts a key's index: if a delete made at rev ends one of the key's
// generations, the oldest such delete and every version after it;
// otherwise the versions after rev, and the latest at or before it
// unless that is a delete. The delete at rev stays so that a watch from
// rev, which the compaction still allows, sees it; Range at rev and
// after reads the key as absent all the same, and the next compaction
// past rev drops it. keep false means nothing is left; changed false
// that the chain is as it was.
func compactChain(e *entry, rev uint64) (out version, keep, changed bool) {
	var kept []*version // newest first
	v := &e.version
	for v != nil && v.mod > rev {
		kept = append(kept, v)
		v = v.prev
	}
	// The versions at rev, newest first: a Txn may change a key more than
	// once in one revision.
	n := len(kept)
	oldestTomb := -1
	for p := v; p != nil && p.mod == rev; p = p.prev {
		kept = append(kept, p)
		if p.tomb {
			oldestTomb = len(kept) - 1
		}
	}
	switch {
	case oldestTomb >= 0:
		kept = kept[:oldestTomb+1]
	case v != nil && !v.tomb:
		kept = append(kept[:n], v) // the latest at or before rev, a put
	default:
		kept = kept[:n]
	}
	if len(kept) == 0 {
		return version{}, false, true
	}
	if kept[len(kept)-1].prev == nil {
		return e.version, true, false
	}
	var tail *version
	for i := len(kept) - 1; i >= 0; i-- {
		c := *kept[i]
		c.prev = tail
		tail = &c
	}
	return *tail, true, true
}

// leaseOf reports whether lease id exists, and its TTL.
func (s *state) leaseOf(id int64) (ttl int64, ok bool) {
	it, ok := s.leases.Get(leaseItem{id: id})
	return it.ttl, ok
}

// leaseList lists the leases, by ID, with their TTLs: one search a
// lease, whatever keys they hold.
func (s *state) leaseList() []leaseItem {
	var ls []leaseItem
	next, more := int64(math.MinInt64), true
	for more {
		more = false
		s.leases.AscendGreaterOrEqual(leaseItem{id: next}, func(it leaseItem) bool {
			ls = append(ls, it) // a lease's first item is its own (key "")
			next, more = it.id+1, it.id != math.MaxInt64
			return false
		})
	}
	return ls
}

// leaseKeys lists the keys attached to lease id, in key order.
func (s *state) leaseKeys(id int64) []string {
	var keys []string
	s.leases.AscendGreaterOrEqual(leaseItem{id: id, key: "\x00"}, func(it leaseItem) bool {
		if it.id != id {
			return false
		}
		keys = append(keys, it.key)
		return true
	})
	return keys
}
