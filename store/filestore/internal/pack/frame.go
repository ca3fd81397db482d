package pack

import (
	"encoding/binary"
	"hash/crc32"
)

// A pack's segment is a sequence of frames, each the records of one batch
// of writes, written by one pwrite(2) and made durable by one fdatasync(2):
//
//	frame:  magic u32 | crc u32 | length u32 | count u32 | records
//	record: kind u8 | 0 u8 | key length u16 | value length u32 | value crc u32 | key | value
//
// Integers are little-endian. The frame's crc (CRC-32C) covers everything
// after it, to the frame's end; its length counts the whole frame, header
// included. A record's value crc is of its key and value, checked again
// whenever the value is read back.
const (
	frameMagic  = 0x6b70_6e74 // "tnpk"
	frameHeader = 16
	recHeader   = 12

	recPut    = 1
	recDelete = 2

	// ValueMax bounds a value kept in a pack: a frame's length is a
	// u32, and a batch is held in memory whole.
	ValueMax = 256 << 20
	// frameMax bounds a frame's length: the largest value, plus the
	// records a batch of small ones holds.
	frameMax = ValueMax + 16<<20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// packRec is one record of a frame: a put of value (a slice of the frame's
// bytes) under key, or the key's delete. off is its offset in the frame.
type packRec struct {
	del     bool
	key     string
	value   []byte
	crc     uint32
	off     int
	version string // of value, if known (a writer's own records)
}

// appendFrame encodes recs as one frame after b, and sets their offsets
// in it and their checksums.
func appendFrame(b []byte, recs []packRec) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	for i := range recs {
		r := &recs[i]
		r.off = len(b) - start
		r.crc = recCRC(r.key, r.value)
		kind := byte(recPut)
		if r.del {
			kind = recDelete
		}
		b = append(b, kind, 0)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.key)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.value)))
		b = binary.LittleEndian.AppendUint32(b, r.crc)
		b = append(b, r.key...)
		b = append(b, r.value...)
	}
	h := b[start:]
	binary.LittleEndian.PutUint32(h[0:], frameMagic)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(h)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(recs)))
	binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(h[8:], castagnoli))
	return b
}

func recCRC(key string, value []byte) uint32 {
	c := crc32.Update(0, castagnoli, []byte(key))
	return crc32.Update(c, castagnoli, value)
}

// frameStatus is what decodeFrame found at the start of its bytes.
type frameStatus int

const (
	frameOK    frameStatus = iota
	frameShort             // the bytes end inside the frame (or before its header)
	frameBad               // not a frame: a wrong magic, length or checksum, or bad records
)

// decodeFrame decodes the frame at the start of b. With frameOK it
// returns its records (their values are slices of b) and its length.
// With frameShort, n is the frame's length if its header could be read
// (0 if not). With frameBad, n is the length the header claims (0 if it
// claims none that could be a frame's), and err says what is wrong.
func decodeFrame(b []byte, validKey func(string) bool) (recs []packRec, n int, st frameStatus, why string) {
	if len(b) < frameHeader {
		return nil, 0, frameShort, ""
	}
	if binary.LittleEndian.Uint32(b[0:]) != frameMagic {
		return nil, 0, frameBad, "no frame's magic number"
	}
	n = int(binary.LittleEndian.Uint32(b[8:]))
	count := int(binary.LittleEndian.Uint32(b[12:]))
	if n < frameHeader || n > frameMax || count > (n-frameHeader)/recHeader {
		return nil, 0, frameBad, "a frame length or record count out of range"
	}
	if len(b) < n {
		return nil, n, frameShort, ""
	}
	f := b[:n]
	if crc32.Checksum(f[8:], castagnoli) != binary.LittleEndian.Uint32(f[4:]) {
		return nil, n, frameBad, "a frame's checksum does not match its bytes"
	}
	recs = make([]packRec, 0, count)
	off := frameHeader
	for range count {
		if n-off < recHeader {
			return nil, n, frameBad, "a record past its frame's end"
		}
		h := f[off:]
		kind, klen := h[0], int(binary.LittleEndian.Uint16(h[2:]))
		vlen := int(binary.LittleEndian.Uint32(h[4:]))
		crc := binary.LittleEndian.Uint32(h[8:])
		end := off + recHeader + klen + vlen
		if h[1] != 0 || vlen > ValueMax || end > n || end < off {
			return nil, n, frameBad, "a record's lengths out of range"
		}
		key := string(f[off+recHeader : off+recHeader+klen])
		value := f[off+recHeader+klen : end]
		switch {
		case kind != recPut && kind != recDelete:
			return nil, n, frameBad, "a record of an unknown kind"
		case kind == recDelete && vlen != 0:
			return nil, n, frameBad, "a delete record with a value"
		case !validKey(key):
			return nil, n, frameBad, "a record with an invalid key"
		case recCRC(key, value) != crc:
			return nil, n, frameBad, "a record's checksum does not match its bytes"
		}
		recs = append(recs, packRec{del: kind == recDelete, key: key, value: value, crc: crc, off: off})
		off = end
	}
	if off != n {
		return nil, n, frameBad, "bytes after a frame's last record"
	}
	return recs, n, frameOK, ""
}
