package filestore

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tenure-io/tenure/store"
)

// A key maps to a path relative to the root: the key is split at '/', each
// segment is escaped, and each path component gets a suffix that says what
// follows it, so that key "a" (file a.k) and key "a/b" (directory a.d) never
// collide and an empty segment is still a valid name (".d" or ".k").
//
// Escaped text holds only [a-z0-9_-] and %XX with upper-case hex digits.
// Upper-case letters are escaped too so that no two keys map to names that
// differ only in case (macOS and Windows file systems fold case), and every
// byte outside ASCII is escaped so that Unicode normalisation by the file
// system (HFS+) cannot merge two keys. As '.' is always escaped, no component
// is "." or "..", and no escaped text can end in one of the suffixes.
const (
	sufKey  = ".k" // the key ends here: a regular file
	sufDir  = ".d" // a directory: a '/' follows
	sufCont = ".c" // a directory: the same segment continues in the next component

	// maxChunk bounds the escaped text of one component, leaving room for
	// the suffix well under NAME_MAX (255 bytes on every file system we
	// support).
	maxChunk = 200
)

const upperHex = "0123456789ABCDEF"

func literal(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// escapeSegment escapes s without splitting it into chunks.
func escapeSegment(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		writeEscaped(&b, s[i])
	}
	return b.String()
}

func writeEscaped(b *strings.Builder, c byte) {
	if literal(c) {
		b.WriteByte(c)
		return
	}
	b.WriteByte('%')
	b.WriteByte(upperHex[c>>4])
	b.WriteByte(upperHex[c&15])
}

// encodeKey returns the path components of key, relative to the root.
func encodeKey(key string) []string {
	segs := strings.Split(key, "/")
	comps := make([]string, 0, len(segs))
	for i, seg := range segs {
		comps = appendSegment(comps, seg, i == len(segs)-1)
	}
	return comps
}

// encodedLen is the length of the relative path of key, separators
// included: what encodeKey gives, counted without building it (every call
// checks it, CheckKey).
func encodedLen(key string) int {
	n := 0
	for seg := range strings.SplitSeq(key, "/") {
		chunk := 0
		for i := 0; i < len(seg); i++ {
			c := 3
			if literal(seg[i]) {
				c = 1
			}
			if chunk+c > maxChunk {
				n += chunk + len(sufCont) + 1
				chunk = 0
			}
			chunk += c
		}
		n += chunk + len(sufKey) + 1 // sufDir is as long
	}
	return n - 1
}

func appendSegment(comps []string, seg string, last bool) []string {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		n := 3
		if literal(seg[i]) {
			n = 1
		}
		// Split between escapes, never inside one, so that each chunk
		// decodes on its own.
		if b.Len()+n > maxChunk {
			comps = append(comps, b.String()+sufCont)
			b.Reset()
		}
		writeEscaped(&b, seg[i])
	}
	if last {
		return append(comps, b.String()+sufKey)
	}
	return append(comps, b.String()+sufDir)
}

// decodeKey returns the key whose path components are comps. ok is false for
// anything encodeKey would not have produced (files that are not ours, or a
// non-canonical spelling of a key), so that each stored key is listed once.
func decodeKey(comps []string) (key string, ok bool) {
	var b []byte
	for i, c := range comps {
		last := i == len(comps)-1
		if len(c) < 2 || c[len(c)-2] != '.' {
			return "", false
		}
		stem, suf := c[:len(c)-2], c[len(c)-2:]
		if b, ok = unescape(b, stem); !ok {
			return "", false
		}
		switch {
		case suf == sufKey && last:
		case suf == sufDir && !last:
			b = append(b, '/')
		case suf == sufCont && !last && stem != "":
		default:
			return "", false
		}
	}
	key = string(b)
	if !validKey(key) || !slices.Equal(encodeKey(key), comps) {
		return "", false
	}
	return key, true
}

func unescape(dst []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case literal(c):
			dst = append(dst, c)
		case c == '%' && i+2 < len(s):
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi < 0 || lo < 0 {
				return dst, false
			}
			dst = append(dst, byte(hi<<4|lo))
			i += 2
		default:
			return dst, false
		}
	}
	return dst, true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// validKey mirrors the portable layer's key rules, so that List never
// returns a key that Get would refuse.
func validKey(key string) bool {
	if key == "" || len(key) > store.MaxKeyLen || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
