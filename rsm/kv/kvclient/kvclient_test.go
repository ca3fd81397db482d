package kvclient_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/rsm/kv/kvclient"
)

// A 503 for a read, or for a write the node did not apply, is sent again;
// a write whose outcome is unknown, or a 503 that says nothing of the
// outcome, is not.
func TestDoRetries(t *testing.T) {
	for _, c := range []struct {
		name, method, body string
		status, calls      int
	}{
		{"write not applied", http.MethodPut, `{"error":"busy","code":"busy","outcome":"not_applied"}`, 200, 2},
		{"read", http.MethodGet, `{"error":"not ready","code":"not_ready"}`, 200, 2},
		{"write, outcome not said", http.MethodPut, `{"error":"no"}`, 503, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprint(w, c.body)
					return
				}
				fmt.Fprint(w, `{"revision":1}`)
			}))
			defer srv.Close()
			r, err := kvclient.New(srv.URL, srv.Client(), "").Do(t.Context(), c.method, kvclient.KeyPath("k"), []byte("v"))
			if err != nil || r.Status != c.status || int(calls.Load()) != c.calls {
				t.Fatalf("status %d, %d calls, %v; want %d, %d calls", r.Status, calls.Load(), err, c.status, c.calls)
			}
		})
	}
}

func TestToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token-0123456789" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"missing or wrong bearer token","code":"unauthorized"}`)
			return
		}
		fmt.Fprint(w, `{}`)
	}))
	defer srv.Close()
	r, err := kvclient.New(srv.URL+"/", nil, "").Do(t.Context(), http.MethodGet, "/v1/status", nil)
	if err != nil || r.Status != http.StatusUnauthorized || r.Err().Error() != "missing or wrong bearer token (HTTP 401)" {
		t.Fatalf("without the token: %d, %v, %v", r.Status, r.Err(), err)
	}
	r, err = kvclient.New(srv.URL, nil, "secret-token-0123456789").Do(t.Context(), http.MethodGet, "/v1/status", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("with the token: %d, %v", r.Status, err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := kvclient.New(url, nil, "").Do(t.Context(), http.MethodGet, "/v1/status", nil)
	var ue *kvclient.UnreachableError
	if !errors.As(err, &ue) || ue.Server != url || !strings.Contains(err.Error(), "cannot reach the kv server at "+url) {
		t.Fatalf("%v; want an UnreachableError for %s", err, url)
	}
}

func TestResponseErr(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":"key too large","code":"too_large"}`: "key too large (HTTP 400)",
		"not json\n": "HTTP 400: not json",
	} {
		if got := (kvclient.Response{Status: 400, Body: []byte(body)}).Err().Error(); got != want {
			t.Errorf("%q: %q; want %q", body, got, want)
		}
	}
}

func TestKeyPath(t *testing.T) {
	for key, want := range map[string]string{"a/b c": "/v1/kv/a%2Fb%20c", ".": "/v1/kv/%2E", "..": "/v1/kv/%2E%2E", "x.y": "/v1/kv/x.y"} {
		if got := kvclient.KeyPath(key); got != want {
			t.Errorf("KeyPath(%q) = %q; want %q", key, got, want)
		}
	}
}
