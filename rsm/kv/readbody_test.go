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
		got, err := readBody(tc.r, tc.length, 4096)
		if err != nil || string(got) != tc.want {
			t.Fatalf("%s: %q, %v", tc.name, got, err)
		}
		if tc.cap != 0 && cap(got) != tc.cap {
			t.Fatalf("%s: buffer of %d bytes, want %d (grown)", tc.name, cap(got), tc.cap)
		}
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("part"), iotest.ErrReader(boom))
	if got, err := readBody(r, 10, 4096); !errors.Is(err, boom) || !bytes.Equal(got, []byte("part")) {
		t.Fatalf("a failing reader: %q, %v", got, err)
	}
}
