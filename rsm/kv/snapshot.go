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

	"github.com/google/btree"
)

// Snapshot format, version 2, integers as varints (unsigned, or zigzag
// for the signed ones: version, lease, lease ID and TTL):
//
//	"TKVS" 2 revision compact legacy count count×key leases leases×(id ttl) crc32c
//	key:     name versions versions×version, the newest first
//	version: 0 value create mod sub ver lease    a put
//	         1 mod sub                           a delete
//
// with legacy one byte, 1 in the legacy era (no etcd write applied yet:
// the compact revision is then the revision, and every key has one
// version, a put at Version 1 without lease, and there are no leases),
// else 0; strings and values prefixed by their length, keys in increasing
// order, each key's versions in decreasing revision order, leases in
// increasing ID order, and a big-endian CRC-32C (Castagnoli) of
// everything before it. Which keys a lease holds follows from the keys'
// latest versions. A key's oldest version, or its only one, may be a
// delete: one made at the compact revision, which compaction keeps as
// etcd 3.7 does. Every build that reads format 2 reads such a key (the
// builds before that rule never wrote one but read it alike).
//
// Version 1, which the kv machine wrote before it kept history, is
//
//	"TKVS" 1 revision count count×(key value create mod) crc32c
//
// (testdata/snapshot-v1.bin). Restore reads it as a state whose history
// is compacted at its revision, in the legacy era: every key has one
// version, Version 1, no lease; reads before the revision fail with
// ErrGRPCCompacted.
const (
	snapshotMagic    = "TKVS"
	snapshotVersion  = 2
	snapshotVersion1 = 1
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

// WriteTo writes the view in the snapshot format, streaming through a
// buffer as it walks the trees.
func (v *ReadView) WriteTo(w io.Writer) (int64, error) {
	h := crc32.New(castagnoli)
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(io.MultiWriter(cw, h), 64<<10)
	scratch := make([]byte, 0, 64)
	scratch = append(scratch, snapshotMagic...)
	scratch = binary.AppendUvarint(scratch, snapshotVersion)
	scratch = binary.AppendUvarint(scratch, v.s.rev)
	scratch = binary.AppendUvarint(scratch, v.s.compact)
	if v.s.legacy {
		scratch = append(scratch, 1)
	} else {
		scratch = append(scratch, 0)
	}
	scratch = binary.AppendUvarint(scratch, uint64(v.s.tree.Len()))
	_, err := bw.Write(scratch)
	v.s.tree.Ascend(func(e entry) bool {
		if err != nil {
			return false
		}
		n := 0
		for p := &e.version; p != nil; p = p.prev {
			n++
		}
		scratch = appendString(scratch[:0], e.key)
		scratch = binary.AppendUvarint(scratch, uint64(n))
		for p := &e.version; p != nil && err == nil; p = p.prev {
			if p.tomb {
				scratch = append(scratch, 1)
				scratch = binary.AppendUvarint(scratch, p.mod)
				scratch = binary.AppendUvarint(scratch, uint64(p.sub))
				continue
			}
			scratch = append(scratch, 0)
			scratch = binary.AppendUvarint(scratch, uint64(len(p.value)))
			if _, err = bw.Write(scratch); err != nil {
				break
			}
			if _, err = bw.Write(p.value); err != nil {
				break
			}
			scratch = binary.AppendUvarint(scratch[:0], p.create)
			scratch = binary.AppendUvarint(scratch, p.mod)
			scratch = binary.AppendUvarint(scratch, uint64(p.sub))
			scratch = binary.AppendVarint(scratch, p.ver)
			scratch = binary.AppendVarint(scratch, p.lease)
		}
		if err == nil {
			_, err = bw.Write(scratch)
		}
		return err == nil
	})
	if err == nil {
		leases := v.s.leaseList()
		scratch = binary.AppendUvarint(scratch[:0], uint64(len(leases)))
		for _, l := range leases {
			scratch = binary.AppendVarint(scratch, l.id)
			scratch = binary.AppendVarint(scratch, l.ttl)
		}
		_, err = bw.Write(scratch)
	}
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

// Restore replaces the whole state with a snapshot of either format
// version, reading it as it goes. It checks the format version, the
// checksum, the key order, that every revision is at most the
// snapshot's and each key's in decreasing order, and that the leases
// keys name exist; on any error the state is left as it was. Views
// captured before keep the state they hold. An observer is then told
// the new revision with no events: what it has not seen is in the
// restored history.
func (m *Machine) Restore(r io.Reader) error {
	s, err := readSnapshot(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.waitRun()
	clear(m.deferred)
	m.state, m.deferred, m.deferredBytes, m.treeLen, m.pub = s, m.deferred[:0], 0, s.tree.Len(), nil
	rev, o := int64(m.rev), m.observer
	m.mu.Unlock()
	if o != nil {
		o(rev, nil)
	}
	return nil
}

func readSnapshot(r io.Reader) (state, error) {
	sr := &snapReader{r: r, h: crc32.New(castagnoli), buf: make([]byte, snapReadBuffer)}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(snapshotMagic))
	if err := sr.full(magic); err != nil || string(magic) != snapshotMagic {
		if sr.ioErr {
			return state{}, fmt.Errorf("kv: reading snapshot: %w", sr.err)
		}
		return state{}, corrupt("not a kv snapshot (no %q header)", snapshotMagic)
	}
	format := sr.uvarint()
	if sr.err == nil && format != snapshotVersion && format != snapshotVersion1 {
		return state{}, fmt.Errorf("%w: version %d, this build reads versions %d and %d", ErrSnapshotVersion, format, snapshotVersion1, snapshotVersion)
	}
	s := newState()
	s.rev = sr.uvarint()
	if format == snapshotVersion1 {
		s.compact, s.legacy = s.rev, true
	} else {
		s.compact = sr.uvarint()
		if sr.err == nil && s.compact > s.rev {
			return state{}, corrupt("compact revision %d after revision %d", s.compact, s.rev)
		}
		switch flag := sr.byte(); {
		case sr.err != nil:
		case flag > 1:
			return state{}, corrupt("legacy flag 0x%02x", flag)
		case flag == 1 && s.compact != s.rev:
			return state{}, corrupt("legacy era with compact revision %d before revision %d", s.compact, s.rev)
		default:
			s.legacy = flag == 1
		}
	}
	n := sr.uvarint()
	tb := buildTree(s.tree)
	defer tb.wait()
	batch := tb.batch()
	lend := func(buf []byte) []byte { return tb.retire(batch, buf) }
	var last string
	var attached []leaseItem // the keys' leases, to check against the leases
	for i := uint64(0); i < n && sr.err == nil; i++ {
		kl := sr.uvarint()
		if sr.err == nil && kl > MaxKeySize {
			return state{}, corrupt("key %d is %d bytes long, more than %d", i, kl, MaxKeySize)
		}
		k := sr.string(kl)
		var e entry
		var lent bool
		var err error
		if format == snapshotVersion1 {
			e, lent, err = readV1Key(sr, k, s.rev)
		} else {
			e, lent, err = readKey(sr, k, s.rev)
		}
		if sr.err != nil {
			break
		}
		if err != nil {
			return state{}, corrupt("key %q: %v", k, err)
		}
		if s.legacy && (e.tomb || e.prev != nil || e.ver != 1 || e.lease != 0) {
			return state{}, corrupt("key %q: history, a version or a lease in the legacy era", k)
		}
		if i > 0 && k <= last {
			return state{}, corrupt("key %q after %q: keys out of order", k, last)
		}
		if !e.tomb {
			s.live++
			if e.lease != 0 {
				attached = append(attached, leaseItem{id: e.lease, key: k})
			}
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
	if format != snapshotVersion1 && sr.err == nil {
		nl := sr.uvarint()
		var lastID int64
		for i := uint64(0); i < nl && sr.err == nil; i++ {
			id, ttl := sr.varint(), sr.varint()
			if sr.err != nil {
				break
			}
			if s.legacy {
				return state{}, corrupt("lease %d in the legacy era", id)
			}
			if id == 0 || (i > 0 && id <= lastID) {
				return state{}, corrupt("lease %d after %d", id, lastID)
			}
			s.leases.ReplaceOrInsert(leaseItem{id: id, ttl: ttl})
			lastID = id
		}
	}
	if sr.ioErr {
		return state{}, fmt.Errorf("kv: reading snapshot: %w", sr.err)
	}
	if sr.err != nil {
		return state{}, corrupt("%v", sr.err)
	}
	for _, a := range attached {
		if _, ok := s.leases.Get(leaseItem{id: a.id}); !ok {
			return state{}, corrupt("key %q is attached to lease %d, which does not exist", a.key, a.id)
		}
		s.leases.ReplaceOrInsert(a)
	}
	want := sr.sum()
	var sum [4]byte
	if err := sr.full(sum[:]); err != nil {
		if sr.ioErr {
			return state{}, fmt.Errorf("kv: reading snapshot: %w", err)
		}
		return state{}, corrupt("no checksum: %v", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return state{}, corrupt("checksum %08x, computed %08x", got, want)
	}
	if sr.fill(1); sr.end > sr.off {
		return state{}, corrupt("trailing bytes after the checksum")
	}
	if sr.readErr != nil {
		return state{}, fmt.Errorf("kv: reading snapshot: %w", sr.readErr)
	}
	// The last batch goes once nothing is left to read: the reads above
	// may retire the buffer they refill into it.
	tb.send(batch)
	tb.wait()
	return s, nil
}

// readV1Key reads the rest of a key of a version 1 snapshot.
func readV1Key(sr *snapReader, k string, rev uint64) (entry, bool, error) {
	vl := sr.uvarint()
	if sr.err == nil && vl > maxSnapshotValue {
		return entry{}, false, fmt.Errorf("value of %d bytes, more than %d", vl, maxSnapshotValue)
	}
	v, lent := sr.value(vl)
	e := entry{key: k, version: version{value: v, create: sr.uvarint(), mod: sr.uvarint(), ver: 1}}
	if sr.err != nil {
		return entry{}, false, nil
	}
	if err := validKey(k); err != nil {
		return entry{}, false, err
	}
	if e.create == 0 || e.create > e.mod || e.mod > rev {
		return entry{}, false, fmt.Errorf("revisions created %d, modified %d at snapshot revision %d", e.create, e.mod, rev)
	}
	return e, lent, nil
}

// readKey reads the versions of a key of a version 2 snapshot, the
// newest first. The newest version's value may be lent from the read
// buffer; older ones are copied.
func readKey(sr *snapReader, k string, rev uint64) (entry, bool, error) {
	if k == "" {
		return entry{}, false, errors.New("empty key")
	}
	nv := sr.uvarint()
	if sr.err == nil && nv == 0 {
		return entry{}, false, errors.New("no versions")
	}
	var head entry
	head.key = k
	var lent bool
	var tail *version // the last version read, where the next one chains
	for i := uint64(0); i < nv && sr.err == nil; i++ {
		var v version
		switch flag := sr.byte(); {
		case sr.err != nil:
		case flag == 1:
			v.tomb = true
			v.mod = sr.uvarint()
			v.sub = sr.uint32()
		case flag == 0:
			vl := sr.uvarint()
			if sr.err == nil && vl > maxSnapshotValue {
				return entry{}, false, fmt.Errorf("value of %d bytes, more than %d", vl, maxSnapshotValue)
			}
			var l bool
			v.value, l = sr.value(vl)
			if l && i > 0 {
				v.value = bytes.Clone(v.value)
			}
			if i == 0 {
				lent = l
			}
			v.create, v.mod, v.sub, v.ver, v.lease = sr.uvarint(), sr.uvarint(), sr.uint32(), sr.varint(), sr.varint()
			if sr.err == nil && (v.create == 0 || v.create > v.mod || v.ver < 1) {
				return entry{}, false, fmt.Errorf("version created %d, modified %d, version %d", v.create, v.mod, v.ver)
			}
		default:
			return entry{}, false, fmt.Errorf("version flag 0x%02x", flag)
		}
		if sr.err != nil {
			break
		}
		if v.mod == 0 || v.mod > rev {
			return entry{}, false, fmt.Errorf("revision %d at snapshot revision %d", v.mod, rev)
		}
		if i == 0 {
			head.version = v
			tail = &head.version
			continue
		}
		// A Txn may change a key twice (a put, then a delete from a key
		// before it on): one revision, two sub revisions.
		if v.mod > tail.mod || (v.mod == tail.mod && v.sub >= tail.sub) {
			return entry{}, false, fmt.Errorf("revision %d.%d after %d.%d: versions out of order", v.mod, v.sub, tail.mod, tail.sub)
		}
		if !v.tomb && !tail.tomb && tail.create != v.create {
			return entry{}, false, fmt.Errorf("versions at %d and %d of one generation created at %d and %d", v.mod, tail.mod, v.create, tail.create)
		}
		p := v
		tail.prev = &p
		tail = &p
	}
	return head, lent, nil
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

func (s *snapReader) byte() byte {
	if s.err != nil || !s.need(1) {
		return 0
	}
	c := s.buf[s.off]
	s.off++
	return c
}

// varint reads a zigzag varint, minimal as uvarint is.
func (s *snapReader) varint() int64 {
	u := s.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (s *snapReader) uint32() uint32 {
	u := s.uvarint()
	if s.err == nil && u > 1<<32-1 {
		s.err = fmt.Errorf("sub revision %d overflows", u)
	}
	return uint32(u)
}
