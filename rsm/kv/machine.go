package kv

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/rsm"
)

// MachineName is the name the kv machine is registered under by tenure kv
// and by Client unless told otherwise.
const MachineName = "kv"

// KeyValue is one key with its value and revisions.
type KeyValue struct {
	Key   string
	Value []byte
	// CreateRevision is the revision of the mutation that created the key
	// (since it last did not exist).
	CreateRevision uint64
	// ModRevision is the revision of the last mutation of the key.
	ModRevision uint64
}

// Observer is told of each revision's changes as Apply makes them:
// revision is the new revision and events its changes in order, each
// with the key's previous version as PrevKv where history holds it. It is
// called from the goroutine that applies commands, after the change and
// before Apply returns, with no lock of the machine held (it may read the
// machine, through ReadView); it must not block. The events are the
// observer's.
type Observer func(revision int64, events []*mvccpb.Event)

// Machine is the MVCC key-value state machine, as etcd's: one revision
// counter; per key its history of versions (value, create and mod
// revision, version, lease; tombstones for deletes) until compaction;
// leases with their TTLs and keys. Its whole state lives in memory, in
// B-trees (github.com/google/btree) with copy-on-write clones.
//
// Machine implements rsm.Capturer: Capture takes a copy-on-write clone of
// the trees in constant time, and the view it returns writes the snapshot
// while the machine goes on applying commands. ReadView does the same
// for reads that do not go through the node.
//
// Machine is safe for concurrent use, though the node calls it from one
// goroutine at a time.
type Machine struct {
	mu sync.RWMutex
	state
	// observer, if set, is told of every revision Apply makes.
	observer Observer
	// leaseObserver, if set, is told of every lease Apply grants;
	// granted is the lease the command being applied granted, if any.
	leaseObserver LeaseObserver
	granted       *pb.LeaseGrantResponse
	// pub is the read view of the current state, once one is asked for;
	// nil after any change.
	pub *ReadView
	// deferred are puts ApplyPrepared applied and the tree does not hold
	// yet, in revision order, and deferredBytes their values' bytes; every
	// other method puts them in the tree first (settle).
	deferred      []deferredPut
	deferredBytes int
	// inserting, while a goroutine puts the run sent before in the tree,
	// is closed once it is there; spare is that run's slice, to reuse,
	// runLive the keys it made live, and treeLen about the tree's length
	// then.
	inserting chan struct{}
	spare     []deferredPut
	runLive   int
	treeLen   int
}

// deferredPut is a put without lease ApplyPrepared applied at revision
// rev.
type deferredPut struct {
	key   string
	value []byte
	rev   uint64
}

// A cold start's puts (ApplyPrepared) go to the tree in runs, each sorted
// by key and put there by a goroutine of its own while the next run fills:
// in key order, consecutive puts find their path through the tree in the
// cache, and an existing key's second search costs little. A run is sent
// once it holds deferPutsMax puts, deferBytesMax bytes of values, or a
// sixteenth of the keys in the tree (and at least deferPutsMin). Its
// values replace others only once it is in, so two runs' bytes bound the
// memory the deferral holds besides the state. Variables for tests.
var (
	deferPutsMin  = 1024
	deferPutsMax  = 65536
	deferBytesMax = 32 << 20
)

var (
	_ rsm.StateMachine = (*Machine)(nil)
	_ rsm.Capturer     = (*Machine)(nil)
	_ rsm.Preparer     = (*Machine)(nil)
)

// New returns an empty machine at revision 0, in the legacy era (see
// the package documentation, History and compaction).
func New() *Machine {
	m := &Machine{state: newState()}
	m.legacy = true
	return m
}

// Revision is the machine's current revision: the number of revisions
// its writes have made.
func (m *Machine) Revision() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev
}

// Len is the number of live keys.
func (m *Machine) Len() int {
	m.rlock()
	defer m.mu.RUnlock()
	return m.live
}

// SetObserver sets the observer Apply tells of each revision's events
// (nil for none). While one is set, a cold start's puts are applied one
// by one (ApplyPrepared does not defer them), so that each has its
// events. It is also called with no events (nil) when the revision
// moves without any: after Restore, with the restored revision, and when
// an empty group's first etcd write takes revision 1, etcd's first.
func (m *Machine) SetObserver(o Observer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle()
	m.observer = o
}

// LeaseObserver is told of each lease a command grants, with its ID and
// TTL in seconds, from the goroutine that applies commands, after the
// grant and without the machine's lock held. It must not wait for the
// node (its Status, Command or Read).
type LeaseObserver func(id, ttl int64)

// SetLeaseObserver sets the observer Apply tells of each lease it grants
// (nil for none): the etcd front end's leader times a lease from the
// grant's apply.
func (m *Machine) SetLeaseObserver(o LeaseObserver) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaseObserver = o
}

// rlock read-locks the machine with every deferred put in the tree.
func (m *Machine) rlock() {
	for {
		m.mu.RLock()
		if len(m.deferred) == 0 && m.inserting == nil {
			return
		}
		m.mu.RUnlock()
		m.mu.Lock()
		m.settle()
		m.mu.Unlock()
	}
}

// settle puts every deferred put in the tree: the run being filled, and
// the one a goroutine of its own may be putting there (sendRun). Under the
// write lock.
func (m *Machine) settle() {
	m.sendRun()
	m.waitRun()
}

// waitRun waits for the run sent to be in the tree. Under the write lock.
func (m *Machine) waitRun() {
	if m.inserting != nil {
		<-m.inserting
		m.inserting = nil
		m.live += m.runLive
		m.runLive = 0
	}
}

// sendRun hands the deferred puts over to a goroutine that puts them in the
// tree, once the run sent before is in it, and starts a new run. Until it
// is, only ApplyPrepared's puts run, which read neither the tree nor the
// leases. Under the write lock.
func (m *Machine) sendRun() {
	m.waitRun()
	run := m.deferred
	if len(run) == 0 {
		return
	}
	m.deferred, m.spare = m.spare[:0], nil
	m.deferredBytes = 0
	m.treeLen = m.tree.Len() + len(run) // about; for the next run's size
	done := make(chan struct{})
	m.inserting = done
	go func(tree *btree.BTreeG[entry], leases *btree.BTreeG[leaseItem], legacy bool) {
		live := insertRun(tree, leases, run, legacy)
		clear(run)
		m.spare = run[:0] // read by sendRun after done is closed
		m.runLive = live  // read by waitRun after done is closed
		close(done)
	}(m.tree, m.leases, m.legacy)
}

// insertRun puts a run of deferred puts in tree: sorted by key, then
// revision, each key's puts become versions of it in turn, as put makes
// them (no delete comes between deferred puts), or in the legacy era
// (legacy) replace the version the key had, at Version 1. It detaches
// the keys from the leases they had and returns how many keys it made
// live. A run's puts are all of one era: the era ends only in Apply,
// which puts the deferred puts in the tree first.
func insertRun(tree *btree.BTreeG[entry], leases *btree.BTreeG[leaseItem], d []deferredPut, legacy bool) (live int) {
	slices.SortFunc(d, func(a, b deferredPut) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.rev, b.rev)
	})
	for i := 0; i < len(d); {
		j := i + 1
		for j < len(d) && d[j].key == d[i].key {
			j++
		}
		key := d[i].key
		old, has := tree.Get(entry{key: key})
		cur := old.version
		if has {
			key = old.key // the key's string the entry had, as put keeps
			if !cur.tomb && cur.lease != 0 {
				leases.Delete(leaseItem{id: cur.lease, key: key})
			}
		}
		if !has || cur.tomb {
			live++
		}
		for _, p := range d[i:j] {
			nv := version{value: p.value, create: p.rev, mod: p.rev, ver: 1}
			switch {
			case has && legacy:
				if !cur.tomb {
					nv.create = cur.create
				}
			case has:
				if !cur.tomb {
					nv.create, nv.ver = cur.create, cur.ver+1
				}
				prev := cur
				nv.prev = &prev
			}
			cur, has = nv, true
		}
		tree.ReplaceOrInsert(entry{key: key, version: cur})
		i = j
	}
	return live
}

// BorrowsCommands makes the Machine an rsm.Borrower: Apply copies what it
// keeps of a command (a value; a key becomes a string) and returns new
// memory, so a cold start lends it commands where their log segment lies.
func (m *Machine) BorrowsCommands() {}

// Apply applies a command: one of Client's, or of etcd's API (see
// PutCommand and the others). It never fails: a command that does not
// decode or that the machine refuses leaves the state unchanged and
// returns an error result, which Client and DecodeResult turn back into
// an error.
func (m *Machine) Apply(cmd []byte) []byte {
	if len(cmd) > 0 && isEtcdCommand(cmd[0]) {
		m.mu.Lock()
		m.settle()
		m.pub = nil
		moved := false
		if cmd[0] != tagCompact && m.legacy {
			// The first etcd write ends the legacy era; an empty revision
			// becomes 1, an empty etcd's, so it makes revision 2 as there.
			m.legacy = false
			if m.rev == 0 {
				m.rev, moved = 1, true
			}
		}
		res, evs := m.applyEtcd(cmd)
		rev, o := m.rev, m.observer
		granted, lo := m.granted, m.leaseObserver
		m.granted = nil
		m.mu.Unlock()
		if granted != nil && lo != nil {
			lo(granted.ID, granted.TTL)
		}
		switch {
		case o == nil:
		case len(evs) > 0:
			o(int64(rev), evs)
		case moved:
			// Revision 1 holds no event: the observer is told of it all
			// the same, as of a restore.
			o(int64(rev), nil)
		}
		return res
	}
	c, err := decodeCommand(cmd)
	if err == nil {
		err = validKey(c.key)
	}
	if err != nil {
		return errorReply(err)
	}
	return m.apply(c, false)
}

// prepared is a command Prepare decoded and checked, its value copied.
// etcd marks an etcd put (without lease, prev_kv or ignore flags);
// apply, a command to apply as Apply does.
type prepared struct {
	c     command
	err   error
	etcd  bool
	apply bool
}

// Prepare makes the Machine an rsm.Preparer: it decodes and checks cmd and
// copies the value a put or a swap would store, which a cold start then
// does on the goroutines that decode the log instead of the one that
// applies it.
func (m *Machine) Prepare(cmd []byte) any {
	if len(cmd) > 0 && cmd[0] == tagEtcdPut {
		p, ok := parsePut(cmd[1:])
		if !ok || p.check() != nil || p.lease != 0 || p.prevKV || p.ignoreValue || p.ignoreLease {
			return &prepared{apply: true}
		}
		// The key and the value are slices of cmd: the machine keeps copies.
		return &prepared{c: command{op: tagPut, key: string(p.key), value: ownValue(p.value)}, etcd: true}
	}
	if len(cmd) > 0 && isEtcdCommand(cmd[0]) {
		return &prepared{apply: true}
	}
	c, err := decodeCommand(cmd)
	if err == nil {
		err = validKey(c.key)
	}
	if err != nil {
		return &prepared{err: err}
	}
	if c.op != tagDelete {
		c.value = ownValue(c.value)
	}
	return &prepared{c: c}
}

// ApplyPrepared applies cmd as Apply does, with what Prepare returned for
// it. A put's reply is its revision whatever the state, so a put without
// lease is only recorded, and goes into the tree later in a run of them
// sorted by key (sendRun): a cold start applies the puts of its segments
// in the random key order they were written in, each put two searches of
// a tree that no longer fits in the cache, some 3 µs at a million keys,
// the most of its time. Every other command and method puts them all in
// the tree first (settle), so none sees the state without them. With an
// observer set, every command is applied as Apply does.
func (m *Machine) ApplyPrepared(cmd []byte, p any) []byte {
	pc, ok := p.(*prepared)
	if !ok || pc.apply {
		return m.Apply(cmd)
	}
	if pc.err != nil {
		return errorReply(pc.err)
	}
	m.mu.Lock()
	if pc.c.op != tagPut || m.observer != nil || (pc.etcd && m.legacy) {
		m.mu.Unlock()
		if pc.etcd {
			return m.Apply(cmd)
		}
		return m.apply(pc.c, true)
	}
	defer m.mu.Unlock()
	m.pub = nil
	m.rev++
	if m.legacy {
		m.compact = m.rev
	}
	m.deferred = append(m.deferred, deferredPut{key: pc.c.key, value: pc.c.value, rev: m.rev})
	m.deferredBytes += len(pc.c.value)
	if n := len(m.deferred); n >= deferPutsMax || m.deferredBytes >= deferBytesMax || (n >= deferPutsMin && n >= m.treeLen/16) {
		m.sendRun()
	}
	if pc.etcd {
		return result(tagEtcdPutResult, &pb.PutResponse{Header: &pb.ResponseHeader{Revision: int64(m.rev)}})
	}
	return reply{tag: tagPutResult, rev: m.rev}.encode()
}

// apply applies c, one of Client's commands, decoded and checked; owned
// says its value is a copy the machine may keep. A put is an etcd put
// without lease.
func (m *Machine) apply(c command, owned bool) []byte {
	m.mu.Lock()
	m.settle()
	m.pub = nil
	w := newWriter(&m.state, m.observer != nil)
	w.legacy = m.legacy
	var res []byte
	switch c.op {
	case tagPut:
		if !owned {
			c.value = ownValue(c.value)
		}
		w.put(c.key, c.value, 0)
		res = reply{tag: tagPutResult, rev: w.rev}.encode()
	case tagDelete:
		if e, ok := m.tree.Get(entry{key: c.key}); ok && !e.tomb {
			w.del(e)
			res = reply{tag: tagDeleteResult, ok: true, rev: w.rev}.encode()
		} else {
			res = reply{tag: tagDeleteResult, ok: false, rev: m.rev}.encode()
		}
	default: // tagCAS
		var cur uint64
		if _, v := m.get(c.key); v != nil {
			cur = v.mod
		}
		if cur != c.expect {
			res = reply{tag: tagCASResult, ok: false, rev: cur}.encode()
			break
		}
		if !owned {
			c.value = ownValue(c.value)
		}
		w.put(c.key, c.value, 0)
		res = reply{tag: tagCASResult, ok: true, rev: w.rev}.encode()
	}
	w.done()
	rev, o := m.rev, m.observer
	m.mu.Unlock()
	if o != nil && len(w.evs) > 0 {
		o(int64(rev), w.evs)
	}
	return res
}

// ownValue is the copy of a command's value the machine keeps (never
// nil: an empty value is stored as one).
func ownValue(v []byte) []byte {
	if v = bytes.Clone(v); v == nil {
		v = []byte{}
	}
	return v
}

// Query answers a get or a list encoded by Client, an etcd Range
// (RangeQuery) or a read-only etcd Txn (TxnQuery). Like Apply, it
// reports a query it cannot answer in its result, never as an error, so
// the client gets a typed error back through any node.
func (m *Machine) Query(b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == tagRange {
		m.rlock()
		defer m.mu.RUnlock()
		return m.queryRange(b[1:]), nil
	}
	if len(b) > 0 && b[0] == tagTxn {
		m.rlock()
		defer m.mu.RUnlock()
		if m.legacy {
			return errorReply(ErrNeedsCommand), nil
		}
		return m.queryTxn(b[1:]), nil
	}
	q, err := decodeQuery(b)
	if err == nil {
		err = validQuery(q)
	}
	if err != nil {
		return errorReply(err), nil
	}
	m.rlock()
	defer m.mu.RUnlock()
	if q.op == tagGet {
		_, v := m.get(q.key)
		if v == nil {
			return reply{tag: tagGetResult}.encode(), nil
		}
		return reply{tag: tagGetResult, found: true, kv: KeyValue{Value: v.value, CreateRevision: v.create, ModRevision: v.mod}}.encode(), nil
	}
	return m.list(q).encode(), nil
}

func validQuery(q query) error {
	if q.op == tagGet {
		return validKey(q.key)
	}
	if len(q.key) > MaxKeySize || len(q.after) > MaxKeySize {
		return fmt.Errorf("%w: list prefix and start key are at most %d bytes", ErrInvalidArgument, MaxKeySize)
	}
	if q.limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d is above %d", ErrInvalidArgument, q.limit, MaxListLimit)
	}
	return nil
}

func (m *Machine) list(q query) reply {
	limit, budget := q.limit, q.maxBytes
	if limit == 0 {
		limit = DefaultListLimit
	}
	if budget == 0 {
		budget = DefaultListBytes
	}
	prefix := q.key
	// Start at the prefix, or just after the start key if that is later.
	from, skip := prefix, false
	if q.after >= prefix {
		from, skip = q.after, true
	}
	r := reply{tag: tagListResult}
	var size uint64
	m.tree.AscendGreaterOrEqual(entry{key: from}, func(e entry) bool {
		if e.tomb || (skip && e.key == q.after) {
			return true
		}
		if !strings.HasPrefix(e.key, prefix) {
			return false
		}
		it := KeyValue{Key: e.key, CreateRevision: e.create, ModRevision: e.mod}
		if !q.keysOnly {
			it.Value = e.value
		}
		n := uint64(len(it.Key)+len(it.Value)) + 4*binary.MaxVarintLen64
		if uint64(len(r.items)) == limit || (len(r.items) > 0 && size+n > budget) {
			r.more = true
			return false
		}
		size += n
		r.items = append(r.items, it)
		return true
	})
	return r
}
