package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits.
const (
	// MaxKeySize is the longest key, in bytes.
	MaxKeySize = 4096
	// DefaultListLimit is the number of items a list returns when its
	// limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest limit a list accepts.
	MaxListLimit = 10000
	// DefaultListBytes bounds the keys and values one list returns when
	// its byte budget is 0, so that the result fits in the group's
	// MaxMessageSize (500 KiB by default). A list always returns at least
	// one item if one matches, whatever its size.
	DefaultListBytes = 256 << 10
)

// The first byte of every message names its type. Decoders reject any
// other byte, trailing bytes, truncated fields, non-minimal varints and
// booleans other than 0 and 1, so every message has exactly one encoding:
// decoding and encoding again gives back the same bytes.
const (
	tagPut    byte = 0x01 // key, value
	tagDelete byte = 0x02 // key
	tagCAS    byte = 0x03 // key, expect uvarint, value

	tagGet  byte = 0x11 // key
	tagList byte = 0x12 // prefix, after, limit uvarint, maxBytes uvarint, keysOnly bool

	tagPutResult    byte = 0x21 // revision uvarint
	tagDeleteResult byte = 0x22 // existed bool, revision uvarint
	tagCASResult    byte = 0x23 // swapped bool, revision uvarint
	tagError        byte = 0x2F // code byte, message
	tagGetResult    byte = 0x31 // found bool; if found: value, create uvarint, mod uvarint
	tagListResult   byte = 0x32 // count uvarint, count × (key, value, create, mod), more bool
)

// command is a mutation: put, delete or compare-and-swap.
type command struct {
	op     byte // tagPut, tagDelete or tagCAS
	key    string
	value  []byte // put and CAS
	expect uint64 // CAS: the key's expected mod revision, 0 for absent
}

func (c command) encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(c.key)+len(c.value)+binary.MaxVarintLen64)
	b = append(b, c.op)
	b = appendString(b, c.key)
	switch c.op {
	case tagPut:
		b = appendBytes(b, c.value)
	case tagCAS:
		b = binary.AppendUvarint(b, c.expect)
		b = appendBytes(b, c.value)
	}
	return b
}

// putHead is the encoding of a put of key up to its value, which is
// length bytes: the value's bytes appended to it make the command.
// nil if length is unknown (negative) or beyond max.
func putHead(key string, length int64, max int) []byte {
	if length < 0 || length > int64(max) {
		return nil
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(key))
	b = append(b, tagPut)
	b = appendString(b, key)
	return binary.AppendUvarint(b, uint64(length))
}

// decodeCommand decodes a command; the value aliases b.
func decodeCommand(b []byte) (command, error) {
	d := decoder{b: b}
	c := command{op: d.byte()}
	switch c.op {
	case tagPut:
		c.key = d.string()
		c.value = d.bytes()
	case tagDelete:
		c.key = d.string()
	case tagCAS:
		c.key = d.string()
		c.expect = d.uvarint()
		c.value = d.bytes()
	default:
		if d.err == nil {
			return command{}, fmt.Errorf("%w: unknown command type 0x%02x", ErrMalformed, c.op)
		}
	}
	if err := d.finish("command"); err != nil {
		return command{}, err
	}
	return c, nil
}

// query is a read: get or list.
type query struct {
	op       byte   // tagGet or tagList
	key      string // get: the key; list: the prefix
	after    string // list: start after this key
	limit    uint64 // list: 0 means DefaultListLimit
	maxBytes uint64 // list: 0 means DefaultListBytes
	keysOnly bool   // list: leave the values out
}

func (q query) encode() []byte {
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+len(q.key)+len(q.after)+1)
	b = append(b, q.op)
	b = appendString(b, q.key)
	if q.op == tagList {
		b = appendString(b, q.after)
		b = binary.AppendUvarint(b, q.limit)
		b = binary.AppendUvarint(b, q.maxBytes)
		b = appendBool(b, q.keysOnly)
	}
	return b
}

func decodeQuery(b []byte) (query, error) {
	d := decoder{b: b}
	q := query{op: d.byte()}
	switch q.op {
	case tagGet:
		q.key = d.string()
	case tagList:
		q.key = d.string()
		q.after = d.string()
		q.limit = d.uvarint()
		q.maxBytes = d.uvarint()
		q.keysOnly = d.bool()
	default:
		if d.err == nil {
			return query{}, fmt.Errorf("%w: unknown query type 0x%02x", ErrMalformed, q.op)
		}
	}
	if err := d.finish("query"); err != nil {
		return query{}, err
	}
	return q, nil
}

// reply is the result of a command or a query. Which fields are meaningful
// depends on tag.
type reply struct {
	tag byte

	ok  bool   // delete: the key existed; CAS: swapped
	rev uint64 // put, delete, CAS: see Client

	code byte   // error
	msg  string // error

	found bool     // get
	kv    KeyValue // get: Value, CreateRevision, ModRevision (not Key)

	items []KeyValue // list
	more  bool       // list
}

func errorReply(err error) []byte {
	return reply{tag: tagError, code: codeOf(err), msg: err.Error()}.encode()
}

func (r reply) encode() []byte {
	n := 1 + 2*binary.MaxVarintLen64 + 1 + len(r.msg) + len(r.kv.Value) + 1
	for _, it := range r.items {
		n += len(it.Key) + len(it.Value) + 4*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, r.tag)
	switch r.tag {
	case tagPutResult:
		b = binary.AppendUvarint(b, r.rev)
	case tagDeleteResult, tagCASResult:
		b = appendBool(b, r.ok)
		b = binary.AppendUvarint(b, r.rev)
	case tagError:
		b = append(b, r.code)
		b = appendString(b, r.msg)
	case tagGetResult:
		b = appendBool(b, r.found)
		if r.found {
			b = appendBytes(b, r.kv.Value)
			b = binary.AppendUvarint(b, r.kv.CreateRevision)
			b = binary.AppendUvarint(b, r.kv.ModRevision)
		}
	case tagListResult:
		b = binary.AppendUvarint(b, uint64(len(r.items)))
		for _, it := range r.items {
			b = appendString(b, it.Key)
			b = appendBytes(b, it.Value)
			b = binary.AppendUvarint(b, it.CreateRevision)
			b = binary.AppendUvarint(b, it.ModRevision)
		}
		b = appendBool(b, r.more)
	}
	return b
}

// decodeReply decodes a result; values alias b.
func decodeReply(b []byte) (reply, error) {
	d := decoder{b: b}
	r := reply{tag: d.byte()}
	switch r.tag {
	case tagPutResult:
		r.rev = d.uvarint()
	case tagDeleteResult, tagCASResult:
		r.ok = d.bool()
		r.rev = d.uvarint()
	case tagError:
		r.code = d.byte()
		r.msg = d.string()
	case tagGetResult:
		r.found = d.bool()
		if r.found {
			r.kv.Value = d.bytes()
			r.kv.CreateRevision = d.uvarint()
			r.kv.ModRevision = d.uvarint()
		}
	case tagListResult:
		n := d.uvarint()
		// Every item takes at least 4 bytes, which bounds the allocation
		// whatever count the bytes claim.
		if d.err == nil && n > uint64(len(d.b)-d.off)/4 {
			return reply{}, fmt.Errorf("%w: list result claims %d items in %d bytes", ErrMalformed, n, len(d.b)-d.off)
		}
		if n > 0 {
			r.items = make([]KeyValue, 0, n)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			var it KeyValue
			it.Key = d.string()
			it.Value = d.bytes()
			it.CreateRevision = d.uvarint()
			it.ModRevision = d.uvarint()
			r.items = append(r.items, it)
		}
		r.more = d.bool()
	default:
		if d.err == nil {
			return reply{}, fmt.Errorf("%w: unknown result type 0x%02x", ErrMalformed, r.tag)
		}
	}
	if err := d.finish("result"); err != nil {
		return reply{}, err
	}
	return r, nil
}

// validKey reports why key cannot be a key, or nil.
func validKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeySize:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeySize)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	}
	return nil
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// decoder reads fields from b; the first error sticks and later reads
// return zero values.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", ErrMalformed, fmt.Sprintf(format, args...), d.off)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) bool() bool {
	switch c := d.byte(); c {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("boolean 0x%02x", c)
		return false
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n, err := uvarint(d.b[d.off:])
	if err != nil {
		d.fail("%v", err)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("field of %d bytes, %d left", n, len(d.b)-d.off)
		return nil
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

// finish reports the first error, or trailing bytes after a complete
// message.
func (d *decoder) finish(what string) error {
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	if d.off != len(d.b) {
		return fmt.Errorf("%s: %w: %d trailing bytes", what, ErrMalformed, len(d.b)-d.off)
	}
	return nil
}

// errTruncatedVarint: the bytes end inside a varint.
var errTruncatedVarint = errors.New("truncated varint")

// uvarint decodes a minimal unsigned varint: unlike binary.Uvarint it
// refuses padded encodings such as 0x80 0x00, so each value has one.
func uvarint(b []byte) (v uint64, n int, err error) {
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if i == len(b) {
			return 0, 0, errTruncatedVarint
		}
		c := b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, 0, fmt.Errorf("varint overflows 64 bits")
			}
			if c == 0 && i > 0 {
				return 0, 0, fmt.Errorf("non-minimal varint")
			}
			return v | uint64(c)<<s, i + 1, nil
		}
		v |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, 0, fmt.Errorf("varint overflows 64 bits")
}
