package filestore

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// TestReadInto: the driver.Reader read gives Get's bytes, in the caller's
// buffer when they fit, and GetLimited's errors: TooLarge for a value
// above the limit, NotFound for a missing key, ErrClosed after Close.
func TestReadInto(t *testing.T) {
	d := newDriver(t, t.TempDir())
	ctx := t.Context()
	value := bytes.Repeat([]byte("abcdefgh"), 4096)
	if _, err := d.Put(ctx, "snap/part", value, driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	want, _, err := d.Get(ctx, "snap/part")
	if err != nil || !bytes.Equal(want, value) {
		t.Fatalf("Get = %d bytes, %v", len(want), err)
	}
	buf := make([]byte, 0, len(value)+bytes.MinRead)
	got, err := d.ReadInto(ctx, "snap/part", buf, int64(len(value)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadInto = %d bytes, %v; want Get's %d", len(got), err, len(want))
	}
	if &got[0] != &buf[:1][0] {
		t.Error("a value that fits was not read into the buffer")
	}
	if got, err := d.ReadInto(ctx, "snap/part", make([]byte, 0, 16), math.MaxInt64); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadInto with a small buffer = %d bytes, %v", len(got), err)
	}
	if got, err := d.ReadInto(ctx, "snap/part", buf, int64(len(value))-1); driver.Classify(d, err) != driver.TooLarge || got != nil {
		t.Fatalf("ReadInto below the value's size = %d bytes, %v; want TooLarge", len(got), err)
	}
	if _, err := d.ReadInto(ctx, "snap/none", buf, math.MaxInt64); driver.Classify(d, err) != driver.NotFound {
		t.Fatalf("ReadInto of a missing key = %v; want NotFound", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadInto(ctx, "snap/part", buf, int64(len(value))); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReadInto after Close = %v; want ErrClosed", err)
	}
}
