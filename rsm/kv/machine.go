package kv

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"

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

// entry is one key in the tree. Entries are values, replaced whole and
// never changed in place, and a value's bytes are never written after it
// is stored: a captured view shares them with the machine.
type entry struct {
	key         string
	value       []byte
	create, mod uint64
}

func lessKey(a, b entry) bool { return a.key < b.key }

// treeDegree: nodes hold up to 2×treeDegree-1 entries. 32 keeps a 1M-key
// tree four levels deep while a copy-on-write copy of a node stays a few
// KiB.
const treeDegree = 32

func newTree() *btree.BTreeG[entry] { return btree.NewG(treeDegree, lessKey) }

// Machine is the key-value state machine. Its whole state lives in memory:
// a B-tree of keys with their values and revisions, and one revision
// counter that every successful put, delete and swap increments (as in
// etcd). A failed swap and a delete of an absent key leave the counter as
// it was.
//
// Machine implements rsm.Capturer: Capture takes a copy-on-write clone of
// the tree in constant time, and the view it returns writes the snapshot
// while the machine goes on applying commands.
//
// Machine is safe for concurrent use, though the node calls it from one
// goroutine at a time.
type Machine struct {
	mu   sync.RWMutex
	rev  uint64
	tree *btree.BTreeG[entry]
	// deferred are puts ApplyPrepared applied and the tree does not hold
	// yet, in revision order, and deferredBytes their values' bytes; every
	// other method puts them in the tree first (settle).
	deferred      []deferredPut
	deferredBytes int
	// inserting, while a goroutine puts the run sent before in the tree,
	// is closed once it is there; spare is that run's slice, to reuse, and
	// treeLen about the tree's length then.
	inserting chan struct{}
	spare     []deferredPut
	treeLen   int
}

// deferredPut is a put ApplyPrepared applied at revision rev.
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

// New returns an empty machine at revision 0.
func New() *Machine { return &Machine{tree: newTree()} }

// Revision is the machine's current revision: the number of successful
// mutations it has applied.
func (m *Machine) Revision() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev
}

// Len is the number of keys.
func (m *Machine) Len() int {
	m.rlock()
	defer m.mu.RUnlock()
	return m.tree.Len()
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
	}
}

// sendRun hands the deferred puts over to a goroutine that puts them in the
// tree, once the run sent before is in it, and starts a new run. Until it
// is, only ApplyPrepared's puts run, which do not read the tree. Under the
// write lock.
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
	go func(tree *btree.BTreeG[entry]) {
		insertRun(tree, run)
		clear(run)
		m.spare = run[:0] // read by sendRun after done is closed
		close(done)
	}(m.tree)
}

// insertRun puts a run of deferred puts in tree: sorted by key, then
// revision, each key's last put replaces its entry with the create
// revision the entry had, or the key's first deferred put's if it had none
// (no delete comes between deferred puts).
func insertRun(tree *btree.BTreeG[entry], d []deferredPut) {
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
		last := d[j-1]
		e := entry{key: last.key, value: last.value, create: d[i].rev, mod: last.rev}
		if old, ok := tree.ReplaceOrInsert(e); ok {
			// The key's string the entry had, as put does.
			e.create, e.key = old.create, old.key
			tree.ReplaceOrInsert(e)
		}
		i = j
	}
}

// BorrowsCommands makes the Machine an rsm.Borrower: Apply copies what it
// keeps of a command (a value; a key becomes a string) and returns new
// memory, so a cold start lends it commands where their log segment lies.
func (m *Machine) BorrowsCommands() {}

// Apply applies a command encoded by Client. It never fails: a command
// that does not decode or names an invalid key leaves the state unchanged
// and returns an error result, which Client turns back into ErrMalformed
// or ErrInvalidKey.
func (m *Machine) Apply(cmd []byte) []byte {
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
type prepared struct {
	c   command
	err error
}

// Prepare makes the Machine an rsm.Preparer: it decodes and checks cmd and
// copies the value a put or a swap would store, which a cold start then
// does on the goroutines that decode the log instead of the one that
// applies it.
func (m *Machine) Prepare(cmd []byte) any {
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
// it. A put's reply is its revision whatever the state, so a put is only
// recorded, and goes into the tree later in a run of them sorted by key
// (sendRun): a cold start applies the puts of its segments in the random
// key order they were written in, each put two searches of a tree that no
// longer fits in the cache, some 3 µs at a million keys, the most of its
// time. A delete, a swap and every other method put them all in the tree
// first (settle), so none sees the state without them.
func (m *Machine) ApplyPrepared(cmd []byte, p any) []byte {
	pc, ok := p.(*prepared)
	if !ok {
		return m.Apply(cmd)
	}
	if pc.err != nil {
		return errorReply(pc.err)
	}
	if pc.c.op != tagPut {
		return m.apply(pc.c, true)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	m.deferred = append(m.deferred, deferredPut{key: pc.c.key, value: pc.c.value, rev: m.rev})
	m.deferredBytes += len(pc.c.value)
	if n := len(m.deferred); n >= deferPutsMax || m.deferredBytes >= deferBytesMax || (n >= deferPutsMin && n >= m.treeLen/16) {
		m.sendRun()
	}
	return reply{tag: tagPutResult, rev: m.rev}.encode()
}

// apply applies c, decoded and checked; owned says its value is a copy
// the machine may keep.
func (m *Machine) apply(c command, owned bool) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle()
	switch c.op {
	case tagPut:
		return reply{tag: tagPutResult, rev: m.put(c.key, c.value, owned)}.encode()
	case tagDelete:
		if _, ok := m.tree.Delete(entry{key: c.key}); !ok {
			return reply{tag: tagDeleteResult, ok: false, rev: m.rev}.encode()
		}
		m.rev++
		return reply{tag: tagDeleteResult, ok: true, rev: m.rev}.encode()
	default: // tagCAS
		var cur uint64
		if e, ok := m.tree.Get(entry{key: c.key}); ok {
			cur = e.mod
		}
		if cur != c.expect {
			return reply{tag: tagCASResult, ok: false, rev: cur}.encode()
		}
		return reply{tag: tagCASResult, ok: true, rev: m.put(c.key, c.value, owned)}.encode()
	}
}

// ownValue is the copy of a command's value the machine keeps (never
// nil: an empty value is stored as one).
func ownValue(v []byte) []byte {
	if v = bytes.Clone(v); v == nil {
		v = []byte{}
	}
	return v
}

// put sets key to value at the next revision and returns it; owned says
// value is a copy the machine may keep, else put copies it.
func (m *Machine) put(key string, value []byte, owned bool) uint64 {
	if !owned {
		value = ownValue(value)
	}
	m.rev++
	// One search for a new key, a second for one that existed (its
	// create revision stays). The entry keeps the key's string it had:
	// a restore allocates the keys in their order, and a tree whose
	// neighbouring keys lie together in memory is searched with fewer
	// cache misses (insertRun does the same, and with it a cold start
	// after sustained writes to a million keys took an eighth less time).
	if old, ok := m.tree.ReplaceOrInsert(entry{key: key, value: value, create: m.rev, mod: m.rev}); ok {
		m.tree.ReplaceOrInsert(entry{key: old.key, value: value, create: old.create, mod: m.rev})
	}
	return m.rev
}

// Query answers a get or a list encoded by Client. Like Apply, it reports
// a query it cannot answer in its result, never as an error, so the
// client gets a typed error back through any node.
func (m *Machine) Query(b []byte) ([]byte, error) {
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
		e, ok := m.tree.Get(entry{key: q.key})
		if !ok {
			return reply{tag: tagGetResult}.encode(), nil
		}
		return reply{tag: tagGetResult, found: true, kv: KeyValue{Value: e.value, CreateRevision: e.create, ModRevision: e.mod}}.encode(), nil
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
		if skip && e.key == q.after {
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

// Snapshot format, version 1, all integers unsigned varints:
//
//	"TKVS" version revision count count×(key, value, create, mod) crc32c
//
// with strings and values prefixed by their length, keys in increasing
// order, and a big-endian CRC-32C (Castagnoli) of everything before it.
// The bytes for a given state are the same as the first release wrote
// (testdata/snapshot-v1.bin), so replicas of either build read each
// other's snapshots.
const (
	snapshotMagic   = "TKVS"
	snapshotVersion = 1
	// maxSnapshotValue bounds one value read from a snapshot, so a
	// corrupt length cannot ask for an absurd allocation.
	maxSnapshotValue = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes the whole state to w. Equal states give equal bytes.
// It holds the machine only to capture it: the same as Capture().WriteTo(w).
func (m *Machine) Snapshot(w io.Writer) error {
	_, err := m.Capture().WriteTo(w)
	return err
}

// Capture returns the state as it is now, in constant time: the view
// shares the machine's tree, which copies the nodes it changes from then
// on (copy on write). See rsm.Capturer. Right after a cold start's
// prepared commands, with no command applied since, it first puts the
// deferred puts in the tree: at most two runs, bounded in bytes and in
// puts whatever the state's size.
func (m *Machine) Capture() rsm.StateView {
	m.mu.Lock() // Clone changes the tree's ownership marks
	defer m.mu.Unlock()
	m.settle()
	return &view{rev: m.rev, tree: m.tree.Clone()}
}

// view is a captured state. Nothing writes its tree: the machine's writes
// after the capture copy the nodes they change.
type view struct {
	rev  uint64
	tree *btree.BTreeG[entry]
}

// WriteTo writes the view in the snapshot format, streaming through a
// buffer as it walks the tree.
func (v *view) WriteTo(w io.Writer) (int64, error) {
	h := crc32.New(castagnoli)
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(io.MultiWriter(cw, h), 64<<10)
	scratch := make([]byte, 0, 64)
	scratch = append(scratch, snapshotMagic...)
	scratch = binary.AppendUvarint(scratch, snapshotVersion)
	scratch = binary.AppendUvarint(scratch, v.rev)
	scratch = binary.AppendUvarint(scratch, uint64(v.tree.Len()))
	_, err := bw.Write(scratch)
	v.tree.Ascend(func(e entry) bool {
		if err != nil {
			return false
		}
		scratch = appendString(scratch[:0], e.key)
		scratch = binary.AppendUvarint(scratch, uint64(len(e.value)))
		if _, err = bw.Write(scratch); err != nil {
			return false
		}
		if _, err = bw.Write(e.value); err != nil {
			return false
		}
		scratch = binary.AppendUvarint(scratch[:0], e.create)
		scratch = binary.AppendUvarint(scratch, e.mod)
		_, err = bw.Write(scratch)
		return err == nil
	})
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = cw.Write(binary.BigEndian.AppendUint32(nil, h.Sum32()))
	}
	if err != nil {
		return cw.n, fmt.Errorf("kv: writing snapshot: %w", err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore replaces the whole state with a snapshot, reading it as it
// goes. It checks the format version, the checksum, the key order and
// that every revision is at most the snapshot's; on any error the state
// is left as it was. Views captured before keep the state they hold.
func (m *Machine) Restore(r io.Reader) error {
	rev, tree, err := readSnapshot(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waitRun()
	clear(m.deferred)
	m.rev, m.tree, m.deferred, m.deferredBytes, m.treeLen = rev, tree, m.deferred[:0], 0, tree.Len()
	return nil
}

func readSnapshot(r io.Reader) (rev uint64, tree *btree.BTreeG[entry], err error) {
	sr := &snapReader{r: r, h: crc32.New(castagnoli), buf: make([]byte, snapReadBuffer)}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(snapshotMagic))
	if err := sr.full(magic); err != nil || string(magic) != snapshotMagic {
		if sr.ioErr {
			return 0, nil, fmt.Errorf("kv: reading snapshot: %w", sr.err)
		}
		return 0, nil, corrupt("not a kv snapshot (no %q header)", snapshotMagic)
	}
	version := sr.uvarint()
	if sr.err == nil && version != snapshotVersion {
		return 0, nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrSnapshotVersion, version, snapshotVersion)
	}
	rev = sr.uvarint()
	n := sr.uvarint()
	tree = newTree()
	tb := buildTree(tree)
	defer tb.wait()
	batch := tb.batch()
	lend := func(buf []byte) []byte { return tb.retire(batch, buf) }
	var last string
	for i := uint64(0); i < n && sr.err == nil; i++ {
		kl := sr.uvarint()
		if sr.err == nil && kl > MaxKeySize {
			return 0, nil, corrupt("key %d is %d bytes long, more than %d", i, kl, MaxKeySize)
		}
		k := sr.string(kl)
		vl := sr.uvarint()
		if sr.err == nil && vl > maxSnapshotValue {
			return 0, nil, corrupt("value %d is %d bytes long, more than %d", i, vl, maxSnapshotValue)
		}
		v, lent := sr.value(vl)
		e := entry{key: k, value: v, create: sr.uvarint(), mod: sr.uvarint()}
		if sr.err != nil {
			break
		}
		if err := validKey(k); err != nil {
			return 0, nil, corrupt("entry %d: %v", i, err)
		}
		if i > 0 && k <= last {
			return 0, nil, corrupt("key %q after %q: keys out of order", k, last)
		}
		if e.create == 0 || e.create > e.mod || e.mod > rev {
			return 0, nil, corrupt("key %q: revisions created %d, modified %d at snapshot revision %d", k, e.create, e.mod, rev)
		}
		if batch.add(e, lent) {
			tb.send(batch)
			batch = tb.batch()
		}
		if sr.retire == nil && sr.total >= restoreLendFrom {
			sr.retire = lend // from now on, and with no value lent before
		}
		last = k
	}
	if sr.ioErr {
		return 0, nil, fmt.Errorf("kv: reading snapshot: %w", sr.err)
	}
	if sr.err != nil {
		return 0, nil, corrupt("%v", sr.err)
	}
	want := sr.sum()
	var sum [4]byte
	if err := sr.full(sum[:]); err != nil {
		if sr.ioErr {
			return 0, nil, fmt.Errorf("kv: reading snapshot: %w", err)
		}
		return 0, nil, corrupt("no checksum: %v", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return 0, nil, corrupt("checksum %08x, computed %08x", got, want)
	}
	if sr.fill(1); sr.end > sr.off {
		return 0, nil, corrupt("trailing bytes after the checksum")
	}
	if sr.readErr != nil {
		return 0, nil, fmt.Errorf("kv: reading snapshot: %w", sr.readErr)
	}
	// The last batch goes once nothing is left to read: the reads above
	// may retire the buffer they refill into it.
	tb.send(batch)
	tb.wait()
	return rev, tree, nil
}

// treeBuilder takes the entries a restore has read and checked to its
// tree in goroutines of their own while the restore reads the next ones:
// copiers copy the values still lent from the read buffers (the first
// writes to fresh memory, the largest part of a large restore), and one
// goroutine inserts the batches into the tree in the order they were
// read. Each side takes about as long, and a node has two cores or more.
type treeBuilder struct {
	lent  chan *restoreBatch // batches read, their lent values to copy
	order chan *restoreBatch // the same batches, in order, to insert once copied
	free  chan *restoreBatch // batches inserted, to fill again
	bufs  chan []byte        // read buffers no value borrows any more
	done  chan struct{}
	made  int  // batches made
	sent  bool // lent and order are closed
}

// restoreLendFrom: a restore lends values from its read buffers once it
// has read this many bytes. Before, the reader copies them itself: a
// small restore allocates no more read buffers than its first. A
// variable for tests.
var restoreLendFrom int64 = 4 << 20

// restoreBatch is a run of entries in key order. lent[i] says entries[i]'s
// value is still in a read buffer; retired are the read buffers the
// reader gave up while filling the batch, free to reuse once its values
// and every earlier batch's are copied.
type restoreBatch struct {
	entries []entry
	lent    []bool
	retired [][]byte
	copied  chan struct{}
}

// add appends e and reports whether the batch is full: of entries, or of
// the read buffers its values may borrow from.
func (b *restoreBatch) add(e entry, lent bool) bool {
	b.entries = append(b.entries, e)
	b.lent = append(b.lent, lent)
	return len(b.entries) == cap(b.entries) || len(b.retired) >= restoreBatchBuffers
}

const (
	restoreBatchLen = 1024 // entries per batch
	restoreBatches  = 4    // batches waiting for a copier
	restoreCopiers  = 2
	// restoreBatchBuffers: a batch is cut once it has retired this many
	// read buffers (one value larger than a buffer retires several).
	restoreBatchBuffers = 4
	// restoreBatchCount bounds the batches of a restore: one being read,
	// one per copier and one being inserted, and a few waiting on each
	// side.
	restoreBatchCount = 2*restoreBatches + restoreCopiers + 2
	// restoreBuffers is how many read buffers the restore keeps for
	// reuse: as many as the batches retire, so that none is allocated
	// again (a fresh buffer's pages are new to the process).
	restoreBuffers = restoreBatchCount * (restoreBatchBuffers + 1)
)

func buildTree(tree *btree.BTreeG[entry]) *treeBuilder {
	b := &treeBuilder{
		lent:  make(chan *restoreBatch, restoreBatches),
		order: make(chan *restoreBatch, restoreBatchCount),
		free:  make(chan *restoreBatch, restoreBatchCount),
		bufs:  make(chan []byte, restoreBuffers),
		done:  make(chan struct{}),
	}
	for range restoreCopiers {
		go func() {
			for batch := range b.lent {
				for i, lent := range batch.lent {
					if lent {
						batch.entries[i].value = bytes.Clone(batch.entries[i].value)
					}
				}
				batch.copied <- struct{}{}
			}
		}()
	}
	go func() {
		defer close(b.done)
		for batch := range b.order {
			<-batch.copied
			// Every batch before this one is copied too: no value borrows
			// the buffers retired while it was read.
			for _, buf := range batch.retired {
				select {
				case b.bufs <- buf:
				default:
				}
			}
			for _, e := range batch.entries {
				tree.ReplaceOrInsert(e)
			}
			clear(batch.entries) // the values are the tree's now
			clear(batch.retired)
			batch.entries, batch.lent, batch.retired = batch.entries[:0], batch.lent[:0], batch.retired[:0]
			b.free <- batch
		}
	}()
	return b
}

// batch returns an empty batch to fill: a new one while there are fewer
// than restoreBatchCount (a small restore makes one), else one inserted.
func (b *treeBuilder) batch() *restoreBatch {
	select {
	case batch := <-b.free:
		return batch
	default:
	}
	if b.made == restoreBatchCount {
		return <-b.free
	}
	b.made++
	return &restoreBatch{
		entries: make([]entry, 0, restoreBatchLen),
		lent:    make([]bool, 0, restoreBatchLen),
		copied:  make(chan struct{}, 1),
	}
}

// retire is the read buffer the reader gives up (its values are lent to
// cur, the batch being filled, and to earlier ones) and the buffer it
// reads into next.
func (b *treeBuilder) retire(cur *restoreBatch, buf []byte) []byte {
	cur.retired = append(cur.retired, buf)
	select {
	case next := <-b.bufs:
		return next
	default:
		return make([]byte, len(buf))
	}
}

// send hands a batch over to be copied and inserted.
func (b *treeBuilder) send(batch *restoreBatch) {
	if len(batch.entries) == 0 && len(batch.retired) == 0 {
		b.free <- batch
		return
	}
	b.lent <- batch
	b.order <- batch
}

// wait waits for every batch sent to be inserted. It may be called again.
func (b *treeBuilder) wait() {
	if !b.sent {
		b.sent = true
		close(b.lent)
		close(b.order)
	}
	<-b.done
}

// snapReadBuffer is snapReader's buffer: a key and most values are read
// from it in place.
const snapReadBuffer = 64 << 10

// snapReader reads a snapshot's fields through a buffer it refills,
// hashing the bytes it has consumed in bulk as it refills; the first error
// sticks. Values are lent from the buffer or copied out of it whole, so
// their memory is not cleared before it is written.
type snapReader struct {
	r   io.Reader
	h   hash.Hash32
	buf []byte
	// retire, if set, takes buf when it is refilled and returns the buffer
	// to read into next: values may be lent from buf (see value).
	retire   func(buf []byte) []byte
	total    int64 // bytes read from r
	off, end int   // buf[off:end] is read from r and not consumed yet
	hashed   int   // buf[hashed:off] is consumed and not hashed yet
	eof      bool
	readErr  error // r's error other than io.EOF
	err      error
	ioErr    bool // err came from the reader, not from the bytes
}

// fill tries to have n (at most len(buf)) bytes buffered; fewer only at
// the end of the input or after a read error.
func (s *snapReader) fill(n int) {
	if s.end-s.off >= n || s.eof || s.readErr != nil {
		return
	}
	s.h.Write(s.buf[s.hashed:s.off])
	s.hashed = s.off
	switch {
	case s.retire != nil && len(s.buf)-s.off >= n:
		// Room after off: values lent from before it stay where they are.
	case s.retire != nil:
		next := s.retire(s.buf)
		s.end = copy(next, s.buf[s.off:s.end])
		s.buf, s.off, s.hashed = next, 0, 0
	default:
		s.end = copy(s.buf, s.buf[s.off:s.end])
		s.off, s.hashed = 0, 0
	}
	for s.end-s.off < n && !s.eof && s.readErr == nil {
		m, err := s.r.Read(s.buf[s.end:])
		s.end += m
		s.total += int64(m)
		switch {
		case errors.Is(err, io.EOF):
			s.eof = true
		case err != nil:
			s.readErr = err
		}
	}
}

// need fills n bytes and reports whether they are there; if not it
// records why: a read error, else truncation.
func (s *snapReader) need(n int) bool {
	s.fill(n)
	if s.end-s.off >= n {
		return true
	}
	if s.readErr != nil {
		s.err, s.ioErr = s.readErr, true
	} else {
		s.err = io.ErrUnexpectedEOF
	}
	return false
}

// sum is the checksum of every byte consumed so far.
func (s *snapReader) sum() uint32 {
	s.h.Write(s.buf[s.hashed:s.off])
	s.hashed = s.off
	return s.h.Sum32()
}

func (s *snapReader) full(b []byte) error {
	if s.err == nil && s.need(len(b)) {
		s.off += copy(b, s.buf[s.off:])
	}
	return s.err
}

func (s *snapReader) uvarint() uint64 {
	if s.err != nil {
		return 0
	}
	s.fill(binary.MaxVarintLen64)
	v, n, err := uvarint(s.buf[s.off:s.end])
	if err != nil {
		if errors.Is(err, errTruncatedVarint) {
			s.need(binary.MaxVarintLen64) // records the read error or the truncation
			return 0
		}
		s.err = err
		return 0
	}
	s.off += n
	return v
}

func (s *snapReader) string(n uint64) string {
	if s.err != nil || !s.need(int(n)) { // n ≤ MaxKeySize, checked by the caller
		return ""
	}
	k := string(s.buf[s.off : s.off+int(n)])
	s.off += int(n)
	return k
}

// value reads n bytes. A value that fits in the buffer is lent from it
// (lent true) when the reader retires its buffers, else one copy out of
// it; a larger one grows as data arrives, so that a corrupt length fails
// at the end of the input, not in the allocator.
func (s *snapReader) value(n uint64) (v []byte, lent bool) {
	if s.err != nil {
		return nil, false
	}
	if n <= uint64(len(s.buf)) {
		if !s.need(int(n)) {
			return nil, false
		}
		v = s.buf[s.off : s.off+int(n) : s.off+int(n)]
		s.off += int(n)
		if s.retire != nil {
			return v, true
		}
		return bytes.Clone(v), false
	}
	for rest := n; rest > 0; {
		if !s.need(1) {
			return nil, false
		}
		m := min(rest, uint64(s.end-s.off))
		v = append(v, s.buf[s.off:s.off+int(m)]...)
		s.off += int(m)
		rest -= m
	}
	return v, false
}
