package gcsstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	"google.golang.org/api/googleapi"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// Every answer the JSON API gives maps to one store error, for each call.
func TestErrorMapping(t *testing.T) {
	calls := map[string]func(s *store.Store, t *testing.T) error{
		"get": func(s *store.Store, t *testing.T) error { _, _, err := s.Get(ctx(t), "k"); return err },
		"create": func(s *store.Store, t *testing.T) error {
			_, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent())
			return err
		},
		"swap": func(s *store.Store, t *testing.T) error {
			_, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch("42"))
			return err
		},
		"delete-if-match": func(s *store.Store, t *testing.T) error { return s.Delete(ctx(t), "k", store.IfMatch("42")) },
		"delete":          func(s *store.Store, t *testing.T) error { return s.Delete(ctx(t), "k", store.Cond{}) },
		"list":            func(s *store.Store, t *testing.T) error { _, err := s.List(ctx(t), "", "", 10); return err },
	}
	cases := []struct {
		call   string
		status int
		reason string
		want   error // nil: the call succeeds
	}{
		{"get", 404, "notFound", store.ErrNotFound},
		{"create", 412, "conditionNotMet", store.ErrPreconditionFailed},
		{"swap", 412, "conditionNotMet", store.ErrPreconditionFailed},
		{"delete-if-match", 412, "conditionNotMet", store.ErrPreconditionFailed},
		// A conditional delete of a missing object: its generation does
		// not match.
		{"delete-if-match", 404, "notFound", store.ErrPreconditionFailed},
		// An unconditional delete of a missing object succeeds.
		{"delete", 404, "notFound", nil},
		// An upload has no object to miss: the bucket is gone.
		{"create", 404, "notFound", store.ErrPermanent},
		{"swap", 404, "notFound", store.ErrPermanent},
		{"list", 404, "notFound", store.ErrPermanent},

		{"swap", 429, "rateLimitExceeded", store.ErrThrottled},
		{"get", 429, "rateLimitExceeded", store.ErrThrottled},
		{"create", 403, "rateLimitExceeded", store.ErrThrottled},
		{"create", 403, "userRateLimitExceeded", store.ErrThrottled},
		{"create", 503, "backendError", store.ErrTransient},
		{"get", 500, "internalError", store.ErrTransient},
		{"list", 502, "", store.ErrTransient},
		{"swap", 408, "", store.ErrTransient},
		{"swap", 409, "conflict", store.ErrConflict},

		{"get", 401, "required", store.ErrPermanent},
		{"create", 403, "forbidden", store.ErrPermanent},
		{"list", 403, "insufficientPermissions", store.ErrPermanent},
		{"delete-if-match", 403, "forbidden", store.ErrPermanent},
		{"create", 501, "notImplemented", store.ErrPermanent},

		{"create", 400, "invalid", store.ErrInvalidArgument},
		{"get", 400, "invalid", store.ErrInvalidArgument},
		{"create", 413, "uploadTooLarge", store.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d/%s", c.call, c.status, c.reason), func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if op(r) == "list" && r.URL.Query().Get("maxResults") == "1" {
					serveOK(w, r) // Open's bucket check
					return
				}
				gcsError(w, c.status, c.reason)
			})
			s := f.store(t, "p")
			err := calls[c.call](s, t)
			if c.want == nil {
				if err != nil {
					t.Fatalf("%v, want success", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			var ge *googleapi.Error
			if !errors.As(err, &ge) || ge.Code != c.status {
				t.Errorf("errors.As does not reach a *googleapi.Error with code %d: %v", c.status, err)
			}
			var se *store.Error
			if errors.As(err, &se) && errors.As(se.Err, new(*store.Error)) {
				t.Errorf("wrapped twice: %v", err)
			}
		})
	}
}

// A server that cannot be reached gives a transient error: the outage may
// end.
func TestUnreachableServerIsTransient(t *testing.T) {
	f := newFake(t, serveOK)
	s := f.store(t, "p")
	f.srv.Close()
	if _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
		t.Errorf("Put to a closed server: %v, want an ambiguous ErrTransient", err)
	}
	if _, _, err := s.Get(ctx(t), "k"); !errors.Is(err, store.ErrTransient) {
		t.Errorf("Get from a closed server: %v, want ErrTransient", err)
	}
}

// The classification of errors that carry no HTTP response.
func TestClassify(t *testing.T) {
	apiErr := func(code int, reason string) error {
		e := &googleapi.Error{Code: code}
		if reason != "" {
			e.Errors = []googleapi.ErrorItem{{Reason: reason}}
		}
		return e
	}
	cases := []struct {
		name string
		err  error
		want driver.Kind
	}{
		{"object missing", apiErr(404, "notFound"), driver.NotFound},
		// A media download's error carries the status and the body, not
		// the reasons.
		{"download of a missing object", &googleapi.Error{Code: 404, Body: "No such object: bucket/p/k"}, driver.NotFound},
		{"retries exhausted", fmt.Errorf("gcsstore: 3 attempts failed, the last with: %w", apiErr(503, "")), driver.Transient},
		{"retries cut short", fmt.Errorf("gcsstore: waiting to try again: %w", errors.Join(context.Canceled, apiErr(503, ""))), driver.Canceled},
		{"reason before status", apiErr(403, "rateLimitExceeded"), driver.Throttled},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), driver.Canceled},
		{"deadline", context.DeadlineExceeded, driver.Transient},
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, driver.Transient},
		{"body cut short", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), driver.Transient},
		{"redirect", apiErr(307, ""), driver.Permanent},
		{"other 4xx", apiErr(418, ""), driver.Unknown},
		{"anything else", errors.New("storage: something"), driver.Unknown},
		{"nil", nil, driver.Unknown},
	}
	for _, c := range cases {
		if got := gcsstore.Classify(c.err); got != c.want {
			t.Errorf("%s: %v classified %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
