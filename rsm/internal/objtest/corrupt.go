package objtest

import (
	"bytes"

	"github.com/tenure-io/tenure/rsm/internal/record"
)

// Corruptions returns damaged copies of a valid encoding: truncated, a flipped
// byte in the header and in the payload, extended, emptied.
func Corruptions(b []byte) [][]byte {
	flip := func(i int) []byte {
		c := bytes.Clone(b)
		c[i%len(c)] ^= 0x5a
		return c
	}
	return [][]byte{
		nil,
		b[:len(b)/2],
		b[:len(b)-1],
		flip(0),
		flip(len(record.Magic)),
		flip(record.Header - 1),
		flip(len(b) - 1),
		append(bytes.Clone(b), 0),
	}
}
