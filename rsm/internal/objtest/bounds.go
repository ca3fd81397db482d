// Package objtest helps the tests of the objects an rsm group stores, in
// package rsm and in its snapshot store: a driver that records the limits
// reads are made with, for the tests that every object is read within the
// bound of what tenure writes there (docs/rsm.md, "Bounded reads"), and
// damaged copies of an object for its decoders' tests.
package objtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/store/driver"
)

// Recorder is a driver that records, for every read, the limit it
// was made with (math.MaxInt64 for an unbounded Get) and the bytes it
// handed back; and that holds objects of any size without their bytes
// (huge), as a store that reports a size before sending the value does.
type Recorder struct {
	driver.Store
	mu    sync.Mutex
	reads map[string][]Read
	huge  map[string]hugeObject
}

// Read is one read: the limit it was made with and the bytes handed back.
type Read struct {
	Max, Got int64
}

// hugeObject is an object of size bytes: prefix, then zeros.
type hugeObject struct {
	prefix []byte
	size   int64
}

var _ driver.Reader = (*Recorder)(nil)

// NewRecorder returns a Recorder over inner.
func NewRecorder(inner driver.Store) *Recorder {
	return &Recorder{Store: inner, reads: map[string][]Read{}, huge: map[string]hugeObject{}}
}

func (d *Recorder) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	d.mu.Lock()
	h, ok := d.huge[key]
	d.mu.Unlock()
	var data []byte
	var v string
	var err error
	switch {
	case !ok:
		data, v, err = d.Store.GetLimited(ctx, key, max)
	case h.size > max:
		err = driver.TooLargeError(h.size, max)
	default:
		data, v = make([]byte, h.size), "huge"
		copy(data, h.prefix)
	}
	d.mu.Lock()
	d.reads[key] = append(d.reads[key], Read{Max: max, Got: int64(len(data))})
	d.mu.Unlock()
	return data, v, err
}

func (d *Recorder) Get(ctx context.Context, key string) ([]byte, string, error) {
	return d.GetLimited(ctx, key, math.MaxInt64)
}

func (d *Recorder) ReadInto(ctx context.Context, key string, _ []byte, max int64) ([]byte, error) {
	data, _, err := d.GetLimited(ctx, key, max)
	return data, err
}

// Of returns the reads of key so far.
func (d *Recorder) Of(key string) []Read {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Read(nil), d.reads[key]...)
}

// PutHuge makes key hold an object of size bytes starting with prefix.
func (d *Recorder) PutHuge(key string, prefix []byte, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.huge[key] = hugeObject{prefix: prefix, size: size}
}

// AssertBounded fails unless key was read, every read with a limit of at
// most bound, and no read handed back more than its limit.
func (d *Recorder) AssertBounded(t *testing.T, key string, bound int64) {
	t.Helper()
	recs := d.Of(key)
	if len(recs) == 0 {
		t.Fatalf("%s was never read", key)
	}
	for i, r := range recs {
		if r.Max > bound || r.Got > r.Max {
			t.Fatalf("read %d of %s: limit %d, %d bytes; want a limit of at most %d", i, key, r.Max, r.Got, bound)
		}
	}
}

// AssertTooLarge fails unless err is a *CorruptError naming key as larger
// than tenure writes there, with the bound.
func AssertTooLarge(t *testing.T, err error, key string, bound int64) {
	t.Helper()
	var c *record.CorruptError
	if !errors.As(err, &c) || c.Key != key || !errors.Is(err, record.ErrCorrupt) || !errors.Is(err, record.ErrTooLarge) {
		t.Fatalf("read of an oversized %s: %v; want a *CorruptError naming it as too large", key, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(bound)) || !strings.Contains(err.Error(), key) {
		t.Fatalf("refusal %q does not name the object and its bound %d", err, bound)
	}
}
