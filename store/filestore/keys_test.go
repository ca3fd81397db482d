package filestore

import (
	"slices"
	"strings"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	x200, x50 := strings.Repeat("x", 200), strings.Repeat("x", 50)
	cases := []struct {
		name, key string
		want      []string
	}{
		{"plain", "abc", []string{"abc.k"}},
		{"nested", "a/b/c", []string{"a.d", "b.d", "c.k"}},
		{"leading slash", "/a", []string{".d", "a.k"}},
		{"trailing slash", "a/", []string{"a.d", ".k"}},
		{"double slash", "a//b", []string{"a.d", ".d", "b.k"}},
		{"only a slash", "/", []string{".d", ".k"}},
		{"dot", ".", []string{"%2E.k"}},
		{"dot dot", "..", []string{"%2E%2E.k"}},
		{"dots as segments", "a/./../b", []string{"a.d", "%2E.d", "%2E%2E.d", "b.k"}},
		{"suffix lookalike", "a.k", []string{"a%2Ek.k"}},
		{"upper case escaped", "Ab", []string{"%41b.k"}},
		{"percent", "%41", []string{"%2541.k"}},
		{"space and unicode", "é 🔑", []string{"%C3%A9%20%F0%9F%94%91.k"}},
		{"kept as is", "az09_-", []string{"az09_-.k"}},
		{"exactly one chunk", x200, []string{x200 + ".k"}},
		{"two chunks", x200 + x50, []string{x200 + ".c", x50 + ".k"}},
		{"chunked directory", x200 + "x/y", []string{x200 + ".c", "x.d", "y.k"}},
		{"escape not split", strings.Repeat("x", 199) + "é", []string{strings.Repeat("x", 199) + ".c", "%C3%A9.k"}},
		{"escape fits exactly", strings.Repeat("x", 197) + "A", []string{strings.Repeat("x", 197) + "%41.k"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := encodeKey(c.key)
			if !slices.Equal(got, c.want) {
				t.Fatalf("encodeKey(%q) = %q; want %q", c.key, got, c.want)
			}
			if n := encodedLen(c.key); n != len(strings.Join(got, "/")) {
				t.Errorf("encodedLen(%q) = %d; the path is %d bytes", c.key, n, len(strings.Join(got, "/")))
			}
			back, ok := decodeKey(got)
			if !ok || back != c.key {
				t.Fatalf("decodeKey(%q) = %q, %v; want %q", got, back, ok, c.key)
			}
		})
	}
}

// Keys that a careless encoding would map to the same path.
func TestEncodeKeyInjective(t *testing.T) {
	x := strings.Repeat("x", 200)
	keys := []string{
		"a", "a/", "a/b", "a//b", "ab", "a.k", "a.d/b", "a.d", "a.c", "A", "%61", "%41",
		"/", "//", "/a", ".", "..", "...", "./a", ".tmp", ".locks", ".k", ".d",
		x, x + "y", x + "/y", x + "y/", "x/" + x,
	}
	seen := map[string]string{}
	for _, k := range keys {
		p := strings.ToLower(strings.Join(encodeKey(k), "/"))
		if other, dup := seen[p]; dup {
			t.Errorf("keys %q and %q both map to %q (compared case-insensitively)", k, other, p)
		}
		seen[p] = k
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	cases := []struct {
		name  string
		comps []string
	}{
		{"no suffix", []string{"a"}},
		{"unknown suffix", []string{"a.x"}},
		{"directory last", []string{"a.d"}},
		{"continuation last", []string{"a.c"}},
		{"file in the middle", []string{"a.k", "b.k"}},
		{"upper-case literal", []string{"A.k"}},
		{"needless escape", []string{"%61.k"}},
		{"lower-case hex", []string{"%c3%a9.k"}},
		{"short escape", []string{"%2.k"}},
		{"bad hex", []string{"%ZZ.k"}},
		{"control character", []string{"%0A.k"}},
		{"NUL", []string{"%00.k"}},
		{"invalid UTF-8", []string{"%FF.k"}},
		{"literal dot", []string{"a.b.k"}},
		{"empty continuation", []string{".c", "a.k"}},
		{"needless continuation", []string{"a.c", "b.k"}},
		{"temp file", []string{".tmp"}},
		{"empty name", []string{""}},
		{"empty key", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if key, ok := decodeKey(c.comps); ok {
				t.Fatalf("decodeKey(%q) = %q; want it refused", c.comps, key)
			}
		})
	}
}

func FuzzKeyEncoding(f *testing.F) {
	for _, k := range []string{
		"a", "a/b", "/", "a//b/", ".", "..", "dots/./and/../x", "é/日本語/🔑", "%41", "a.k",
		strings.Repeat("x", 1024), strings.Repeat("é", 512), strings.Repeat("s/", 512),
		strings.Repeat("x", 199) + "é", "A B\tC",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		// Any path must decode without panicking, and only to a key that
		// encodes back to it.
		if comps := strings.Split(key, "/"); len(comps) > 0 {
			if k, ok := decodeKey(comps); ok && !slices.Equal(encodeKey(k), comps) {
				t.Fatalf("decodeKey(%q) = %q, which encodes to %q", comps, k, encodeKey(k))
			}
		}
		if !validKey(key) {
			return
		}
		comps := encodeKey(key)
		for _, c := range comps {
			if len(c) > 255 || c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") {
				t.Fatalf("key %q: component %q is not a valid file name", key, c)
			}
			for i := 0; i < len(c); i++ {
				if b := c[i]; !literal(b) && b != '%' && b != '.' && !('A' <= b && b <= 'F') {
					t.Fatalf("key %q: component %q has byte %q", key, c, b)
				}
			}
		}
		back, ok := decodeKey(comps)
		if !ok || back != key {
			t.Fatalf("decodeKey(encodeKey(%q)) = %q, %v", key, back, ok)
		}
		if n := encodedLen(key); n != len(strings.Join(comps, "/")) {
			t.Fatalf("encodedLen(%q) = %d; the path is %d bytes", key, n, len(strings.Join(comps, "/")))
		}
	})
}
