package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// The snapshot object comes in two formats, told apart by the frame's kind
// byte:
//
//	'S' (written before streaming): one frame holding a protobuf Snapshot
//	    with every machine's bytes in it. Still read.
//	'C' (chunked, written now): magic "TNR1", 'C', then the header: its
//	    length and CRC-32C (uint32 big-endian each) and a protobuf Snapshot
//	    whose machines carry names only; then each machine's bytes, in the
//	    header's order, as chunks (uint32 length n > 0, uint32 running
//	    CRC-32C of every machine byte of the object up to the chunk's end,
//	    n bytes), each machine ended by a zero length; nothing after the
//	    last.
//
// The chunked format is written as the machines serialize, without holding
// a machine's state as one slice besides the object, and every chunk is
// checked before a machine reads it.
const (
	snapChunkMax = 64 << 10
)

// Captured is the state taken under the apply lock for a snapshot: the
// metadata and each machine's state, serialized later off the apply path.
type Captured struct {
	Head  *rsmpb.Snapshot // Machines hold names only
	Views []io.WriterTo   // one per Head.Machines, in order (rsm.StateView)
}

// BytesView is the state of a machine without Capturer, taken by Snapshot.
type BytesView []byte

func (b BytesView) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// Stored is a decoded snapshot object: its metadata and, for each
// of its machines, the chunks of its bytes (slices of the object read); or
// for a manifest, its end index and writer, the state to be read from the
// objects it references (Store.Load).
type Stored struct {
	*rsmpb.Snapshot
	parts   [][][]byte // one per Machines, in order
	Man     *Manifest  // the incremental format: the state is in the objects it references
	Version string     // the snapshot key's version it was read at
}

// MachineReader reads machine i's bytes.
func (s *Stored) MachineReader(i int) io.Reader {
	rs := make([]io.Reader, len(s.parts[i]))
	for j, p := range s.parts[i] {
		rs[j] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}

// FromSnapshot wraps a snapshot whose machines carry their bytes.
func FromSnapshot(s *rsmpb.Snapshot) *Stored {
	st := &Stored{Snapshot: s, parts: make([][][]byte, len(s.Machines))}
	for i, m := range s.Machines {
		st.parts[i] = [][]byte{m.Data}
	}
	return st
}

// chunkWriter frames what is written to it into chunks.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && c.err == nil {
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf = c.buf[:len(c.buf)+k]
		p = p[k:]
		if len(c.buf) == cap(c.buf) {
			c.flush()
		}
	}
	if c.err != nil {
		return 0, c.err
	}
	return n, nil
}

func (c *chunkWriter) flush() {
	if len(c.buf) == 0 || c.err != nil {
		return
	}
	c.crc = crc32.Update(c.crc, record.Castagnoli, c.buf)
	var h [8]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(c.buf)))
	binary.BigEndian.PutUint32(h[4:], c.crc)
	if _, c.err = c.w.Write(h[:]); c.err == nil {
		_, c.err = c.w.Write(c.buf)
	}
	c.buf = c.buf[:0]
}

// end closes the current machine's bytes.
func (c *chunkWriter) end() error {
	c.flush()
	if c.err == nil {
		_, c.err = c.w.Write(make([]byte, 4))
	}
	return c.err
}

// Encode writes c in the chunked format to w: a base's bytes (a base is
// this stream cut into parts), or a snapshot object of the earlier format.
func Encode(w io.Writer, c *Captured) error {
	if len(c.Views) != len(c.Head.Machines) {
		return fmt.Errorf("rsm: %d machine states for %d machines", len(c.Views), len(c.Head.Machines))
	}
	h, err := proto.Marshal(c.Head)
	if err != nil {
		return err
	}
	pre := make([]byte, 0, record.Header+4+len(h))
	pre = append(pre, record.Magic...)
	pre = append(pre, record.KindChunked)
	pre = binary.BigEndian.AppendUint32(pre, uint32(len(h)))
	pre = binary.BigEndian.AppendUint32(pre, crc32.Checksum(h, record.Castagnoli))
	pre = append(pre, h...)
	if _, err := w.Write(pre); err != nil {
		return err
	}
	cw := &chunkWriter{w: w, buf: make([]byte, 0, snapChunkMax)}
	for i, v := range c.Views {
		if _, err := v.WriteTo(cw); err != nil {
			return fmt.Errorf("rsm: snapshot of machine %q: %w", c.Head.Machines[i].Name, err)
		}
		if err := cw.end(); err != nil {
			return err
		}
	}
	return nil
}

// Decode decodes a snapshot object of either earlier format. Every
// checksum is verified here, before any machine reads its bytes.
func Decode(b []byte) (*Stored, error) {
	if len(b) > len(record.Magic) && b[len(record.Magic)] != record.KindChunked {
		s, err := record.DecodeSnapshot(b)
		if err != nil {
			return nil, err
		}
		return FromSnapshot(s), nil
	}
	if len(b) < record.Header+4 {
		return nil, fmt.Errorf("%d bytes is shorter than the %d-byte header", len(b), record.Header+4)
	}
	if string(b[:len(record.Magic)]) != record.Magic {
		if err := record.KindError(b, record.KindChunked); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("bad magic %q (want %q)", b[:len(record.Magic)], record.Magic)
	}
	hlen := binary.BigEndian.Uint32(b[len(record.Magic)+1:])
	hcrc := binary.BigEndian.Uint32(b[len(record.Magic)+5:])
	rest := b[record.Header+4:]
	if uint64(hlen) > uint64(len(rest)) {
		return nil, fmt.Errorf("snapshot header of %d bytes in %d", hlen, len(rest))
	}
	h := rest[:hlen]
	rest = rest[hlen:]
	s, err := decodeSnapshotHeader(h, hcrc)
	if err != nil {
		return nil, err
	}
	st := &Stored{Snapshot: s, parts: make([][][]byte, len(s.Machines))}
	var crc uint32
	for i, m := range s.Machines {
		for {
			if len(rest) < 4 {
				return nil, fmt.Errorf("snapshot ends inside machine %q", m.Name)
			}
			n := binary.BigEndian.Uint32(rest)
			rest = rest[4:]
			if n == 0 {
				break
			}
			if len(rest) < 4 || uint64(n) > uint64(len(rest)-4) {
				return nil, fmt.Errorf("snapshot ends inside a chunk of machine %q", m.Name)
			}
			want := binary.BigEndian.Uint32(rest)
			chunk := rest[4 : 4+n]
			rest = rest[4+n:]
			crc = crc32.Update(crc, record.Castagnoli, chunk)
			if crc != want {
				return nil, fmt.Errorf("checksum mismatch in machine %q: computed %08x, stored %08x", m.Name, crc, want)
			}
			st.parts[i] = append(st.parts[i], chunk)
		}
	}
	if len(rest) > 0 {
		return nil, errors.New("snapshot has bytes after its last machine")
	}
	return st, nil
}

// decodeSnapshotHeader checks and decodes the header of the chunked
// format: its checksum, its protobuf, and that it carries no machine's
// bytes (they follow it in chunks).
func decodeSnapshotHeader(h []byte, hcrc uint32) (*rsmpb.Snapshot, error) {
	if got := crc32.Checksum(h, record.Castagnoli); got != hcrc {
		return nil, fmt.Errorf("snapshot header checksum mismatch: computed %08x, stored %08x", got, hcrc)
	}
	s := new(rsmpb.Snapshot)
	if err := proto.Unmarshal(h, s); err != nil {
		return nil, fmt.Errorf("snapshot header does not decode: %w", err)
	}
	for _, m := range s.Machines {
		if len(m.Data) > 0 {
			return nil, fmt.Errorf("snapshot header carries the bytes of machine %q", m.Name)
		}
	}
	if err := record.CheckSnapshot(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Stream decodes the chunked snapshot format from a stream (a
// base read part by part): the header first, then each machine's bytes,
// every chunk checked against its running CRC-32C before it is handed on.
// Machines are read in the header's order; a machine not asked for is
// skipped. The first decoding error is kept in err.
type Stream struct {
	r    io.Reader
	Head *rsmpb.Snapshot
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
func openChunked(r io.Reader) (*Stream, error) {
	var pre [record.Header + 4]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("base header: %w", eofIsShort(err))
	}
	if string(pre[:len(record.Magic)]) != record.Magic || pre[len(record.Magic)] != record.KindChunked {
		if err := record.KindError(pre[:], record.KindChunked); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("base does not start with %q%c", record.Magic, record.KindChunked)
	}
	hlen := binary.BigEndian.Uint32(pre[len(record.Magic)+1:])
	hcrc := binary.BigEndian.Uint32(pre[len(record.Magic)+5:])
	var hb bytes.Buffer
	if n, err := hb.ReadFrom(io.LimitReader(r, int64(hlen))); err != nil || n != int64(hlen) {
		return nil, fmt.Errorf("base header of %d bytes: %w", hlen, eofIsShort(errors.Join(err, io.ErrUnexpectedEOF)))
	}
	s, err := decodeSnapshotHeader(hb.Bytes(), hcrc)
	if err != nil {
		return nil, err
	}
	return &Stream{r: r, Head: s, buf: make([]byte, snapChunkMax)}, nil
}

func eofIsShort(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (s *Stream) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// next reads the next chunk of the current machine into left; io.EOF at
// the machine's end.
func (s *Stream) next() error {
	if s.err != nil {
		return s.err
	}
	name := s.Head.Machines[s.cur].Name
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
	s.crc = crc32.Update(s.crc, record.Castagnoli, chunk)
	if want := binary.BigEndian.Uint32(h[4:]); s.crc != want {
		return s.fail(fmt.Errorf("checksum mismatch in machine %q: computed %08x, stored %08x", name, s.crc, want))
	}
	s.left = chunk
	return nil
}

// skip reads to the end of the current machine.
func (s *Stream) skip() error {
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
func (s *Stream) Machine(i int) (io.Reader, error) {
	if i < s.cur || i >= len(s.Head.Machines) {
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
func (s *Stream) Finish() error {
	for s.cur < len(s.Head.Machines) {
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
	s *Stream
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
