package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// wrapAPIError stands for an SDK's error type, which callers reach with
// errors.As through the store's wrapping.
type wrapAPIError struct{ Code string }

func (e *wrapAPIError) Error() string { return "api error " + e.Code }

// wrapSentinels are the errors a *store.Error may match with errors.Is.
var wrapSentinels = []error{
	store.ErrNotFound, store.ErrPreconditionFailed, store.ErrConflict, store.ErrThrottled,
	store.ErrTransient, store.ErrPermanent, store.ErrInvalidArgument, store.ErrClosed,
	store.ErrConditionsIgnored, store.ErrUnknownScheme, store.ErrUnsupported, store.ErrTooLarge,
}

// chainStoreErrors returns every *store.Error in err's chain.
func chainStoreErrors(err error) []*store.Error {
	var out []*store.Error
	for err != nil {
		if se, ok := err.(*store.Error); ok {
			out = append(out, se)
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				out = append(out, chainStoreErrors(e)...)
			}
			return out
		default:
			err = errors.Unwrap(err)
		}
	}
	return out
}

// Every Store method wraps the driver's error exactly once, in a
// *store.Error naming the operation and key, matching the sentinel of its
// kind and no other, and unwrapping to the driver's own error type.
func TestErrorsWrappedOnce(t *testing.T) {
	methods := []struct {
		name    string
		op, key string
		call    func(ctx context.Context, s *store.Store) error
	}{
		{"Get", "get", "e/get", func(ctx context.Context, s *store.Store) error {
			_, _, err := s.Get(ctx, "e/get")
			return err
		}},
		{"Put if absent", "put", "e/create", func(ctx context.Context, s *store.Store) error {
			_, err := s.Put(ctx, "e/create", []byte("x"), store.IfAbsent())
			return err
		}},
		{"Put if match", "put", "e/cas", func(ctx context.Context, s *store.Store) error {
			_, err := s.Put(ctx, "e/cas", []byte("x"), store.IfMatch("v1"))
			return err
		}},
		{"Delete", "delete", "e/del", func(ctx context.Context, s *store.Store) error {
			return s.Delete(ctx, "e/del", store.Cond{})
		}},
		{"Delete if match", "delete", "e/del", func(ctx context.Context, s *store.Store) error {
			return s.Delete(ctx, "e/del", store.IfMatch("v1"))
		}},
		{"List", "list", "e/", func(ctx context.Context, s *store.Store) error {
			_, err := s.List(ctx, "e/", "", 10)
			return err
		}},
		{"ListAll", "list", "e/", func(ctx context.Context, s *store.Store) error {
			_, err := s.ListAll(ctx, "e/", 10)
			return err
		}},
	}
	kinds := []struct {
		kind     driver.Kind
		sentinel error // nil: no sentinel matches
	}{
		{driver.NotFound, store.ErrNotFound},
		{driver.PreconditionFailed, store.ErrPreconditionFailed},
		{driver.Conflict, store.ErrConflict},
		{driver.Throttled, store.ErrThrottled},
		{driver.Transient, store.ErrTransient},
		{driver.Permanent, store.ErrPermanent},
		{driver.InvalidArgument, store.ErrInvalidArgument},
		{driver.Unsupported, store.ErrUnsupported},
		{driver.Canceled, nil},
		{driver.Unknown, nil},
	}
	for _, m := range methods {
		for _, k := range kinds {
			t.Run(m.name+"/"+k.kind.String(), func(t *testing.T) {
				fs := faultstore.New(memstore.New())
				s := store.New(fs)
				defer s.Close()
				cause := &wrapAPIError{Code: "E" + k.kind.String()}
				if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.AllOps, P: 1, Kind: k.kind, Err: cause}); err != nil {
					t.Fatal(err)
				}
				err := m.call(context.Background(), s)
				if err == nil {
					t.Fatal("no error")
				}
				wrapped := chainStoreErrors(err)
				if len(wrapped) != 1 {
					t.Fatalf("%v: %d *store.Error in the chain, want exactly 1", err, len(wrapped))
				}
				if se := wrapped[0]; se != err || se.Op != m.op || se.Key != m.key || se.Kind != k.kind {
					t.Errorf("%#v; want the returned error itself, with Op %q, Key %q, Kind %v", se, m.op, m.key, k.kind)
				}
				for _, sentinel := range wrapSentinels {
					if got := errors.Is(err, sentinel); got != (sentinel == k.sentinel) {
						t.Errorf("errors.Is(%v, %v) = %v", err, sentinel, got)
					}
				}
				var api *wrapAPIError
				if !errors.As(err, &api) || api != cause {
					t.Errorf("errors.As does not reach the driver's *wrapAPIError through %v", err)
				}
				var de *driver.Error
				if !errors.As(err, &de) || de.Kind != k.kind {
					t.Errorf("errors.As does not reach the *driver.Error of kind %v", k.kind)
				}
			})
		}
	}

	// Errors that the inner store makes itself, and context errors, are
	// wrapped the same way.
	t.Run("store's own errors", func(t *testing.T) {
		s := store.New(faultstore.New(memstore.New()))
		defer s.Close()
		ctx := context.Background()
		_, _, err := s.Get(ctx, "missing")
		if w := chainStoreErrors(err); len(w) != 1 || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of a missing key: %v", err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = s.Put(cancelled, "k", []byte("x"), store.IfAbsent())
		if w := chainStoreErrors(err); len(w) != 1 || w[0].Kind != driver.Canceled || !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a cancelled context: %v", err)
		}
	})
}
