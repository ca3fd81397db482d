package rsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Incremental snapshots (docs/rsm.md, "Objects"). The snapshot object is a
// small manifest, written by compare-and-swap, that references immutable
// objects under {group}/snap/: a base (the whole state at index B, in the
// chunked format, cut into parts of bounded size) and log segments that
// cover (B, E] in order. Every referenced object is written once, under a
// name no other write uses, before the manifest that references it.
//
//	base part  {group}/snap/b{B:020d}-{term:020d}-{nonce}/{part:05d}
//	segment    {group}/snap/s{term:020d}-{nonce}-{last:020d}
//
// A base is the byte stream of a chunked snapshot (snapfile.go) cut at
// part boundaries. A segment is magic "TNR1", kind 'G', then each log
// entry of its range, in index order, as a uint32 big-endian length and
// the entry exactly as the log stores it (framed, with its own CRC-32C).
// The term in a name is its writer's: garbage collection never deletes
// an object of a term above its own (a newer leader's object may be about
// to be referenced).
const (
	kindManifest = 'M'
	kindSegment  = 'G'
	snapDir      = "snap/"

	// basePartMax bounds a base part: the store takes a value whole, so
	// the state is never held whole for a snapshot.
	basePartMax = 8 << 20
	// segmentMax bounds a segment's bytes; a range of entries larger than
	// this is written as several segments.
	segmentMax = 8 << 20
	// baseFactor: a new base is written instead of a segment once the
	// segments' bytes reach baseFactor times the base's. Store bytes per
	// command ≈ log + segment + base/baseFactor; a cold start reads up to
	// (1 + baseFactor) × the base (docs/rsm.md, "What it costs").
	baseFactor = 3
	// quietBaseFactor: a leader whose group is quiet (no command for an
	// idle period) writes a new base once the segments reach
	// quietBaseFactor times the base (window.quietBaseDue), so that a
	// restart after a busy period reads the base alone. Store bytes per
	// command stay at most log + segment + base/quietBaseFactor.
	quietBaseFactor = 1.5
	// maxSegments bounds the segments of a manifest: a base is written
	// instead of another segment beyond it, which bounds a cold start's
	// requests. A decoded manifest may hold up to maxManifestSegments.
	maxSegments         = 1 << 16
	maxManifestSegments = 1 << 20
	// manifestFormat is the version of the manifest's encoding.
	manifestFormat = 1
)

// manifest is the snapshot object of the incremental format.
type manifest struct {
	Group      string
	Nonce      []byte
	Writer     string
	WriterTerm uint64
	End        uint64 // the state it describes is the state after End
	Base       baseRef
	SegBytes   uint64   // the segments' bytes, all together
	Runs       []segRun // the segments, in index order, grouped by writer
}

// baseRef names a base: the state after Index, in Parts parts.
type baseRef struct {
	Index uint64
	Term  uint64 // its writer's term
	Nonce string // lowercase hex
	Parts int
	Bytes uint64
}

// segRun is segments written by one leadership, consecutive in the log:
// the first starts after the previous run's (or the base's) last index.
type segRun struct {
	Term  uint64
	Nonce string   // lowercase hex, one per leadership
	Lasts []uint64 // each segment's last index, increasing
}

// segRef is one segment: its key and the indexes it covers.
type segRef struct {
	key         string
	first, last uint64
}

func basePartKey(group string, b baseRef, part int) string {
	return fmt.Sprintf("%s/%sb%020d-%020d-%s/%05d", group, snapDir, b.Index, b.Term, b.Nonce, part)
}

func segmentKey(group string, term uint64, nonce string, last uint64) string {
	return fmt.Sprintf("%s/%ss%020d-%s-%020d", group, snapDir, term, nonce, last)
}

// snapObjectTerm returns the writer's term in the name of an object under
// {group}/snap/, or false if the name is not one this package writes.
func snapObjectTerm(group, key string) (uint64, bool) {
	p := group + "/" + snapDir
	if !strings.HasPrefix(key, p) || len(key) < len(p)+1+20+1 {
		return 0, false
	}
	name := key[len(p):]
	var digits string
	switch name[0] {
	case 'b':
		if len(name) < 1+20+1+20 || name[21] != '-' {
			return 0, false
		}
		digits = name[22:42]
	case 's':
		digits = name[1:21]
	default:
		return 0, false
	}
	t, err := strconv.ParseUint(digits, 10, 64)
	return t, err == nil
}

// baseKeys returns the keys of m's base parts.
func (m *manifest) baseKeys() []string {
	keys := make([]string, m.Base.Parts)
	for i := range keys {
		keys[i] = basePartKey(m.Group, m.Base, i)
	}
	return keys
}

// segments returns m's segments in index order.
func (m *manifest) segments() []segRef {
	var out []segRef
	prev := m.Base.Index
	for _, r := range m.Runs {
		for _, last := range r.Lasts {
			out = append(out, segRef{key: segmentKey(m.Group, r.Term, r.Nonce, last), first: prev + 1, last: last})
			prev = last
		}
	}
	return out
}

// objects returns the keys of every object m references.
func (m *manifest) objects() map[string]bool {
	keep := map[string]bool{}
	if m == nil {
		return keep
	}
	for _, k := range m.baseKeys() {
		keep[k] = true
	}
	for _, s := range m.segments() {
		keep[s.key] = true
	}
	return keep
}

// withSegment returns a copy of m extended by the segment of its writer
// (term, nonce) that ends at last, of size bytes.
func (m *manifest) withSegment(term uint64, nonce string, last uint64, size int) *manifest {
	c := *m
	c.Runs = make([]segRun, len(m.Runs))
	for i, r := range m.Runs {
		c.Runs[i] = segRun{Term: r.Term, Nonce: r.Nonce, Lasts: append([]uint64(nil), r.Lasts...)}
	}
	if n := len(c.Runs); n == 0 || c.Runs[n-1].Term != term || c.Runs[n-1].Nonce != nonce {
		c.Runs = append(c.Runs, segRun{Term: term, Nonce: nonce})
	}
	r := &c.Runs[len(c.Runs)-1]
	r.Lasts = append(r.Lasts, last)
	c.End = last
	c.SegBytes += uint64(size)
	return &c
}

func validHexName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func encodeManifest(m *manifest) []byte {
	var b []byte
	b = protowire.AppendVarint(b, manifestFormat)
	b = protowire.AppendBytes(b, []byte(m.Group))
	b = protowire.AppendBytes(b, m.Nonce)
	b = protowire.AppendBytes(b, []byte(m.Writer))
	b = protowire.AppendVarint(b, m.WriterTerm)
	b = protowire.AppendVarint(b, m.End)
	b = protowire.AppendVarint(b, m.Base.Index)
	b = protowire.AppendVarint(b, m.Base.Term)
	b = protowire.AppendBytes(b, []byte(m.Base.Nonce))
	b = protowire.AppendVarint(b, uint64(m.Base.Parts))
	b = protowire.AppendVarint(b, m.Base.Bytes)
	b = protowire.AppendVarint(b, m.SegBytes)
	b = protowire.AppendVarint(b, uint64(len(m.Runs)))
	prev := m.Base.Index
	for _, r := range m.Runs {
		// Segments as (entries, repeat) pairs: a leader cuts them at
		// multiples of SnapshotThreshold, so a run is a pair or a few.
		var pairs [][2]uint64
		for _, last := range r.Lasts {
			d := last - prev
			prev = last
			if n := len(pairs); n > 0 && pairs[n-1][0] == d {
				pairs[n-1][1]++
				continue
			}
			pairs = append(pairs, [2]uint64{d, 1})
		}
		b = protowire.AppendVarint(b, r.Term)
		b = protowire.AppendBytes(b, []byte(r.Nonce))
		b = protowire.AppendVarint(b, uint64(len(pairs)))
		for _, p := range pairs {
			b = protowire.AppendVarint(b, p[0])
			b = protowire.AppendVarint(b, p[1])
		}
	}
	return frame(kindManifest, b)
}

// manifestDecoder reads the fields of a manifest's payload in order.
type manifestDecoder struct {
	b   []byte
	err error
}

func (d *manifestDecoder) varint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.err = fmt.Errorf("manifest: %s does not decode", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *manifestDecoder) bytes(what string) []byte {
	if d.err != nil {
		return nil
	}
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		d.err = fmt.Errorf("manifest: %s does not decode", what)
		return nil
	}
	d.b = d.b[n:]
	return v
}

// decodeManifest decodes and checks a manifest object.
func decodeManifest(b []byte) (*manifest, error) {
	p, err := unframe(kindManifest, b)
	if err != nil {
		return nil, err
	}
	d := &manifestDecoder{b: p}
	if v := d.varint("format"); d.err == nil && v != manifestFormat {
		return nil, fmt.Errorf("manifest format %d is not known (want %d)", v, manifestFormat)
	}
	m := &manifest{}
	m.Group = string(d.bytes("group"))
	m.Nonce = bytes.Clone(d.bytes("nonce"))
	m.Writer = string(d.bytes("writer"))
	m.WriterTerm = d.varint("writer term")
	m.End = d.varint("end index")
	m.Base.Index = d.varint("base index")
	m.Base.Term = d.varint("base term")
	m.Base.Nonce = string(d.bytes("base nonce"))
	parts := d.varint("base parts")
	m.Base.Bytes = d.varint("base bytes")
	m.SegBytes = d.varint("segment bytes")
	runs := d.varint("runs")
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case len(m.Nonce) == 0:
		return nil, errors.New("manifest has no nonce")
	case m.Base.Index == 0:
		return nil, errors.New("manifest has no base")
	case m.End < m.Base.Index:
		return nil, fmt.Errorf("manifest ends at %d, before its base at %d", m.End, m.Base.Index)
	case parts == 0 || parts > 1<<20:
		return nil, fmt.Errorf("manifest base has %d parts", parts)
	case !validHexName(m.Base.Nonce):
		return nil, fmt.Errorf("manifest base nonce %q is not lowercase hex", m.Base.Nonce)
	case runs > uint64(len(d.b)):
		return nil, fmt.Errorf("manifest has %d runs in %d bytes", runs, len(d.b))
	}
	m.Base.Parts = int(parts)
	prev, total := m.Base.Index, uint64(0)
	for range runs {
		r := segRun{Term: d.varint("run term"), Nonce: string(d.bytes("run nonce"))}
		n := d.varint("run length")
		if d.err != nil {
			return nil, d.err
		}
		if !validHexName(r.Nonce) {
			return nil, fmt.Errorf("manifest run nonce %q is not lowercase hex", r.Nonce)
		}
		if n == 0 || n > uint64(len(d.b)) {
			return nil, fmt.Errorf("manifest run of %d groups of segments in %d bytes", n, len(d.b))
		}
		for range n {
			delta, repeat := d.varint("segment length"), d.varint("segment count")
			if d.err != nil {
				return nil, d.err
			}
			if repeat == 0 || total+repeat > maxManifestSegments {
				return nil, fmt.Errorf("manifest has %d more segments after %d (at most %d)", repeat, total, maxManifestSegments)
			}
			if delta == 0 || delta > (m.End-prev)/repeat {
				return nil, fmt.Errorf("manifest segments after %d of %d entries each (%d of them) pass its end %d", prev, delta, repeat, m.End)
			}
			total += repeat
			for range repeat {
				prev += delta
				r.Lasts = append(r.Lasts, prev)
			}
		}
		m.Runs = append(m.Runs, r)
	}
	if prev != m.End {
		return nil, fmt.Errorf("manifest segments end at %d, not at its end %d", prev, m.End)
	}
	if len(d.b) > 0 {
		return nil, errors.New("manifest has bytes after its last segment")
	}
	return m, nil
}

// encodeSegment writes entries (consecutive indexes) as a segment.
func encodeSegment(entries []*rsmpb.Entry) ([]byte, error) {
	b := make([]byte, 0, 64+segmentSize(entries))
	b = append(b, frameMagic...)
	b = append(b, kindSegment)
	for _, e := range entries {
		at := len(b)
		b = append(b, 0, 0, 0, 0) // the entry's length, once known
		var err error
		if b, err = appendEntry(b, e); err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	}
	return b, nil
}

// segmentSize is about the bytes entries take in a segment.
func segmentSize(entries []*rsmpb.Entry) int {
	n := 0
	for _, e := range entries {
		n += 4 + frameHeader + proto.Size(e)
	}
	return n
}

// decodeSegment decodes a segment that must hold the entries first..last
// of group, each checked as a log entry read at its index is.
func decodeSegment(b []byte, group string, first, last uint64) ([]*rsmpb.Entry, error) {
	return decodeSegmentPar(b, group, first, last, 1, false)
}

// decodeSegmentPar is decodeSegment with the entries decoded by up to
// workers goroutines, each a run of consecutive entries: a cold start
// decodes as many bytes of segments as it applies, and decoding is most
// of a segment's cost. An error is the first entry's in index order. With
// borrow, the commands' data are parts of b (decodeEntryBorrowed), for
// machines that are all Borrowers.
func decodeSegmentPar(b []byte, group string, first, last uint64, workers int, borrow bool) ([]*rsmpb.Entry, error) {
	return decodeSegmentEach(b, group, first, last, workers, borrow, nil)
}

// decodeSegmentEach is decodeSegmentPar calling each, if not nil, with
// every entry decoded (the k-th of the segment) on the goroutine that
// decoded it.
func decodeSegmentEach(b []byte, group string, first, last uint64, workers int, borrow bool, each func(k int, e *rsmpb.Entry)) ([]*rsmpb.Entry, error) {
	frames, err := splitSegment(b, first, last)
	if err != nil {
		return nil, err
	}
	out := make([]*rsmpb.Entry, len(frames))
	errs := make([]error, len(frames))
	decodeRun := func(lo, hi int) {
		var in interner
		if borrow {
			in = interner{}
		}
		for k := lo; k < hi; k++ {
			i := first + uint64(k)
			var e *rsmpb.Entry
			var err error
			if borrow {
				e, err = decodeEntryBorrowed(frames[k], i, in)
			} else {
				e, err = decodeEntry(frames[k], i)
			}
			if err == nil && e.Group != "" && e.Group != group {
				err = fmt.Errorf("belongs to group %q", e.Group)
			}
			if err != nil {
				errs[k] = fmt.Errorf("segment entry %d: %w", i, err)
				return
			}
			out[k] = e
			if each != nil {
				each(k, e)
			}
		}
	}
	workers = max(1, min(workers, len(frames)))
	if workers == 1 {
		decodeRun(0, len(frames))
	} else {
		// Runs of equal bytes, not of equal counts: entries differ in size.
		var wg sync.WaitGroup
		per := (len(b) + workers - 1) / workers
		lo, size := 0, 0
		for k, f := range frames {
			size += len(f)
			if size >= per || k == len(frames)-1 {
				wg.Add(1)
				go func(lo, hi int) {
					defer wg.Done()
					decodeRun(lo, hi)
				}(lo, k+1)
				lo, size = k+1, 0
			}
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// splitSegment checks a segment's framing and cuts it into its entries,
// still encoded.
func splitSegment(b []byte, first, last uint64) ([][]byte, error) {
	if len(b) < len(frameMagic)+1 || string(b[:len(frameMagic)]) != frameMagic || b[len(frameMagic)] != kindSegment {
		if err := frameKindError(b, kindSegment); err != nil {
			return nil, err
		}
		return nil, errors.New("not a log segment")
	}
	if first == 0 || last < first {
		return nil, fmt.Errorf("segment range %d..%d", first, last)
	}
	rest := b[len(frameMagic)+1:]
	var out [][]byte
	for i := first; ; i++ {
		if len(rest) == 0 {
			if i != last+1 {
				return nil, fmt.Errorf("segment ends at %d, want %d", i-1, last)
			}
			return out, nil
		}
		if i > last {
			return nil, fmt.Errorf("segment has entries after %d", last)
		}
		if len(rest) < 4 {
			return nil, fmt.Errorf("segment ends inside the length of entry %d", i)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("segment ends inside entry %d", i)
		}
		out = append(out, rest[:n])
		rest = rest[n:]
	}
}

// chunkedStream decodes the chunked snapshot format from a stream (a
// base read part by part): the header first, then each machine's bytes,
// every chunk checked against its running CRC-32C before it is handed on.
// Machines are read in the header's order; a machine not asked for is
// skipped. The first decoding error is kept in err.
type chunkedStream struct {
	r    io.Reader
	head *rsmpb.Snapshot
	cur  int // machine being read; its end not yet reached
	crc  uint32
	buf  []byte
	left []byte
	err  error
}

// takeReader is a reader that can hand out its next n bytes where they
// lie in its memory (nil if they are not all there): a chunk inside a
// base part is checked and read in place, not copied out first. The bytes
// stay valid until the reader is read again.
type takeReader interface {
	io.Reader
	take(n int) []byte
}

// openChunked reads and checks the header of a chunked snapshot stream.
func openChunked(r io.Reader) (*chunkedStream, error) {
	var pre [frameHeader + 4]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("base header: %w", eofIsShort(err))
	}
	if string(pre[:len(frameMagic)]) != frameMagic || pre[len(frameMagic)] != kindChunked {
		if err := frameKindError(pre[:], kindChunked); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("base does not start with %q%c", frameMagic, kindChunked)
	}
	hlen := binary.BigEndian.Uint32(pre[len(frameMagic)+1:])
	hcrc := binary.BigEndian.Uint32(pre[len(frameMagic)+5:])
	var hb bytes.Buffer
	if n, err := hb.ReadFrom(io.LimitReader(r, int64(hlen))); err != nil || n != int64(hlen) {
		return nil, fmt.Errorf("base header of %d bytes: %w", hlen, eofIsShort(errors.Join(err, io.ErrUnexpectedEOF)))
	}
	s, err := decodeSnapshotHeader(hb.Bytes(), hcrc)
	if err != nil {
		return nil, err
	}
	return &chunkedStream{r: r, head: s, buf: make([]byte, snapChunkMax)}, nil
}

func eofIsShort(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (s *chunkedStream) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// next reads the next chunk of the current machine into left; io.EOF at
// the machine's end.
func (s *chunkedStream) next() error {
	if s.err != nil {
		return s.err
	}
	name := s.head.Machines[s.cur].Name
	var h [8]byte
	if _, err := io.ReadFull(s.r, h[:4]); err != nil {
		return s.fail(fmt.Errorf("snapshot ends inside machine %q: %w", name, eofIsShort(err)))
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 {
		s.cur++
		return io.EOF
	}
	if n > snapChunkMax {
		return s.fail(fmt.Errorf("chunk of %d bytes in machine %q, above %d", n, name, snapChunkMax))
	}
	if _, err := io.ReadFull(s.r, h[4:]); err != nil {
		return s.fail(fmt.Errorf("snapshot ends inside a chunk of machine %q: %w", name, eofIsShort(err)))
	}
	var chunk []byte
	if t, ok := s.r.(takeReader); ok {
		chunk = t.take(int(n))
	}
	if chunk == nil {
		chunk = s.buf[:n]
		if _, err := io.ReadFull(s.r, chunk); err != nil {
			return s.fail(fmt.Errorf("snapshot ends inside a chunk of machine %q: %w", name, eofIsShort(err)))
		}
	}
	s.crc = crc32.Update(s.crc, castagnoli, chunk)
	if want := binary.BigEndian.Uint32(h[4:]); s.crc != want {
		return s.fail(fmt.Errorf("checksum mismatch in machine %q: computed %08x, stored %08x", name, s.crc, want))
	}
	s.left = chunk
	return nil
}

// skip reads to the end of the current machine.
func (s *chunkedStream) skip() error {
	s.left = nil
	for at := s.cur; s.cur == at; {
		if err := s.next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// machine returns a reader of machine i's bytes; i never goes back.
func (s *chunkedStream) machine(i int) (io.Reader, error) {
	if i < s.cur || i >= len(s.head.Machines) {
		return nil, fmt.Errorf("rsm: machine %d read out of order", i)
	}
	for s.cur < i {
		if err := s.skip(); err != nil {
			return nil, err
		}
	}
	return machineStream{s: s, i: i}, nil
}

// finish reads what is left and checks that nothing follows the last
// machine.
func (s *chunkedStream) finish() error {
	for s.cur < len(s.head.Machines) {
		if err := s.skip(); err != nil {
			return err
		}
	}
	var b [1]byte
	if n, _ := io.ReadFull(s.r, b[:]); n > 0 {
		return s.fail(errors.New("snapshot has bytes after its last machine"))
	}
	return s.err
}

type machineStream struct {
	s *chunkedStream
	i int
}

func (m machineStream) Read(p []byte) (int, error) {
	s := m.s
	if s.cur != m.i {
		return 0, io.EOF
	}
	for len(s.left) == 0 {
		if err := s.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.left)
	s.left = s.left[n:]
	return n, nil
}
