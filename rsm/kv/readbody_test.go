package kv

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readBody returns the whole body in a buffer of its declared length plus
// one, never grown, however the reader splits it; without a length, or
// with one beyond the limit, it reads what comes; a reader's error is
// returned.
func TestReadBody(t *testing.T) {
	value := strings.Repeat("v", 1024)
	for _, tc := range []struct {
		name   string
		r      io.Reader
		length int64
		want   string
		cap    int // 0: not checked
	}{
		{"declared", strings.NewReader(value), 1024, value, 1025},
		{"declared, one byte a read", iotest.OneByteReader(strings.NewReader(value)), 1024, value, 1025},
		{"declared, data with EOF", iotest.DataErrReader(strings.NewReader(value)), 1024, value, 1025},
		{"empty", strings.NewReader(""), 0, "", 1},
		{"unknown length", strings.NewReader(value), -1, value, 0},
		{"length over the limit", strings.NewReader(value), 1 << 20, value, 0},
		{"longer than declared", strings.NewReader(value + "tail"), 1024, value + "tail", 0},
		{"shorter than declared", strings.NewReader("short"), 1024, "short", 1025},
	} {
		got, err := readBody(tc.r, nil, tc.length, 4096)
		if err != nil || string(got) != tc.want {
			t.Fatalf("%s: %q, %v", tc.name, got, err)
		}
		if tc.cap != 0 && cap(got) != tc.cap {
			t.Fatalf("%s: buffer of %d bytes, want %d (grown)", tc.name, cap(got), tc.cap)
		}
	}
	// After a head: the head, then the body, in the same one buffer.
	for _, length := range []int64{1024, -1} {
		got, err := readBody(iotest.HalfReader(strings.NewReader(value)), []byte("head"), length, 4096)
		if err != nil || string(got) != "head"+value {
			t.Fatalf("after a head, length %d: %q, %v", length, got, err)
		}
		if length > 0 && cap(got) != 4+1024+1 {
			t.Fatalf("after a head: buffer of %d bytes, want %d (grown)", cap(got), 4+1024+1)
		}
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("part"), iotest.ErrReader(boom))
	if got, err := readBody(r, nil, 10, 4096); !errors.Is(err, boom) || !bytes.Equal(got, []byte("part")) {
		t.Fatalf("a failing reader: %q, %v", got, err)
	}
}

// putHead followed by the value's bytes is the put's encoding, whatever the
// key's and the value's lengths; an unknown length, or one beyond the
// limit, has no head.
func TestPutHead(t *testing.T) {
	for _, key := range []string{"k", strings.Repeat("k", 200)} {
		for _, n := range []int{0, 1, 127, 128, 16383, 16384, 70000} {
			value := bytes.Repeat([]byte{7}, n)
			got := append(putHead(key, int64(n), 1<<20), value...)
			if want := (command{op: tagPut, key: key, value: value}).encode(); !bytes.Equal(got, want) {
				t.Fatalf("key of %d bytes, value of %d: %x; want %x", len(key), n, got[:min(len(got), 40)], want[:min(len(want), 40)])
			}
		}
	}
	if putHead("k", -1, 4096) != nil || putHead("k", 4097, 4096) != nil {
		t.Fatal("a head for a length unknown or beyond the limit")
	}
}
