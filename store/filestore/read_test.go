package filestore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// TestReadInto: the driver.Reader read gives Get's bytes, in the caller's
// buffer when they fit, and Get's errors: NotFound for a missing key,
// ErrClosed after Close.
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
	got, err := d.ReadInto(ctx, "snap/part", buf)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadInto = %d bytes, %v; want Get's %d", len(got), err, len(want))
	}
	if &got[0] != &buf[:1][0] {
		t.Error("a value that fits was not read into the buffer")
	}
	if got, err := d.ReadInto(ctx, "snap/part", make([]byte, 0, 16)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadInto with a small buffer = %d bytes, %v", len(got), err)
	}
	if _, err := d.ReadInto(ctx, "snap/none", buf); driver.Classify(d, err) != driver.NotFound {
		t.Fatalf("ReadInto of a missing key = %v; want NotFound", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadInto(ctx, "snap/part", buf); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReadInto after Close = %v; want ErrClosed", err)
	}
}
