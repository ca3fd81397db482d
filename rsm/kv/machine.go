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
	"slices"
	"sort"
	"strings"
	"sync"

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

type entry struct {
	value       []byte
	create, mod uint64
}

// Machine is the key-value state machine. Its whole state lives in memory:
// a map from key to value and revisions, the keys kept sorted for List,
// and one revision counter that every successful put, delete and swap
// increments (as in etcd). A failed swap and a delete of an absent key
// leave the counter as it was.
//
// Machine is safe for concurrent use, though the node calls it from one
// goroutine at a time.
type Machine struct {
	mu   sync.RWMutex
	rev  uint64
	data map[string]*entry
	keys []string // sorted; a new key costs a copy of this slice's tail
}

var _ rsm.StateMachine = (*Machine)(nil)

// New returns an empty machine at revision 0.
func New() *Machine { return &Machine{data: map[string]*entry{}} }

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
	return len(m.keys)
}

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
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c.op {
	case tagPut:
		return reply{tag: tagPutResult, rev: m.put(c.key, c.value)}.encode()
	case tagDelete:
		e := m.data[c.key]
		if e == nil {
			return reply{tag: tagDeleteResult, ok: false, rev: m.rev}.encode()
		}
		m.rev++
		delete(m.data, c.key)
		i, _ := slices.BinarySearch(m.keys, c.key)
		m.keys = slices.Delete(m.keys, i, i+1)
		return reply{tag: tagDeleteResult, ok: true, rev: m.rev}.encode()
	default: // tagCAS
		var cur uint64
		if e := m.data[c.key]; e != nil {
			cur = e.mod
		}
		if cur != c.expect {
			return reply{tag: tagCASResult, ok: false, rev: cur}.encode()
		}
		return reply{tag: tagCASResult, ok: true, rev: m.put(c.key, c.value)}.encode()
	}
}

// put sets key to a copy of value at the next revision and returns it.
func (m *Machine) put(key string, value []byte) uint64 {
	m.rev++
	value = bytes.Clone(value)
	if value == nil {
		value = []byte{}
	}
	if e := m.data[key]; e != nil {
		e.value, e.mod = value, m.rev
		return m.rev
	}
	m.data[key] = &entry{value: value, create: m.rev, mod: m.rev}
	i, _ := slices.BinarySearch(m.keys, key)
	m.keys = slices.Insert(m.keys, i, key)
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
		e := m.data[q.key]
		if e == nil {
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
	var i int
	if q.after >= prefix {
		i = sort.Search(len(m.keys), func(i int) bool { return m.keys[i] > q.after })
	} else {
		i = sort.SearchStrings(m.keys, prefix)
	}
	r := reply{tag: tagListResult}
	var size uint64
	for ; i < len(m.keys) && strings.HasPrefix(m.keys[i], prefix); i++ {
		k := m.keys[i]
		e := m.data[k]
		it := KeyValue{Key: k, CreateRevision: e.create, ModRevision: e.mod}
		if !q.keysOnly {
			it.Value = e.value
		}
		n := uint64(len(it.Key)+len(it.Value)) + 4*binary.MaxVarintLen64
		if uint64(len(r.items)) == limit || (len(r.items) > 0 && size+n > budget) {
			r.more = true
			break
		}
		size += n
		r.items = append(r.items, it)
	}
	return r
}

// Snapshot format, version 1, all integers unsigned varints:
//
//	"TKVS" version revision count count×(key, value, create, mod) crc32c
//
// with strings and values prefixed by their length, keys in increasing
// order, and a big-endian CRC-32C (Castagnoli) of everything before it.
const (
	snapshotMagic   = "TKVS"
	snapshotVersion = 1
	// maxSnapshotValue bounds one value read from a snapshot, so a
	// corrupt length cannot ask for an absurd allocation.
	maxSnapshotValue = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes the whole state to w. Equal states give equal bytes.
func (m *Machine) Snapshot(w io.Writer) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var scratch []byte
	put := func(b []byte) { _, _ = bw.Write(b) } // bw keeps the first error
	scratch = append(scratch[:0], snapshotMagic...)
	scratch = binary.AppendUvarint(scratch, snapshotVersion)
	scratch = binary.AppendUvarint(scratch, m.rev)
	scratch = binary.AppendUvarint(scratch, uint64(len(m.keys)))
	put(scratch)
	for _, k := range m.keys {
		e := m.data[k]
		scratch = appendString(scratch[:0], k)
		scratch = binary.AppendUvarint(scratch, uint64(len(e.value)))
		put(scratch)
		put(e.value)
		scratch = binary.AppendUvarint(scratch[:0], e.create)
		scratch = binary.AppendUvarint(scratch, e.mod)
		put(scratch)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("kv: writing snapshot: %w", err)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, h.Sum32())); err != nil {
		return fmt.Errorf("kv: writing snapshot: %w", err)
	}
	return nil
}

// Restore replaces the whole state with a snapshot. It checks the format
// version, the checksum, the key order and that every revision is at most
// the snapshot's; on any error the state is left as it was.
func (m *Machine) Restore(r io.Reader) error {
	rev, data, keys, err := readSnapshot(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev, m.data, m.keys = rev, data, keys
	return nil
}

func readSnapshot(r io.Reader) (rev uint64, data map[string]*entry, keys []string, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	sr := &snapReader{r: br, h: crc32.New(castagnoli)}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(snapshotMagic))
	if err := sr.full(magic); err != nil || string(magic) != snapshotMagic {
		return 0, nil, nil, corrupt("not a kv snapshot (no %q header)", snapshotMagic)
	}
	version := sr.uvarint()
	if sr.err == nil && version != snapshotVersion {
		return 0, nil, nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrSnapshotVersion, version, snapshotVersion)
	}
	rev = sr.uvarint()
	n := sr.uvarint()
	data = make(map[string]*entry, min(n, 1<<16))
	keys = make([]string, 0, min(n, 1<<16))
	for i := uint64(0); i < n && sr.err == nil; i++ {
		kl := sr.uvarint()
		if sr.err == nil && kl > MaxKeySize {
			return 0, nil, nil, corrupt("key %d is %d bytes long, more than %d", i, kl, MaxKeySize)
		}
		k := string(sr.bytes(kl))
		vl := sr.uvarint()
		if sr.err == nil && vl > maxSnapshotValue {
			return 0, nil, nil, corrupt("value %d is %d bytes long, more than %d", i, vl, maxSnapshotValue)
		}
		v := sr.bytes(vl)
		e := &entry{value: v, create: sr.uvarint(), mod: sr.uvarint()}
		if sr.err != nil {
			break
		}
		if err := validKey(k); err != nil {
			return 0, nil, nil, corrupt("entry %d: %v", i, err)
		}
		if len(keys) > 0 && k <= keys[len(keys)-1] {
			return 0, nil, nil, corrupt("key %q after %q: keys out of order", k, keys[len(keys)-1])
		}
		if e.create == 0 || e.create > e.mod || e.mod > rev {
			return 0, nil, nil, corrupt("key %q: revisions created %d, modified %d at snapshot revision %d", k, e.create, e.mod, rev)
		}
		data[k] = e
		keys = append(keys, k)
	}
	if sr.ioErr {
		return 0, nil, nil, fmt.Errorf("kv: reading snapshot: %w", sr.err)
	}
	if sr.err != nil {
		return 0, nil, nil, corrupt("%v", sr.err)
	}
	want := sr.h.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return 0, nil, nil, corrupt("no checksum: %v", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return 0, nil, nil, corrupt("checksum %08x, computed %08x", got, want)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err == nil {
			return 0, nil, nil, corrupt("trailing bytes after the checksum")
		}
		return 0, nil, nil, fmt.Errorf("kv: reading snapshot: %w", err)
	}
	return rev, data, keys, nil
}

// snapReader reads a snapshot's fields and hashes what it reads; the first
// error sticks.
type snapReader struct {
	r     *bufio.Reader
	h     hash.Hash32
	err   error
	ioErr bool // err came from the reader, not from the bytes
}

func (s *snapReader) full(b []byte) error {
	if s.err != nil {
		return s.err
	}
	if _, err := io.ReadFull(s.r, b); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			err = io.ErrUnexpectedEOF
		case !errors.Is(err, io.ErrUnexpectedEOF):
			s.ioErr = true
		}
		s.err = err
		return err
	}
	s.h.Write(b)
	return nil
}

func (s *snapReader) uvarint() uint64 {
	var buf [binary.MaxVarintLen64]byte
	for i := range buf {
		if s.full(buf[i:i+1]) != nil {
			return 0
		}
		if buf[i] < 0x80 {
			v, _, err := uvarint(buf[:i+1])
			if err != nil {
				s.err = err
			}
			return v
		}
	}
	s.err = fmt.Errorf("varint overflows 64 bits")
	return 0
}

// bytes reads n bytes, growing its buffer as data arrives so that a
// corrupt length fails at the end of the input, not in the allocator.
func (s *snapReader) bytes(n uint64) []byte {
	if s.err != nil {
		return nil
	}
	const chunk = 1 << 20
	if n <= chunk {
		b := make([]byte, n)
		s.full(b)
		return b
	}
	var buf bytes.Buffer
	for n > 0 && s.err == nil {
		c := make([]byte, min(n, chunk))
		if s.full(c) == nil {
			buf.Write(c)
			n -= uint64(len(c))
		}
	}
	return buf.Bytes()
}
