package faultstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/store/faultstore"
)

// received is one request as the fake server saw it.
type received struct {
	Method, Path string
	IfMatch      string
	IfNoneMatch  string
	Body         []byte
}

// fakeS3 records every request it receives and answers 200 with an ETag
// (the hash of the body), as a PutObject would.
type fakeS3 struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	f := &fakeS3{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, received{r.Method, r.URL.Path, r.Header.Get("If-Match"), r.Header.Get("If-None-Match"), body})
		f.mu.Unlock()
		sum := sha256.Sum256(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:8])+`"`)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeS3) received() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.reqs...)
}

// client returns a Transport over a transport of its own, so that the test
// can close its connections, and an http.Client using it.
func client(t *testing.T, opts ...faultstore.Option) (*faultstore.Transport, *http.Client) {
	t.Helper()
	tr := faultstore.NewTransport(&http.Transport{}, opts...)
	c := &http.Client{Transport: tr}
	t.Cleanup(c.CloseIdleConnections)
	return tr, c
}

type request struct {
	method      string
	path        string
	ifMatch     string
	ifNoneMatch string
	body        string
}

func (r request) do(ctx context.Context, c *http.Client, base string) (*http.Response, []byte, error) {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		return nil, nil, err
	}
	if r.ifMatch != "" {
		req.Header.Set("If-Match", r.ifMatch)
	}
	if r.ifNoneMatch != "" {
		req.Header.Set("If-None-Match", r.ifNoneMatch)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// s3Err is S3's XML error document, as an SDK parses it.
type s3Err struct {
	Code      string
	Message   string
	Resource  string
	RequestID string `xml:"RequestId"`
}

func TestTransportErrorResponses(t *testing.T) {
	ctx := context.Background()
	create := request{method: http.MethodPut, path: "/bucket/lock", ifNoneMatch: "*", body: "record"}
	cas := request{method: http.MethodPut, path: "/bucket/lock", ifMatch: `"abc"`, body: "record"}
	plain := request{method: http.MethodPut, path: "/bucket/lock", body: "record"}
	get := request{method: http.MethodGet, path: "/bucket/lock"}
	tests := []struct {
		name   string
		rule   faultstore.HTTPRule
		req    request
		status int    // 0: the server answers
		code   string // S3 error code in the body
	}{
		{"500 on put", faultstore.HTTPRule{Method: http.MethodPut, P: 1, Action: faultstore.HTTPInternalError}, plain, 500, "InternalError"},
		{"503 on put", faultstore.HTTPRule{Method: http.MethodPut, P: 1, Action: faultstore.HTTPSlowDown}, plain, 503, "SlowDown"},
		{"any method", faultstore.HTTPRule{P: 1, Action: faultstore.HTTPSlowDown}, get, 503, "SlowDown"},
		{"other method passes", faultstore.HTTPRule{Method: http.MethodPut, P: 1, Action: faultstore.HTTPSlowDown}, get, 0, ""},
		{"if-match matches cas", faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.WithIfMatch, P: 1}, cas, 500, "InternalError"},
		{"if-match skips create", faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.WithIfMatch, P: 1}, create, 0, ""},
		{"if-none-match matches create", faultstore.HTTPRule{Cond: faultstore.WithIfNoneMatch, P: 1}, create, 500, "InternalError"},
		{"if-none-match skips cas", faultstore.HTTPRule{Cond: faultstore.WithIfNoneMatch, P: 1}, cas, 0, ""},
		{"conditional matches both", faultstore.HTTPRule{Cond: faultstore.Conditional, P: 1}, cas, 500, "InternalError"},
		{"conditional skips plain", faultstore.HTTPRule{Cond: faultstore.Conditional, P: 1}, plain, 0, ""},
		{"unconditional matches plain", faultstore.HTTPRule{Cond: faultstore.Unconditional, P: 1}, plain, 500, "InternalError"},
		{"unconditional skips create", faultstore.HTTPRule{Cond: faultstore.Unconditional, P: 1}, create, 0, ""},
		{"path prefix", faultstore.HTTPRule{Path: "/bucket/lo", P: 1}, plain, 500, "InternalError"},
		{"other path", faultstore.HTTPRule{Path: "/bucket/log/", P: 1}, plain, 0, ""},
		{"zero chance", faultstore.HTTPRule{P: 0}, plain, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeS3(t)
			tr, c := client(t)
			if _, err := tr.AddRule(tt.rule); err != nil {
				t.Fatal(err)
			}
			resp, body, err := tt.req.do(ctx, c, srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if tt.status == 0 {
				if resp.StatusCode != 200 || len(srv.received()) != 1 {
					t.Fatalf("status %d, server saw %d requests; want the request forwarded", resp.StatusCode, len(srv.received()))
				}
				if got := tr.Counts(); !maps.Equal(got, faultstore.HTTPSnapshot{{tt.req.method, faultstore.HTTPForward}: 1}) {
					t.Errorf("Counts = %v", got)
				}
				return
			}
			if n := len(srv.received()); n != 0 {
				t.Fatalf("server received %d requests; a synthesized error must not send any", n)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/xml" {
				t.Errorf("Content-Type %q", ct)
			}
			var e s3Err
			if err := xml.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %q is not an S3 error document: %v", body, err)
			}
			if e.Code != tt.code || e.Message == "" || e.Resource != tt.req.path || e.RequestID == "" || e.RequestID != resp.Header.Get("X-Amz-Request-Id") {
				t.Errorf("error document %+v (request ID header %q)", e, resp.Header.Get("X-Amz-Request-Id"))
			}
			action := faultstore.HTTPInternalError
			if tt.code == "SlowDown" {
				action = faultstore.HTTPSlowDown
			}
			if got := tr.Counts(); !maps.Equal(got, faultstore.HTTPSnapshot{{tt.req.method, action}: 1}) {
				t.Errorf("Counts = %v", got)
			}
		})
	}

	t.Run("head has no body", func(t *testing.T) {
		srv := newFakeS3(t)
		tr, c := client(t)
		if _, err := tr.AddRule(faultstore.HTTPRule{P: 1, Action: faultstore.HTTPSlowDown}); err != nil {
			t.Fatal(err)
		}
		resp, body, err := request{method: http.MethodHead, path: "/bucket/k"}.do(ctx, c, srv.URL)
		if err != nil || resp.StatusCode != 503 || len(body) != 0 {
			t.Fatalf("HEAD: %v, status %v, body %q; want 503 with no body", err, resp, body)
		}
	})
}

func TestTransportSkipTimesAndCounts(t *testing.T) {
	ctx := context.Background()
	srv := newFakeS3(t)
	tr, c := client(t)
	// The second and third PUTs get 503; every other request goes through.
	if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, P: 1, Skip: 1, Times: 2, Action: faultstore.HTTPSlowDown}); err != nil {
		t.Fatal(err)
	}
	var statuses []int
	for _, r := range []request{
		{method: http.MethodPut, path: "/b/1", body: "1"},
		{method: http.MethodGet, path: "/b/1"},
		{method: http.MethodPut, path: "/b/2", body: "2"},
		{method: http.MethodPut, path: "/b/3", body: "3"},
		{method: http.MethodPut, path: "/b/4", body: "4"},
		{method: http.MethodDelete, path: "/b/4"},
	} {
		resp, _, err := r.do(ctx, c, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, resp.StatusCode)
	}
	if want := []int{200, 200, 503, 503, 200, 200}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	want := faultstore.HTTPSnapshot{
		{http.MethodPut, faultstore.HTTPForward}:    2,
		{http.MethodPut, faultstore.HTTPSlowDown}:   2,
		{http.MethodGet, faultstore.HTTPForward}:    1,
		{http.MethodDelete, faultstore.HTTPForward}: 1,
	}
	got := tr.Counts()
	if !maps.Equal(got, want) {
		t.Errorf("Counts =\n%vwant\n%v", got, want)
	}
	if got.Total() != 6 || got.MethodTotal(http.MethodPut) != 4 || got.Get("", faultstore.HTTPSlowDown) != 2 || got.Get(http.MethodGet, faultstore.HTTPSlowDown) != 0 {
		t.Errorf("totals of %v", got)
	}
	if s := got.String(); s != "DELETE forward=1\nGET forward=1\nPUT slow-down=2 forward=2\ntotal 6\n" {
		t.Errorf("String() = %q", s)
	}
	tr.Reset()
	if got := tr.Counts(); len(got) != 0 {
		t.Errorf("Counts after Reset = %v", got)
	}
}

func TestTransportDelay(t *testing.T) {
	t.Run("forwards", func(t *testing.T) {
		srv := newFakeS3(t)
		tr, c := client(t)
		if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, P: 1, Action: faultstore.HTTPDelay, Delay: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		resp, _, err := request{method: http.MethodPut, path: "/b/k", body: "data"}.do(context.Background(), c, srv.URL)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("PUT: %v %v", resp, err)
		}
		if got := srv.received(); len(got) != 1 || string(got[0].Body) != "data" {
			t.Fatalf("server received %+v", got)
		}
		if n := tr.Counts().Get(http.MethodPut, faultstore.HTTPDelay); n != 1 {
			t.Errorf("counted %d delayed PUTs", n)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		srv := newFakeS3(t)
		tr, c := client(t)
		if _, err := tr.AddRule(faultstore.HTTPRule{P: 1, Action: faultstore.HTTPDelay, Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err := request{method: http.MethodPut, path: "/b/k", body: "data"}.do(ctx, c, srv.URL)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("PUT: %v, want context.Canceled", err)
		}
		if n := len(srv.received()); n != 0 {
			t.Errorf("server received %d requests", n)
		}
	})

	// Under synctest, with a base transport that needs no network, the
	// length of the delay is exact.
	t.Run("length", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent int
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent++
				return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
			})
			tr := faultstore.NewTransport(base)
			if _, err := tr.AddRule(faultstore.HTTPRule{P: 1, Action: faultstore.HTTPDelay, Delay: 250 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://s3.test/b/k", nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 200 || sent != 1 {
				t.Fatalf("RoundTrip: %v %v, sent %d", resp, err, sent)
			}
			if d := time.Since(start); d != 250*time.Millisecond {
				t.Errorf("delayed %v, want 250ms", d)
			}
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportHang(t *testing.T) {
	srv := newFakeS3(t)
	tr, c := client(t)
	if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, P: 1, Action: faultstore.HTTPHang}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	body := &closeRecorder{Reader: strings.NewReader("data")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/b/k", body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PUT: %v, want the context's deadline", err)
	}
	if n := len(srv.received()); n != 0 {
		t.Errorf("server received %d requests from a hung PUT", n)
	}
	if !body.isClosed() {
		t.Errorf("the request body of an unsent request was not closed")
	}
	if n := tr.Counts().Get(http.MethodPut, faultstore.HTTPHang); n != 1 {
		t.Errorf("counted %d hung PUTs", n)
	}
}

type closeRecorder struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (c *closeRecorder) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *closeRecorder) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func TestTransportApplyThenDrop(t *testing.T) {
	payload := make([]byte, 3<<20) // larger than any buffer on the way
	r := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	tests := []struct {
		name string
		body func() io.Reader
	}{
		// http.NewRequest sets GetBody for these, so a client may rewind.
		{"bytes.Reader", func() io.Reader { return bytes.NewReader(payload) }},
		// A body that can be read only once.
		{"one-shot stream", func() io.Reader {
			return io.MultiReader(bytes.NewReader(payload[:1<<20]), bytes.NewReader(payload[1<<20:]))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeS3(t)
			tr, c := client(t)
			if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.WithIfMatch, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest(http.MethodPut, srv.URL+"/bucket/lock", tt.body())
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("If-Match", `"v1"`)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("PUT returned %s; want the connection reset", resp.Status)
			}
			if !errors.Is(err, syscall.ECONNRESET) || !strings.Contains(err.Error(), "connection reset") {
				t.Errorf("error %q does not look like a reset connection", err)
			}
			got := srv.received()
			if len(got) != 1 {
				t.Fatalf("server received %d requests, want 1", len(got))
			}
			if got[0].IfMatch != `"v1"` || !bytes.Equal(got[0].Body, payload) {
				t.Errorf("server received If-Match %q and %d bytes (equal: %v), want the whole body of %d bytes",
					got[0].IfMatch, len(got[0].Body), bytes.Equal(got[0].Body, payload), len(payload))
			}

			// Times: 1, so the retry an SDK would make is answered.
			resp2, _, err := request{method: http.MethodPut, path: "/bucket/lock", ifMatch: `"v1"`, body: "again"}.do(context.Background(), c, srv.URL)
			if err != nil || resp2.StatusCode != 200 {
				t.Fatalf("second PUT: %v %v", resp2, err)
			}
			want := faultstore.HTTPSnapshot{
				{http.MethodPut, faultstore.HTTPApplyThenDrop}: 1,
				{http.MethodPut, faultstore.HTTPForward}:       1,
			}
			if got := tr.Counts(); !maps.Equal(got, want) {
				t.Errorf("Counts =\n%vwant\n%v", got, want)
			}
		})
	}
}

func TestTransportProbabilityIsSeeded(t *testing.T) {
	outcomes := func(seed uint64) []int {
		var out []int
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		tr := faultstore.NewTransport(base, faultstore.WithSeed(seed))
		if _, err := tr.AddRule(faultstore.HTTPRule{P: 0.5, Action: faultstore.HTTPInternalError}); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			req, _ := http.NewRequest(http.MethodGet, "http://s3.test/b/k", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			out = append(out, resp.StatusCode)
		}
		return out
	}
	a, b, c := outcomes(3), outcomes(3), outcomes(4)
	if !slices.Equal(a, b) {
		t.Errorf("the same seed gave different outcomes")
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 3 and 4 gave the same 100 outcomes")
	}
}

func TestTransportRuleInvalid(t *testing.T) {
	tests := []struct {
		name string
		rule faultstore.HTTPRule
		want string
	}{
		{"lower-case method", faultstore.HTTPRule{Method: "put", P: 1}, "HTTPRule.Method"},
		{"unknown cond", faultstore.HTTPRule{Cond: 42, P: 1}, "HTTPRule.Cond"},
		{"NaN chance", faultstore.HTTPRule{P: nan()}, "HTTPRule.P"},
		{"negative skip", faultstore.HTTPRule{P: 1, Skip: -1}, "HTTPRule.Skip"},
		{"negative times", faultstore.HTTPRule{P: 1, Times: -2}, "HTTPRule.Times"},
		{"negative delay", faultstore.HTTPRule{P: 1, Delay: -1}, "HTTPRule.Delay"},
		{"unknown action", faultstore.HTTPRule{P: 1, Action: 17}, "HTTPRule.Action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := faultstore.NewTransport(nil)
			remove, err := tr.AddRule(tt.rule)
			if err == nil || remove != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AddRule(%+v) = %v; want an error naming %s", tt.rule, err, tt.want)
			}
		})
	}
}

func TestTransportRemoveAndClear(t *testing.T) {
	ctx := context.Background()
	srv := newFakeS3(t)
	tr, c := client(t)
	remove, err := tr.AddRule(faultstore.HTTPRule{P: 1, Action: faultstore.HTTPInternalError})
	if err != nil {
		t.Fatal(err)
	}
	get := request{method: http.MethodGet, path: "/b/k"}
	status := func() int {
		t.Helper()
		resp, _, err := get.do(ctx, c, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if s := status(); s != 500 {
		t.Fatalf("with the rule: %d", s)
	}
	remove()
	remove()
	if s := status(); s != 200 {
		t.Fatalf("after remove: %d", s)
	}
	if _, err := tr.AddRule(faultstore.HTTPRule{P: 1, Action: faultstore.HTTPSlowDown}); err != nil {
		t.Fatal(err)
	}
	tr.ClearRules()
	if s := status(); s != 200 {
		t.Fatalf("after ClearRules: %d", s)
	}
}
