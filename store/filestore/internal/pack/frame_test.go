package pack

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// testValidKey stands for the store's rule on keys: what decodeFrame
// refuses beyond it is the frame's own damage.
func testValidKey(key string) bool { return key != "" && utf8.ValidString(key) }

func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, []packRec{{key: "a/b", value: []byte("v")}, {key: "a/c", del: true}}))
	f.Add(appendFrame(nil, nil))
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, n, st, why := decodeFrame(b, testValidKey)
		switch st {
		case frameOK:
			if n < frameHeader || n > len(b) {
				t.Fatalf("frame of %d bytes from %d", n, len(b))
			}
			// Encoding what was decoded gives the same frame back.
			again := appendFrame(nil, recs)
			if !bytes.Equal(again, b[:n]) {
				t.Fatalf("re-encoded frame differs")
			}
			for _, r := range recs {
				if !testValidKey(r.key) || r.del && len(r.value) > 0 {
					t.Fatalf("decoded a bad record %+v", r)
				}
			}
		case frameBad:
			if why == "" {
				t.Fatal("a bad frame without a reason")
			}
		case frameShort:
			if n != 0 && n <= len(b) {
				t.Fatalf("short, with a frame of %d in %d bytes", n, len(b))
			}
		}
	})
}
