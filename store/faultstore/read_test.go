package faultstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// readerMem is a memstore with driver.Reader, reading into the buffer.
type readerMem struct{ *memstore.Store }

var _ driver.Reader = readerMem{}

func (r readerMem) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	data, _, err := r.GetLimited(ctx, key, max)
	if err != nil {
		return nil, err
	}
	return append(buf[:0], data...), nil
}

// TestReadInto: a read without a version meets the faults of a Get, is
// counted as one, and reaches the inner store's ReadInto (with the
// caller's buffer) or its Get.
func TestReadInto(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		inner   driver.Store
		inPlace bool
	}{
		{"inner ReadInto", readerMem{memstore.New()}, true},
		{"inner Get", memstore.New(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultstore.New(tc.inner)
			s := store.New(fs)
			defer s.Close()
			if _, err := s.Put(ctx, "k", []byte("value"), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			var got []faultstore.Result
			fs.SetObserver(func(c faultstore.Call) {
				if c.Op == faultstore.OpGet {
					got = append(got, c.Result)
				}
			})
			fs.FailNext(faultstore.OpGet, driver.Transient, 1)
			buf := make([]byte, 0, 64)
			if _, err := s.Read(ctx, "k", buf, 64); !store.IsRetryable(err) {
				t.Fatalf("first read: %v; want the injected transient error", err)
			}
			data, err := s.Read(ctx, "k", buf, 64)
			if err != nil || !bytes.Equal(data, []byte("value")) {
				t.Fatalf("Read = %q, %v", data, err)
			}
			if inPlace := &data[0] == &buf[:1][0]; inPlace != tc.inPlace {
				t.Errorf("read into the caller's buffer: %v, want %v", inPlace, tc.inPlace)
			}
			if len(got) != 2 || got[0] != faultstore.Transient || got[1] != faultstore.OK {
				t.Errorf("observed get results %v", got)
			}
		})
	}
}
