// Package record frames the objects an rsm group writes to the store and
// decodes them: log entries and snapshots as checksummed protobuf frames,
// the kind byte that tells one frame from another, and the error an object
// is refused with (CorruptError), which package rsm returns as its own.
//
// A frame is magic "TNR1", one kind byte, the CRC-32C (Castagnoli) of the
// payload, big-endian, then the payload. Every decoder here checks what it
// decodes; none trusts bytes from the store.
package record

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tenure-io/tenure/internal/recordkind"
)

// The frame's magic and header, and the kinds of frame.
const (
	Magic        = "TNR1"
	Header       = len(Magic) + 1 + 4
	KindEntry    = 'E' // a log entry (protobuf Entry)
	KindSnapshot = 'S' // a snapshot of the first format (protobuf Snapshot)
	KindChunked  = 'C' // a chunked snapshot, or the start of a base (package snapshot)
	KindManifest = 'M' // a snapshot manifest (package snapshot)
	KindSegment  = 'G' // a log segment (package snapshot)
)

// Castagnoli is the CRC-32C table of every checksum tenure writes.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame returns payload behind a header of the given kind.
func Frame(kind byte, payload []byte) []byte {
	b := make([]byte, Header+len(payload))
	copy(b, Magic)
	b[len(Magic)] = kind
	binary.BigEndian.PutUint32(b[len(Magic)+1:], crc32.Checksum(payload, Castagnoli))
	copy(b[Header:], payload)
	return b
}

// kindNames names the kinds of frame, for errors.
var kindNames = map[byte]string{
	KindEntry: "log entry", KindSnapshot: "snapshot", KindChunked: "chunked snapshot or base part",
	KindManifest: "snapshot manifest", KindSegment: "log segment",
}

// KindError says that b, which does not start with want's frame, is
// another kind of object: a frame of another kind, or a JSON record (a
// lock, a lease record, another program's), each matching
// ErrForeignRecord; nil when b is neither (corrupt bytes, left to the
// caller).
func KindError(b []byte, want byte) error {
	if len(b) > len(Magic) && string(b[:len(Magic)]) == Magic && b[len(Magic)] != want {
		got, ok := kindNames[b[len(Magic)]]
		if !ok {
			got = fmt.Sprintf("frame of kind %q, which this version does not know,", b[len(Magic)])
		}
		return fmt.Errorf("%w: it is a %s, not a %s", ErrForeignRecord, got, kindNames[want])
	}
	if d := recordkind.Describe(b); d != "" {
		return fmt.Errorf("%w: %s, not a %s", ErrForeignRecord, d, kindNames[want])
	}
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) {
		// Only the start was read (a base's header), or it is cut short.
		return fmt.Errorf("%w: it starts as a JSON object, not as a %s", ErrForeignRecord, kindNames[want])
	}
	return nil
}

// Unframe returns the payload of a frame of the given kind, checked.
func Unframe(kind byte, b []byte) ([]byte, error) {
	if len(b) < Header || string(b[:len(Magic)]) != Magic || b[len(Magic)] != kind {
		if err := KindError(b, kind); err != nil {
			return nil, err
		}
	}
	if len(b) < Header {
		return nil, fmt.Errorf("%d bytes is shorter than the %d-byte header", len(b), Header)
	}
	if string(b[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("bad magic %q (want %q)", b[:len(Magic)], Magic)
	}
	payload := b[Header:]
	if got, want := crc32.Checksum(payload, Castagnoli), binary.BigEndian.Uint32(b[len(Magic)+1:]); got != want {
		return nil, fmt.Errorf("checksum mismatch: computed %08x, stored %08x", got, want)
	}
	return payload, nil
}

// NewNonce returns 12 random bytes: every write carries one, so no two
// writes have the same bytes (no ABA on stores whose versions are ETags).
func NewNonce() []byte {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return b
}
