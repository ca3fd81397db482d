package route53store_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tenure-io/tenure/store/route53store"
)

const root = "tenure.example.com."

func TestRecordNames(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, key := range []string{"a", "A", "b", "B", "  spaces  ", "unicode/日本語/🔑", "a/b", "a.b", long, "~"} {
		name := route53store.RecordName(key, root)
		if !strings.HasSuffix(name, "."+root) {
			t.Errorf("name %q of %q is not under %q", name, key, root)
		}
		if name != strings.ToLower(name) {
			t.Errorf("name %q is not lower case: DNS would alias it", name)
		}
		for _, l := range strings.Split(strings.TrimSuffix(name, "."+root), ".") {
			if len(l) == 0 || len(l) > 63 || strings.Trim(l, "0123456789abcdefghijklmnopqrstuv") != "" {
				t.Errorf("name %q of %q has label %q", name, key, l)
			}
		}
		got, ok := route53store.KeyOf(name, root)
		if !ok || got != key {
			t.Errorf("KeyOf(RecordName(%q)) = %q, %v", key, got, ok)
		}
	}
	// "A" and "a" must not share a name: DNS names ignore case.
	if route53store.RecordName("A", root) == route53store.RecordName("a", root) {
		t.Error("keys that differ in case share a name")
	}
	// A long key's first 63 characters are the label nearest the root.
	name := route53store.RecordName(long, root)
	labels := strings.Split(strings.TrimSuffix(name, "."+root), ".")
	if len(labels) != 3 || len(labels[2]) != 63 || len(labels[0]) != 160-126 {
		t.Errorf("labels of a 100-byte key: %q", labels)
	}
}

func TestKeyOfRefusesForeignNames(t *testing.T) {
	for _, name := range []string{
		root,                                 // the root itself
		"www.example.com.",                   // outside the root
		"_acme-challenge." + root,            // not base32hex
		"c4." + "other." + root,              // a label that is not a full 63
		"c5." + root,                         // "c5" is not canonical: its low bits are not zero
		"zz." + root,                         // outside the alphabet
		"c4.." + root,                        // an empty label
		strings.Repeat("0", 64) + "." + root, // a label over 63
	} {
		if key, ok := route53store.KeyOf(name, root); ok {
			t.Errorf("KeyOf(%q) = %q: a name the driver never writes", name, key)
		}
	}
}

// The encoding keeps the byte order of keys: names compared label by label
// from the right sort as their keys do.
func TestRecordNamesKeepTheOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	key := func() string {
		b := make([]byte, r.IntN(120))
		for i := range b {
			b[i] = byte(r.IntN(4) + 'a') // few letters: many shared prefixes
		}
		return string(b)
	}
	for i := 0; i < 5000; i++ {
		a, b := key(), key()
		if a == "" || b == "" {
			continue
		}
		na := route53store.RecordName(a, root)
		nb := route53store.RecordName(b, root)
		if want, got := strings.Compare(a, b), compareDNS(na, nb); want != got {
			t.Fatalf("keys %q, %q compare %d; their names %q, %q compare %d", a, b, want, na, nb, got)
		}
	}
}

func compareDNS(a, b string) int {
	la := strings.Split(strings.TrimSuffix(a, "."), ".")
	lb := strings.Split(strings.TrimSuffix(b, "."), ".")
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if c := strings.Compare(la[i], lb[j]); c != 0 {
			return c
		}
	}
	switch {
	case len(la) < len(lb):
		return -1
	case len(la) > len(lb):
		return 1
	}
	return 0
}

func TestMaxKeyLen(t *testing.T) {
	for _, rootLen := range []int{1, 20, 26, 100, 200} {
		n := route53store.MaxKeyLenFor(rootLen)
		r := strings.Repeat("r", rootLen) + "."
		fits := func(k int) bool {
			return len(strings.TrimSuffix(route53store.RecordName(strings.Repeat("\xff", k), r), ".")) <= route53store.MaxNameLen
		}
		if !fits(n) || fits(n+1) {
			t.Errorf("root of %d characters: MaxKeyLen %d, but a key of %d fits: %v, of %d: %v", rootLen, n, n, fits(n), n+1, fits(n+1))
		}
	}
	if n := route53store.MaxKeyLenFor(len("t000001.tenure.example.com")); n < 130 {
		t.Errorf("MaxKeyLen for a typical root is %d bytes", n)
	}
}

func TestValueEncoding(t *testing.T) {
	if got := route53store.ComputeMaxValueSize(); got != route53store.MaxValueSize {
		t.Errorf("MaxValueSize is %d, computed %d", route53store.MaxValueSize, got)
	}
	r := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, route53store.MaxValueSize)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	for name, data := range map[string][]byte{
		"empty":    {},
		"spaces":   []byte(`owner "worker 1" host-a 1704067200`), // shardcoordinator split on the space
		"binary":   {0, 1, '"', '\\', ' ', 0xff},
		"largest":  big,
		"one more": append(big[:0:0], big[:254]...),
	} {
		v := route53store.EncodeValue(data)
		if len(v) > route53store.MaxValueChars {
			t.Errorf("%s: value of %d characters", name, len(v))
		}
		for _, s := range strings.Split(v, " ") {
			if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' || len(s)-2 > 255 || strings.ContainsAny(s[1:len(s)-1], `"\ `) {
				t.Errorf("%s: string %.20q… is not one quoted DNS character-string", name, s)
			}
		}
		got, err := route53store.DecodeValue(v)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: round trip gave %d bytes, %v", name, len(got), err)
		}
		if route53store.EncodeValue(data) == v {
			t.Errorf("%s: two writes of the same bytes gave the same record: versions would repeat", name)
		}
	}
}

func TestDecodeValueRefusesForeignRecords(t *testing.T) {
	for _, v := range []string{
		``, `""`, `"v=spf1 -all"`, `"tnr1:"`, `"tnr1:AAAAAAAAAAAAAAAA"`, `"tnr1:AAAAAAAAAAAAAAAA:!!"`,
		`"tnr1:AAAAAAAAAAAAAAAA:AA=="x`, `"tnr1:AAAAAAAAAAAAAAAA:" ""x`, `tnr1:AAAAAAAAAAAAAAAA:`,
		`"tnr1:AAAA\"AAAAAAAAAAAA:"`,
	} {
		if data, err := route53store.DecodeValue(v); err == nil {
			t.Errorf("DecodeValue(%q) = %q: not a tenure record", v, data)
		}
	}
}

func FuzzDecodeValue(f *testing.F) {
	f.Add(route53store.EncodeValue([]byte("seed")))
	f.Add(`"tnr1:AAAAAAAAAAAAAAAA:" "AA=="`)
	f.Add(`"x" "y"`)
	f.Fuzz(func(t *testing.T, v string) {
		data, err := route53store.DecodeValue(v)
		if err != nil {
			return
		}
		// Whatever decodes is a payload of ours: re-encoding it decodes
		// to the same bytes.
		again, err := route53store.DecodeValue(route53store.EncodeValue(data))
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("re-encoding %q: %q, %v", data, again, err)
		}
	})
}

func FuzzKeyOf(f *testing.F) {
	f.Add(route53store.RecordName("seed/key", root))
	f.Add("c4." + root)
	f.Add(strings.Repeat("v", 63) + ".0." + root)
	f.Fuzz(func(t *testing.T, name string) {
		key, ok := route53store.KeyOf(name, root)
		if !ok {
			return
		}
		// A name that decodes is the canonical name of its key.
		if got := route53store.RecordName(key, root); got != name {
			t.Fatalf("KeyOf(%q) = %q, whose name is %q", name, key, got)
		}
		if !utf8.ValidString(key) {
			t.Fatalf("KeyOf(%q) = %q: not UTF-8", name, key)
		}
	})
}
