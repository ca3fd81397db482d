package rsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

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
	kindChunked  = 'C'
	snapChunkMax = 64 << 10
)

// captured is the state taken under the apply lock for a snapshot: the
// metadata and each machine's state, serialized later off the apply path.
type captured struct {
	head  *rsmpb.Snapshot // Machines hold names only
	views []StateView     // one per head.Machines, in order
}

// bytesView is the state of a machine without Capturer, taken by Snapshot.
type bytesView []byte

func (b bytesView) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// storedSnapshot is a decoded snapshot object: its metadata and, for each
// of its machines, the chunks of its bytes (slices of the object read); or
// for a manifest, its end index and writer, the state to be read from the
// objects it references (groupStore.loadManifest).
type storedSnapshot struct {
	*rsmpb.Snapshot
	parts   [][][]byte // one per Machines, in order
	man     *manifest  // the incremental format: the state is in the objects it references
	version string     // the snapshot key's version it was read at
}

// machineReader reads machine i's bytes.
func (s *storedSnapshot) machineReader(i int) io.Reader {
	rs := make([]io.Reader, len(s.parts[i]))
	for j, p := range s.parts[i] {
		rs[j] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}

// fromSnapshot wraps a snapshot whose machines carry their bytes.
func fromSnapshot(s *rsmpb.Snapshot) *storedSnapshot {
	st := &storedSnapshot{Snapshot: s, parts: make([][][]byte, len(s.Machines))}
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
	c.crc = crc32.Update(c.crc, castagnoli, c.buf)
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

// encodeCaptured writes c in the chunked format to w.
func encodeCaptured(w io.Writer, c *captured) error {
	if len(c.views) != len(c.head.Machines) {
		return fmt.Errorf("rsm: %d machine states for %d machines", len(c.views), len(c.head.Machines))
	}
	h, err := proto.Marshal(c.head)
	if err != nil {
		return err
	}
	pre := make([]byte, 0, frameHeader+4+len(h))
	pre = append(pre, frameMagic...)
	pre = append(pre, kindChunked)
	pre = binary.BigEndian.AppendUint32(pre, uint32(len(h)))
	pre = binary.BigEndian.AppendUint32(pre, crc32.Checksum(h, castagnoli))
	pre = append(pre, h...)
	if _, err := w.Write(pre); err != nil {
		return err
	}
	cw := &chunkWriter{w: w, buf: make([]byte, 0, snapChunkMax)}
	for i, v := range c.views {
		if _, err := v.WriteTo(cw); err != nil {
			return fmt.Errorf("rsm: snapshot of machine %q: %w", c.head.Machines[i].Name, err)
		}
		if err := cw.end(); err != nil {
			return err
		}
	}
	return nil
}

// decodeStoredSnapshot decodes a snapshot object of either format. Every
// checksum is verified here, before any machine reads its bytes.
func decodeStoredSnapshot(b []byte) (*storedSnapshot, error) {
	if len(b) > len(frameMagic) && b[len(frameMagic)] != kindChunked {
		s, err := decodeSnapshot(b)
		if err != nil {
			return nil, err
		}
		return fromSnapshot(s), nil
	}
	if len(b) < frameHeader+4 {
		return nil, fmt.Errorf("%d bytes is shorter than the %d-byte header", len(b), frameHeader+4)
	}
	if string(b[:len(frameMagic)]) != frameMagic {
		if err := frameKindError(b, kindChunked); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("bad magic %q (want %q)", b[:len(frameMagic)], frameMagic)
	}
	hlen := binary.BigEndian.Uint32(b[len(frameMagic)+1:])
	hcrc := binary.BigEndian.Uint32(b[len(frameMagic)+5:])
	rest := b[frameHeader+4:]
	if uint64(hlen) > uint64(len(rest)) {
		return nil, fmt.Errorf("snapshot header of %d bytes in %d", hlen, len(rest))
	}
	h := rest[:hlen]
	rest = rest[hlen:]
	s, err := decodeSnapshotHeader(h, hcrc)
	if err != nil {
		return nil, err
	}
	st := &storedSnapshot{Snapshot: s, parts: make([][][]byte, len(s.Machines))}
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
			crc = crc32.Update(crc, castagnoli, chunk)
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
	if got := crc32.Checksum(h, castagnoli); got != hcrc {
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
	if err := checkSnapshot(s); err != nil {
		return nil, err
	}
	return s, nil
}
