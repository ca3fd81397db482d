package route53store

import (
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// DNS limits on names, in the text form Route 53's API uses.
const (
	// MaxLabelLen is the longest DNS label.
	MaxLabelLen = 63
	// MaxNameLen is the longest DNS name in text form without the final
	// dot: 255 octets on the wire are 253 characters of text.
	MaxNameLen = 253
)

// keyEncoding maps key bytes to DNS-safe characters. Base32 with the
// "extended hex" alphabet, lower case, unpadded: DNS names are
// case-insensitive (Route 53 stores them in lower case), so base64 would
// alias keys; the hex alphabet ('0'-'9' then 'a'-'v') sorts as the bits do,
// so the encoding keeps the keys' byte order; and it is injective (n bytes
// give ceil(8n/5) characters, a different count for every n).
var keyEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// encodedLen returns the length of a key of n bytes once encoded.
func encodedLen(n int) int { return (8*n + 4) / 5 }

// nameLen returns the length, without the final dot, of the record name of
// a key of n bytes under a root of rootLen characters (without its final
// dot): the encoded key in labels of at most 63 characters, each followed by
// a dot, then the root.
func nameLen(n, rootLen int) int {
	c := encodedLen(n)
	labels := (c + MaxLabelLen - 1) / MaxLabelLen
	return c + labels + rootLen
}

// maxKeyLen returns the longest key, in bytes, whose name fits in MaxNameLen
// under a root of rootLen characters; 0 if none does.
func maxKeyLen(rootLen int) int {
	n := 0
	for nameLen(n+1, rootLen) <= MaxNameLen {
		n++
	}
	return n
}

// recordName returns the record name of key under root (which ends in a
// dot). The encoded key is cut into labels of 63 characters from its
// start, and the labels are written in reverse, the first nearest the
// root: DNS orders names by their labels from the right, so names sort as
// their keys do if Route 53 compares labels as strings, and a name is the
// parent of the names of longer keys that share its full labels. Nothing
// depends on either: List sorts in the driver.
func recordName(key, root string) string {
	enc := keyEncoding.EncodeToString([]byte(key))
	var labels []string
	for len(enc) > MaxLabelLen {
		labels = append(labels, enc[:MaxLabelLen])
		enc = enc[MaxLabelLen:]
	}
	labels = append(labels, enc)
	slices.Reverse(labels)
	return strings.Join(labels, ".") + "." + root
}

// keyOf returns the key whose record name is name (lower case, ending in a
// dot), and false if name is not the name of a key under root: outside the
// root, not in the canonical form recordName produces, or the name of a
// key that tenure does not accept (another program's record).
func keyOf(name, root string) (string, bool) {
	rel, ok := strings.CutSuffix(name, "."+root)
	if !ok || rel == "" {
		return "", false
	}
	labels := strings.Split(rel, ".")
	slices.Reverse(labels)
	for i, l := range labels {
		if l == "" || len(l) > MaxLabelLen || i < len(labels)-1 && len(l) != MaxLabelLen {
			return "", false
		}
	}
	enc := strings.Join(labels, "")
	b, err := keyEncoding.DecodeString(enc)
	if err != nil || keyEncoding.EncodeToString(b) != enc || !utf8.Valid(b) {
		return "", false
	}
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f {
			return "", false // no key tenure accepts
		}
	}
	return string(b), true
}

// normalizeName returns a DNS name as the driver compares names: lower
// case, ending in a dot.
func normalizeName(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// reversedLabels returns name (ending in a dot) with its labels in reverse
// order, joined by dots and without the final dot: "b.example.com." gives
// "com.example.b". Route 53 orders ListResourceRecordSets by this form.
func reversedLabels(name string) string {
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	slices.Reverse(labels)
	return strings.Join(labels, ".")
}

// checkPrefixName validates the name prefix of a URL, such as "tenure" or
// "prod.tenure": one or more labels of a-z, 0-9, '-' and '_'.
func checkPrefixName(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("no record name prefix: want route53://ZONEID/NAME, such as route53://Z0123456789/tenure")
	}
	for _, l := range strings.Split(prefix, ".") {
		if l == "" || len(l) > MaxLabelLen {
			return fmt.Errorf("name prefix %q: labels are 1 to %d characters", prefix, MaxLabelLen)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("name prefix %q: labels hold only a-z, 0-9, '-' and '_'", prefix)
			}
		}
	}
	return nil
}
