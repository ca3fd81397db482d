package route53store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/tenure-io/tenure/store"
)

// Limits on a TXT record's value as Route 53 accepts it.
const (
	// MaxValueChars is the longest Value element of a TXT record that
	// Route 53 accepts: 4,000 characters, quotes and spaces included.
	MaxValueChars = 4000
	// maxStringLen is the longest character-string of a TXT record.
	maxStringLen = 255
)

// recordMagic starts the payload of every record the driver writes: the
// format and its version.
const recordMagic = "tnr1:"

// nonceLen is the length of the record's nonce: 12 random bytes in
// URL-safe base64.
const nonceLen = 16

// payloadOverhead is what a payload holds besides the value's base64:
// "tnr1:" NONCE ":".
const payloadOverhead = len(recordMagic) + nonceLen + 1

// valueChars returns the length of the TXT Value element that holds a
// payload of n characters: strings of at most 255 characters, each quoted,
// separated by one space.
func valueChars(n int) int {
	strs := max(1, (n+maxStringLen-1)/maxStringLen)
	return n + 3*strs - 1
}

// maxValueSize computes MaxValueSize: the largest value, in bytes, whose
// record fits in MaxValueChars.
func maxValueSize() int {
	n := 0
	for valueChars(payloadOverhead+base64.StdEncoding.EncodedLen(n+1)) <= MaxValueChars {
		n++
	}
	return n
}

// MaxValueSize is the largest value, in bytes, that Put accepts: its
// base64, with the record's header and nonce, must fit in one TXT value of
// MaxValueChars characters.
const MaxValueSize = 2946

// encodeValue returns the TXT Value element for data: the payload
// "tnr1:" NONCE ":" BASE64(data), cut into quoted strings of 255
// characters. The payload has no space, quote or backslash, so no DNS tool
// splits or escapes it, and owner IDs with spaces round-trip. The nonce
// makes every write's record, and so its version, new, even for the same
// bytes.
func encodeValue(data []byte) string {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	payload := recordMagic + base64.RawURLEncoding.EncodeToString(nonce[:]) + ":" + base64.StdEncoding.EncodeToString(data)
	var b strings.Builder
	b.Grow(valueChars(len(payload)))
	for i := 0; i == 0 || i < len(payload); i += maxStringLen {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('"')
		b.WriteString(payload[i:min(i+maxStringLen, len(payload))])
		b.WriteByte('"')
	}
	return b.String()
}

// errNotOurs: a TXT record at a key's name that the driver cannot decode,
// damaged or written by another program. It matches store.ErrCorrupt: the
// key's value cannot be read until the record is repaired or removed.
var errNotOurs error = notOurs{}

type notOurs struct{}

func (notOurs) Error() string        { return "not a record written by tenure" }
func (notOurs) Is(target error) bool { return target == store.ErrCorrupt }

// decodeValue returns the data held in a TXT Value element that
// encodeValue produced.
func decodeValue(value string) ([]byte, error) {
	var payload strings.Builder
	for i := 0; ; i++ {
		if i > 0 {
			var ok bool
			if value, ok = strings.CutPrefix(value, " "); !ok {
				return nil, errNotOurs
			}
		}
		rest, ok := strings.CutPrefix(value, `"`)
		if !ok {
			return nil, errNotOurs
		}
		end := strings.IndexAny(rest, `"\`)
		if end < 0 || rest[end] != '"' {
			return nil, errNotOurs
		}
		payload.WriteString(rest[:end])
		value = rest[end+1:]
		if value == "" {
			break
		}
	}
	p, ok := strings.CutPrefix(payload.String(), recordMagic)
	if !ok || len(p) < nonceLen+1 || p[nonceLen] != ':' {
		return nil, errNotOurs
	}
	data, err := base64.StdEncoding.Strict().DecodeString(p[nonceLen+1:])
	if err != nil {
		return nil, errNotOurs
	}
	return data, nil
}

// versionOf returns the version of a record: a digest of what a DELETE
// must name exactly, its TTL and its value. The value holds a random
// nonce, so no two writes share a version.
func versionOf(ttl int64, value string) string {
	h := sha256.New()
	h.Write([]byte(strconv.FormatInt(ttl, 10)))
	h.Write([]byte{0})
	h.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
