package driver_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store/driver"
)

// counting counts the bytes a reader hands out.
type counting struct {
	r io.Reader
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestReadLimited(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1<<20)
	for _, tc := range []struct {
		name      string
		len, size int64 // bytes in the stream; size announced (-1: none)
		max       int64
		tooLarge  bool
		mostRead  int64
	}{
		{"announced too large: nothing read", 1 << 20, 1 << 20, 100, true, 0},
		{"unannounced too large: max+1 read", 1 << 20, -1, 100, true, 101},
		{"announced smaller than it is", 1 << 20, 10, 100, true, 101},
		{"at the limit", 100, 100, 100, false, 100},
		{"at the limit, unannounced", 100, -1, 100, false, 100},
		{"below the limit", 10, -1, 100, false, 10},
		{"empty", 0, 0, 1, false, 0},
		{"no limit", 1 << 20, -1, 1<<63 - 1, false, 1 << 20},
		{"announced, no limit", 1 << 20, 1 << 20, 1<<63 - 1, false, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &counting{r: bytes.NewReader(body[:tc.len])}
			data, err := driver.ReadLimited(r, tc.size, tc.max)
			if r.n > tc.mostRead {
				t.Errorf("read %d bytes; at most %d may be read", r.n, tc.mostRead)
			}
			if tc.tooLarge {
				if driver.Classify(nil, err) != driver.TooLarge || data != nil {
					t.Fatalf("got %d bytes, %v; want a TooLarge error", len(data), err)
				}
				if !strings.Contains(err.Error(), "100") {
					t.Fatalf("the error does not name the limit: %v", err)
				}
				return
			}
			if err != nil || int64(len(data)) != tc.len {
				t.Fatalf("got %d bytes, %v; want %d bytes", len(data), err, tc.len)
			}
			// An announced size sizes the buffer once, to the
			// allocator's rounding: no second buffer of twice the value
			// to see the end.
			if tc.size == tc.len && tc.len > 0 && int64(cap(data)) > tc.len+tc.len/8+4096 {
				t.Errorf("a value of %d bytes announced in a buffer of %d", tc.len, cap(data))
			}
		})
	}
	// A read error is passed on as it is, for the driver to classify.
	boom := errors.New("boom")
	if _, err := driver.ReadLimited(io.MultiReader(strings.NewReader("ab"), errReader{boom}), -1, 10); !errors.Is(err, boom) {
		t.Fatalf("a failed read returned %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestReadLimitedInto: a value that fits in the buffer's capacity (with
// bytes.MinRead to spare) is read into its memory, a larger one into a
// new slice; either way the bytes are the value's and no more.
func TestReadLimitedInto(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10000)
	for _, tc := range []struct {
		name    string
		size    int64 // announced (-1: none)
		cap     int
		inPlace bool
	}{
		{"fits, announced", int64(len(body)), len(body) + bytes.MinRead, true},
		{"fits, unannounced", -1, 2 * len(body), true},
		{"too small", int64(len(body)), len(body) / 2, false},
		{"no buffer", int64(len(body)), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := bytes.Repeat([]byte{0xff}, tc.cap)
			data, err := driver.ReadLimitedInto(bytes.NewReader(body), tc.size, 1<<40, dst)
			if err != nil || !bytes.Equal(data, body) {
				t.Fatalf("got %d bytes, %v; want the value's %d", len(data), err, len(body))
			}
			if inPlace := tc.cap > 0 && &data[0] == &dst[:1][0]; inPlace != tc.inPlace {
				t.Fatalf("read in the buffer's memory: %v, want %v", inPlace, tc.inPlace)
			}
		})
	}
	if _, err := driver.ReadLimitedInto(bytes.NewReader(body), int64(len(body)), 100, make([]byte, 0, 1<<20)); driver.Classify(nil, err) != driver.TooLarge {
		t.Fatalf("a value above the limit read into a buffer: %v", err)
	}
}
