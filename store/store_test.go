package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		name, url string
		want      error
		mentions  string
	}{
		{"unknown scheme", "ftp://host/dir", store.ErrUnknownScheme, `"ftp"`},
		{"no scheme", "/var/lib/tenure", store.ErrUnknownScheme, "no scheme"},
		{"unparsable", "s3://bucket/%zz", nil, "invalid URL escape"},
		// This test binary does not import gcsstore or s3store: the error
		// names the import that registers the scheme.
		{"a known driver not imported", "gs://bucket/prefix", store.ErrUnknownScheme,
			`import github.com/tenure-io/tenure/store/gcsstore (or github.com/tenure-io/tenure/store/all for every driver)`},
		{"s3 not imported", "s3://bucket/prefix", store.ErrUnknownScheme, `github.com/tenure-io/tenure/store/s3store`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(t.Context(), c.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Open(%q) = %v; want %v", c.url, err, c.want)
			}
			if !strings.Contains(err.Error(), c.mentions) {
				t.Errorf("Open(%q) error %q does not mention %s", c.url, err, c.mentions)
			}
		})
	}
}

var openerScheme atomic.Int32

func TestOpenerErrorsAreClassified(t *testing.T) {
	// A scheme of its own on every run, so -count=N does not register twice.
	scheme := fmt.Sprintf("test-failing-opener-%d", openerScheme.Add(1))
	store.Register(scheme, func(context.Context, *url.URL, store.OpenOptions) (driver.Store, error) {
		return nil, driver.Errorf(driver.Permanent, "bucket %q does not exist", "b")
	})
	_, err := store.Open(t.Context(), scheme+"://user:secret@b/prefix")
	if !errors.Is(err, store.ErrPermanent) {
		t.Fatalf("Open error %v does not match ErrPermanent", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open error %q shows the URL's password", err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering the mem scheme a second time did not panic")
		}
	}()
	store.Register("mem", nil)
}

// blocking is a driver whose Get waits until released, to show that Close
// waits for calls in flight.
type blocking struct {
	*memstore.Store
	entered, release chan struct{}
	closed           chan struct{}
}

func (b *blocking) Get(ctx context.Context, key string) ([]byte, string, error) {
	close(b.entered)
	<-b.release
	return b.Store.Get(ctx, key)
}

func (b *blocking) Close() error { close(b.closed); return nil }

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	b := &blocking{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	s := store.New(b)
	getDone := make(chan error, 1)
	go func() { _, _, err := s.Get(context.Background(), "k"); getDone <- err }()
	<-b.entered
	closeDone := make(chan error, 1)
	go func() { closeDone <- s.Close() }()
	select {
	case <-b.closed:
		t.Fatal("the driver was closed while a Get was in flight")
	case <-closeDone:
		t.Fatal("Close returned while a Get was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(b.release)
	if err := <-getDone; !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the Get in flight returned %v; want not found", err)
	}
	if err := <-closeDone; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := s.Get(context.Background(), "k"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close = %v; want ErrClosed", err)
	}
}

func TestKindOfAndPredicates(t *testing.T) {
	mk := func(k driver.Kind) error { return &store.Error{Op: "put", Key: "k", Kind: k, Err: errors.New("x")} }
	cases := []struct {
		kind             driver.Kind
		retryable, ambig bool
		sentinel         error
	}{
		{driver.NotFound, false, false, store.ErrNotFound},
		{driver.PreconditionFailed, false, false, store.ErrPreconditionFailed},
		{driver.Conflict, true, true, store.ErrConflict},
		{driver.Throttled, true, true, store.ErrThrottled},
		{driver.Transient, true, true, store.ErrTransient},
		{driver.Permanent, false, false, store.ErrPermanent},
		{driver.InvalidArgument, false, false, store.ErrInvalidArgument},
		{driver.Unsupported, false, false, store.ErrUnsupported},
		{driver.Canceled, false, true, nil},
		{driver.Unknown, true, true, nil},
	}
	all := []error{store.ErrNotFound, store.ErrPreconditionFailed, store.ErrConflict, store.ErrThrottled,
		store.ErrTransient, store.ErrPermanent, store.ErrInvalidArgument, store.ErrUnsupported}
	for _, c := range cases {
		err := mk(c.kind)
		if store.KindOf(err) != c.kind {
			t.Errorf("KindOf(%v) = %v", c.kind, store.KindOf(err))
		}
		if store.IsRetryable(err) != c.retryable {
			t.Errorf("IsRetryable(%v) = %v; want %v", c.kind, !c.retryable, c.retryable)
		}
		if store.IsAmbiguous(err) != c.ambig {
			t.Errorf("IsAmbiguous(%v) = %v; want %v", c.kind, !c.ambig, c.ambig)
		}
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == c.sentinel) {
				t.Errorf("errors.Is(%v error, %v) = %v", c.kind, s, got)
			}
		}
	}
	if store.IsAmbiguous(nil) || store.IsRetryable(nil) {
		t.Error("a nil error is ambiguous or retryable")
	}
}

func TestObserverSeesEveryCall(t *testing.T) {
	var calls []store.Call
	s := store.New(memstore.New(), store.WithObserver(func(c store.Call) { calls = append(calls, c) }))
	ctx := t.Context()
	v, _ := s.Put(ctx, "k", []byte("x"), store.IfAbsent())
	_, _ = s.Put(ctx, "k", []byte("y"), store.IfAbsent())
	_, _, _ = s.Get(ctx, "k")
	_, _ = s.List(ctx, "", "", 10)
	_ = s.Delete(ctx, "k", store.IfMatch(v))
	_, _, _ = s.Get(ctx, "") // refused before the driver: not observed
	want := []struct {
		op   string
		cond driver.CondKind
		err  error
	}{
		{"put", driver.IfAbsent, nil},
		{"put", driver.IfAbsent, store.ErrPreconditionFailed},
		{"get", driver.Unconditional, nil},
		{"list", driver.Unconditional, nil},
		{"delete", driver.IfMatch, nil},
	}
	if len(calls) != len(want) {
		t.Fatalf("observed %d calls: %+v", len(calls), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Op != w.op || c.Cond != w.cond || (w.err == nil) != (c.Err == nil) || (w.err != nil && !errors.Is(c.Err, w.err)) {
			t.Errorf("call %d = %+v; want %s %v %v", i, c, w.op, w.cond, w.err)
		}
	}
}

func TestReadOnlyRefusesWritesBeforeTheDriver(t *testing.T) {
	fs := faultstore.New(memstore.New())
	s := store.New(fs, store.ReadOnly())
	defer s.Close()
	if _, err := s.Put(t.Context(), "k", []byte("v"), store.IfAbsent()); !errors.Is(err, store.ErrReadOnly) || !errors.Is(err, store.ErrInvalidArgument) || store.IsAmbiguous(err) {
		t.Errorf("Put = %v; want ErrReadOnly, ErrInvalidArgument, not ambiguous", err)
	}
	if err := s.Delete(t.Context(), "k", store.IfMatch("v1")); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("Delete = %v; want ErrReadOnly", err)
	}
	if _, _, err := s.Get(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get = %v; want ErrNotFound", err)
	}
	if n := fs.Counts().OpTotal(faultstore.Writes); n != 0 {
		t.Errorf("%d writes reached the driver", n)
	}
}

// readerStore is a memstore that reads through driver.Reader, into the
// caller's buffer, and counts those reads.
type readerStore struct {
	*memstore.Store
	reads atomic.Int32
}

func (r *readerStore) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	r.reads.Add(1)
	data, _, err := r.GetLimited(ctx, key, max)
	if err != nil {
		return nil, err
	}
	return append(buf[:0], data...), nil
}

// overrunReader is a driver.Reader that ignores its limit.
type overrunReader struct{ *memstore.Store }

var (
	_ driver.Reader = overrunReader{}
	_ driver.Reader = (*readerStore)(nil)
)

func (r overrunReader) ReadInto(ctx context.Context, key string, _ []byte, _ int64) ([]byte, error) {
	data, _, err := r.Get(ctx, key)
	return data, err
}

// TestReadDriverOverrun: a value a driver returns beyond Read's limit is
// not passed on.
func TestReadDriverOverrun(t *testing.T) {
	ctx := t.Context()
	s := store.New(overrunReader{memstore.New()})
	if _, err := s.Put(ctx, "k", []byte("value"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if data, err := s.Read(ctx, "k", nil, 2); !errors.Is(err, store.ErrTooLarge) || data != nil {
		t.Fatalf("Read of a driver that overran the limit = %q, %v; want ErrTooLarge", data, err)
	}
}

// TestRead: Read goes through driver.Reader where the driver has it, with
// the caller's buffer, and through Get where it does not; a missing key is
// ErrNotFound, wrapped with the key, and observed as a get.
func TestRead(t *testing.T) {
	ctx := t.Context()
	rs := &readerStore{Store: memstore.New()}
	for _, tc := range []struct {
		name   string
		drv    driver.Store
		reader bool
	}{
		{"driver.Reader", rs, true},
		{"Get", memstore.New(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []store.Call
			s := store.New(tc.drv, store.WithObserver(func(c store.Call) { calls = append(calls, c) }))
			if _, err := s.Put(ctx, "k", []byte("value"), store.IfAbsent()); err != nil {
				t.Fatal(err)
			}
			before := rs.reads.Load()
			buf := make([]byte, 0, 64)
			data, err := s.Read(ctx, "k", buf, int64(len("value")))
			if err != nil || string(data) != "value" {
				t.Fatalf("Read = %q, %v", data, err)
			}
			if inBuf := &data[0] == &buf[:1][0]; inBuf != tc.reader {
				t.Errorf("read into the caller's buffer: %v, want %v", inBuf, tc.reader)
			}
			if got := rs.reads.Load() - before; (got == 1) != tc.reader {
				t.Errorf("%d reads through driver.Reader", got)
			}
			_, err = s.Read(ctx, "missing", nil, 64)
			if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "missing") {
				t.Fatalf("Read of a missing key: %v", err)
			}
			if n := len(calls); n < 2 || calls[n-1].Op != "get" || calls[n-2].Op != "get" || calls[n-2].Err != nil {
				t.Errorf("observed %+v", calls)
			}
			// Bounded as GetLimited is: a value above the limit is refused,
			// naming the key and the limit.
			if data, err := s.Read(ctx, "k", buf, int64(len("value"))-1); !errors.Is(err, store.ErrTooLarge) ||
				!strings.Contains(err.Error(), `"k"`) || !strings.Contains(err.Error(), "limit is 4") || data != nil {
				t.Fatalf("Read above its limit = %q, %v; want ErrTooLarge naming the key and the limit", data, err)
			}
			if _, err := s.Read(ctx, "k", buf, 0); !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("Read with limit 0: %v; want ErrInvalidArgument", err)
			}
		})
	}
}
