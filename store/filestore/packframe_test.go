package filestore

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// testRec is a record of a frame that a test writes by hand.
type testRec struct {
	key   string
	value []byte
	del   bool
}

// testFrameHeader is the length of a frame's header.
const testFrameHeader = 16

var testCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeFrame encodes recs as one frame of a pack's segment, written from
// the format's description (store/filestore/internal/pack, frame.go) and
// not with the package's encoder: a change of the format on disk fails
// the tests that append such frames.
//
//	frame:  magic u32 | crc u32 | length u32 | count u32 | records
//	record: kind u8 | 0 u8 | key length u16 | value length u32 | value crc u32 | key | value
func encodeFrame(recs ...testRec) []byte {
	b := make([]byte, testFrameHeader)
	for _, r := range recs {
		kind := byte(1)
		if r.del {
			kind = 2
		}
		crc := crc32.Update(crc32.Update(0, testCastagnoli, []byte(r.key)), testCastagnoli, r.value)
		b = append(b, kind, 0)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.key)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.value)))
		b = binary.LittleEndian.AppendUint32(b, crc)
		b = append(b, r.key...)
		b = append(b, r.value...)
	}
	binary.LittleEndian.PutUint32(b[0:], 0x6b70_6e74) // "tnpk"
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(recs)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], testCastagnoli))
	return b
}

// frameLens returns the lengths of the whole frames that b holds, end to
// end, checking each one's magic number and checksum.
func frameLens(t *testing.T, b []byte) []int {
	t.Helper()
	var lens []int
	for len(b) > 0 {
		if len(b) < testFrameHeader || binary.LittleEndian.Uint32(b) != 0x6b70_6e74 {
			t.Fatalf("frame %d: no frame's header", len(lens))
		}
		n := int(binary.LittleEndian.Uint32(b[8:]))
		if n < testFrameHeader || n > len(b) || crc32.Checksum(b[8:n], testCastagnoli) != binary.LittleEndian.Uint32(b[4:]) {
			t.Fatalf("frame %d: a length or checksum that does not hold", len(lens))
		}
		lens = append(lens, n)
		b = b[n:]
	}
	return lens
}
