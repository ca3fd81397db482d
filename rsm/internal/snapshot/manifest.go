package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenure-io/tenure/rsm/internal/record"
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
// A base is the byte stream of a chunked snapshot (format.go) cut at
// part boundaries. A segment is magic "TNR1", kind 'G', then each log
// entry of its range, in index order, as a uint32 big-endian length and
// the entry exactly as the log stores it (framed, with its own CRC-32C).
// The term in a name is its writer's: garbage collection never deletes
// an object of a term above its own (a newer leader's object may be about
// to be referenced).
const (

	// basePartMax bounds a base part: the store takes a value whole, so
	// the state is never held whole for a snapshot.
	basePartMax = 8 << 20
	// segmentMax bounds a segment's bytes; a range of entries larger than
	// this is written as several segments.
	segmentMax = 8 << 20
	// BaseFactor: a new base is written instead of a segment once the
	// segments' bytes reach baseFactor times the base's. Store bytes per
	// command ≈ log + segment + base/baseFactor; a cold start reads up to
	// (1 + baseFactor) × the base (docs/rsm.md, "What it costs").
	BaseFactor = 3
	// QuietBaseFactor: a leader whose group is quiet (no command for an
	// idle period) writes a new base once the segments reach
	// quietBaseFactor times the base (window.quietBaseDue), so that a
	// restart after a busy period reads the base alone. Store bytes per
	// command stay at most log + segment + base/quietBaseFactor.
	QuietBaseFactor = 1.5
	// MaxSegments bounds the segments of a manifest: a base is written
	// instead of another segment beyond it, which bounds a cold start's
	// requests. A decoded manifest may hold up to maxManifestSegments.
	MaxSegments         = 1 << 16
	maxManifestSegments = 1 << 20
	// manifestFormat is the version of the manifest's encoding.
	manifestFormat = 1
)

// Manifest is the snapshot object of the incremental format.
type Manifest struct {
	Group      string
	Nonce      []byte
	Writer     string
	WriterTerm uint64
	End        uint64 // the state it describes is the state after End
	Base       BaseRef
	SegBytes   uint64   // the segments' bytes, all together
	Runs       []SegRun // the segments, in index order, grouped by writer
}

// BaseRef names a base: the state after Index, in Parts parts.
type BaseRef struct {
	Index uint64
	Term  uint64 // its writer's term
	Nonce string // lowercase hex
	Parts int
	Bytes uint64
}

// SegRun is segments written by one leadership, consecutive in the log:
// the first starts after the previous run's (or the base's) last index.
type SegRun struct {
	Term  uint64
	Nonce string   // lowercase hex, one per leadership
	Lasts []uint64 // each segment's last index, increasing
}

// segRef is one segment: its key and the indexes it covers.
type segRef struct {
	key         string
	first, last uint64
}

func basePartKey(group string, b BaseRef, part int) string {
	return fmt.Sprintf("%s/%sb%020d-%020d-%s/%05d", group, Dir, b.Index, b.Term, b.Nonce, part)
}

func segmentKey(group string, term uint64, nonce string, last uint64) string {
	return fmt.Sprintf("%s/%ss%020d-%s-%020d", group, Dir, term, nonce, last)
}

// snapObjectTerm returns the writer's term in the name of an object under
// {group}/snap/, or false if the name is not one this package writes.
func snapObjectTerm(group, key string) (uint64, bool) {
	p := group + "/" + Dir
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

// BaseKeys returns the keys of m's base parts.
func (m *Manifest) BaseKeys() []string {
	keys := make([]string, m.Base.Parts)
	for i := range keys {
		keys[i] = basePartKey(m.Group, m.Base, i)
	}
	return keys
}

// SegmentKeys returns the keys of m's segments, in index order.
func (m *Manifest) SegmentKeys() []string {
	var keys []string
	for _, s := range m.segments() {
		keys = append(keys, s.key)
	}
	return keys
}

// segments returns m's segments in index order.
func (m *Manifest) segments() []segRef {
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

// Objects returns the keys of every object m references.
func (m *Manifest) Objects() map[string]bool {
	keep := map[string]bool{}
	if m == nil {
		return keep
	}
	for _, k := range m.BaseKeys() {
		keep[k] = true
	}
	for _, s := range m.segments() {
		keep[s.key] = true
	}
	return keep
}

// withSegment returns a copy of m extended by the segment of its writer
// (term, nonce) that ends at last, of size bytes.
func (m *Manifest) withSegment(term uint64, nonce string, last uint64, size int) *Manifest {
	c := *m
	c.Runs = make([]SegRun, len(m.Runs))
	for i, r := range m.Runs {
		c.Runs[i] = SegRun{Term: r.Term, Nonce: r.Nonce, Lasts: append([]uint64(nil), r.Lasts...)}
	}
	if n := len(c.Runs); n == 0 || c.Runs[n-1].Term != term || c.Runs[n-1].Nonce != nonce {
		c.Runs = append(c.Runs, SegRun{Term: term, Nonce: nonce})
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

func encodeManifest(m *Manifest) []byte {
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
	return record.Frame(record.KindManifest, b)
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

// DecodeManifest decodes and checks a manifest object.
func DecodeManifest(b []byte) (*Manifest, error) {
	p, err := record.Unframe(record.KindManifest, b)
	if err != nil {
		return nil, err
	}
	d := &manifestDecoder{b: p}
	if v := d.varint("format"); d.err == nil && v != manifestFormat {
		return nil, fmt.Errorf("manifest format %d is not known (want %d)", v, manifestFormat)
	}
	m := &Manifest{}
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
		r := SegRun{Term: d.varint("run term"), Nonce: string(d.bytes("run nonce"))}
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

func (m *Manifest) Stats() Stats {
	if m == nil {
		return Stats{}
	}
	n := 0
	for _, r := range m.Runs {
		n += len(r.Lasts)
	}
	return Stats{Base: m.Base.Bytes, Segs: m.SegBytes, Count: n}
}
