package kv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
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
}

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
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.tree.Len()
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
// it.
func (m *Machine) ApplyPrepared(cmd []byte, p any) []byte {
	pc, ok := p.(*prepared)
	if !ok {
		return m.Apply(cmd)
	}
	if pc.err != nil {
		return errorReply(pc.err)
	}
	return m.apply(pc.c, true)
}

// apply applies c, decoded and checked; owned says its value is a copy
// the machine may keep.
func (m *Machine) apply(c command, owned bool) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	// create revision stays).
	if old, ok := m.tree.ReplaceOrInsert(entry{key: key, value: value, create: m.rev, mod: m.rev}); ok {
		m.tree.ReplaceOrInsert(entry{key: key, value: value, create: old.create, mod: m.rev})
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
	m.mu.RLock()
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
// on (copy on write). See rsm.Capturer.
func (m *Machine) Capture() rsm.StateView {
	m.mu.Lock() // Clone changes the tree's ownership marks
	defer m.mu.Unlock()
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
	m.rev, m.tree = rev, tree
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
		e := entry{key: k, value: sr.bytes(vl), create: sr.uvarint(), mod: sr.uvarint()}
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
		if batch = append(batch, e); len(batch) == cap(batch) {
			tb.send(batch)
			batch = tb.batch()
		}
		last = k
	}
	tb.send(batch)
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
	tb.wait()
	return rev, tree, nil
}

// treeBuilder inserts the entries a restore has read and checked into its
// tree, in a goroutine of its own, while the restore reads the next ones:
// the inserts take about as long as reading and copying the values, and
// a node has two cores or more.
type treeBuilder struct {
	in   chan []entry // batches to insert, in order
	free chan []entry // batches inserted, to fill again
	done chan struct{}
	sent bool // in is closed
}

const (
	restoreBatch   = 1024 // entries per batch
	restoreBatches = 4    // batches in the pipeline
)

func buildTree(tree *btree.BTreeG[entry]) *treeBuilder {
	b := &treeBuilder{in: make(chan []entry, restoreBatches), free: make(chan []entry, restoreBatches), done: make(chan struct{})}
	for range restoreBatches {
		b.free <- make([]entry, 0, restoreBatch)
	}
	go func() {
		defer close(b.done)
		for batch := range b.in {
			for _, e := range batch {
				tree.ReplaceOrInsert(e)
			}
			b.free <- batch[:0]
		}
	}()
	return b
}

// batch returns an empty batch to fill.
func (b *treeBuilder) batch() []entry { return <-b.free }

// send hands a batch over to be inserted.
func (b *treeBuilder) send(batch []entry) {
	if len(batch) > 0 {
		b.in <- batch
	}
}

// wait waits for every batch sent to be inserted. It may be called again.
func (b *treeBuilder) wait() {
	if !b.sent {
		b.sent = true
		close(b.in)
	}
	<-b.done
}

// snapReadBuffer is snapReader's buffer: a key and most values are read
// from it in place.
const snapReadBuffer = 64 << 10

// snapReader reads a snapshot's fields through a buffer it refills,
// hashing the bytes it has consumed in bulk as it refills; the first error
// sticks. Values are copied out of the buffer whole, so their memory is
// not cleared before it is written.
type snapReader struct {
	r        io.Reader
	h        hash.Hash32
	buf      []byte
	off, end int // buf[off:end] is read from r and not consumed yet
	hashed   int // buf[hashed:off] is consumed and not hashed yet
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
	s.end = copy(s.buf, s.buf[s.off:s.end])
	s.off, s.hashed = 0, 0
	for s.end < n && !s.eof && s.readErr == nil {
		m, err := s.r.Read(s.buf[s.end:])
		s.end += m
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

// bytes reads n bytes. A value that fits in the buffer is one copy out of
// it; a larger one grows as data arrives, so that a corrupt length fails
// at the end of the input, not in the allocator.
func (s *snapReader) bytes(n uint64) []byte {
	if s.err != nil {
		return nil
	}
	if n <= uint64(len(s.buf)) {
		if !s.need(int(n)) {
			return nil
		}
		v := bytes.Clone(s.buf[s.off : s.off+int(n)])
		s.off += int(n)
		return v
	}
	var v []byte
	for rest := n; rest > 0; {
		if !s.need(1) {
			return nil
		}
		m := min(rest, uint64(s.end-s.off))
		v = append(v, s.buf[s.off:s.off+int(m)]...)
		s.off += int(m)
		rest -= m
	}
	return v
}
