package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/s3store"
)

// fakeS3 is an httptest server that records every request and answers with
// respond. It lets tests see exactly what goes on the wire.
type fakeS3 struct {
	srv     *httptest.Server
	respond http.HandlerFunc

	mu   sync.Mutex
	reqs []*http.Request
	body []string // reqs[i]'s body
}

func newFake(t *testing.T, respond http.HandlerFunc) *fakeS3 {
	t.Helper()
	f := &fakeS3{respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.body = append(f.body, string(b))
		f.mu.Unlock()
		f.respond(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// requests returns the requests received so far.
func (f *fakeS3) requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*http.Request(nil), f.reqs...)
}

func (f *fakeS3) last(t *testing.T) *http.Request {
	t.Helper()
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return reqs[len(reqs)-1]
}

// noBackoff keeps the SDK's retries but makes them immediate, so tests that
// count attempts do not wait.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// client returns an SDK client for the fake, built with the server's own
// HTTP client as any caller of New might build theirs.
func (f *fakeS3) client() *s3.Client {
	o := s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.srv.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		HTTPClient:   f.srv.Client(),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = noBackoff{}
		}),
	}
	s3store.ConfigureChecksums(&o)
	return s3.New(o)
}

func (f *fakeS3) store(t *testing.T, prefix string) *store.Store {
	t.Helper()
	d, err := s3store.New(f.client(), "bucket", prefix, s3store.Options{Endpoint: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s3store.TrustConditionalDeletes(d)
	s := store.New(d)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// s3Error writes an S3 error response as AWS does.
func s3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", "REQ123")
	w.WriteHeader(status)
	if code != "" {
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>test message for %s</Message><RequestId>REQ123</RequestId><HostId>HOST456</HostId></Error>`, code, code)
	}
}

func TestWireHeaders(t *testing.T) {
	const etag = `"0123456789abcdef0123456789abcdef"`
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			w.Header().Set("ETag", `"new-etag"`)
		case http.MethodGet:
			w.Header().Set("ETag", etag)
			_, _ = io.WriteString(w, "stored bytes")
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	s := f.store(t, "tenure")
	cases := []struct {
		name        string
		call        func() error
		method      string
		ifNoneMatch string // "" means the header must be absent
		ifMatch     string
	}{
		{"create", func() error {
			v, err := s.Put(ctx(t), "lock", []byte("a"), store.IfAbsent())
			if err == nil && v != `"new-etag"` {
				err = fmt.Errorf("version %q, want the ETag verbatim", v)
			}
			return err
		}, http.MethodPut, "*", ""},
		{"compare-and-swap", func() error {
			_, err := s.Put(ctx(t), "lock", []byte("b"), store.IfMatch(etag))
			return err
		}, http.MethodPut, "", etag},
		{"conditional delete", func() error { return s.Delete(ctx(t), "lock", store.IfMatch(etag)) }, http.MethodDelete, "", etag},
		{"unconditional delete", func() error { return s.Delete(ctx(t), "lock", store.Cond{}) }, http.MethodDelete, "", ""},
		{"get", func() error {
			data, v, err := s.Get(ctx(t), "lock")
			if err == nil && (string(data) != "stored bytes" || v != etag) {
				err = fmt.Errorf("got %q, %q", data, v)
			}
			return err
		}, http.MethodGet, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.requests())
			if err := c.call(); err != nil {
				t.Fatal(err)
			}
			if n := len(f.requests()) - before; n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
			r := f.last(t)
			if r.Method != c.method || r.URL.Path != "/bucket/tenure/lock" {
				t.Errorf("request %s %s, want %s /bucket/tenure/lock", r.Method, r.URL.Path, c.method)
			}
			for _, h := range []struct{ name, want string }{{"If-None-Match", c.ifNoneMatch}, {"If-Match", c.ifMatch}} {
				got := r.Header.Values(h.name)
				switch {
				case h.want == "" && len(got) != 0:
					t.Errorf("%s: %q sent, want no such header", h.name, got)
				case h.want != "" && (len(got) != 1 || got[0] != h.want):
					t.Errorf("%s: %q sent, want %q", h.name, got, h.want)
				}
			}
		})
	}
}

func TestPutSendsTheBytes(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("ETag", `"e"`) })
	s := f.store(t, "")
	data := []byte("{\"nonce\":\"a93e\"}\x00\xff")
	if _, err := s.Put(ctx(t), "k", data, store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.body[len(f.body)-1]
	f.mu.Unlock()
	if got != string(data) {
		t.Errorf("body on the wire %q, want %q", got, data)
	}
	if r := f.last(t); r.Header.Get("Content-Encoding") != "" || r.Header.Get("X-Amz-Trailer") != "" {
		t.Errorf("Content-Encoding %q, X-Amz-Trailer %q: want a plain body", r.Header.Get("Content-Encoding"), r.Header.Get("X-Amz-Trailer"))
	}
}

func TestConditionalWritesAreNotRetried(t *testing.T) {
	const v = `"abc"`
	cases := []struct {
		name    string
		call    func(s *store.Store) error
		retried bool
	}{
		{"create", func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }, false},
		{"compare-and-swap", func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch(v)); return err }, false},
		{"conditional delete", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.IfMatch(v)) }, false},
		{"unconditional delete", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.Cond{}) }, true},
		{"get", func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }, true},
		{"list", func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 500, "InternalError") })
			err := c.call(f.store(t, "p"))
			if !errors.Is(err, store.ErrTransient) {
				t.Fatalf("error %v, want one matching ErrTransient", err)
			}
			if !store.IsAmbiguous(err) {
				t.Errorf("IsAmbiguous(%v) = false; a 500 may hide a write that landed", err)
			}
			n := len(f.requests())
			switch {
			case c.retried && n < 2:
				t.Errorf("sent %d times; the SDK should have retried it", n)
			case !c.retried && n != 1:
				t.Errorf("sent %d times; a conditional write must be sent exactly once", n)
			}
		})
	}
}

// A write that lands but whose answer is lost is settled by reading back,
// which needs the first attempt's error, not an SDK retry's 412.
func TestPutResolvedSettlesALostAnswer(t *testing.T) {
	var (
		mu     sync.Mutex
		stored []byte
		puts   int
	)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			puts++
			if stored != nil {
				s3Error(w, 412, "PreconditionFailed")
				return
			}
			stored, _ = io.ReadAll(r.Body)
			s3Error(w, 503, "ServiceUnavailable") // applied, but the client hears an error
		case http.MethodGet:
			if stored == nil {
				s3Error(w, 404, "NoSuchKey")
				return
			}
			w.Header().Set("ETag", `"landed"`)
			_, _ = w.Write(stored)
		}
	})
	s := f.store(t, "")
	data := []byte(`{"nonce":"5f1c"}`)
	v, err := store.PutResolved(ctx(t), s, "lock", data, store.IfAbsent(), store.ResolveOptions{})
	if err != nil {
		t.Fatalf("PutResolved: %v", err)
	}
	if v != `"landed"` {
		t.Errorf("version %q, want the one read back", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if puts != 1 {
		t.Errorf("%d PUTs, want 1", puts)
	}
	if string(stored) != string(data) {
		t.Errorf("stored %q, want %q", stored, data)
	}
}

func TestErrorMapping(t *testing.T) {
	const v = `"abc"`
	create := func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }
	swap := func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch(v)); return err }
	del := func(s *store.Store) error { return s.Delete(ctx(t), "k", store.IfMatch(v)) }
	get := func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }
	list := func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }

	cases := []struct {
		name   string
		status int
		code   string
		call   func(*store.Store) error
		want   error
	}{
		{"412 on create", 412, "PreconditionFailed", create, store.ErrPreconditionFailed},
		{"412 on swap", 412, "PreconditionFailed", swap, store.ErrPreconditionFailed},
		{"412 on delete", 412, "PreconditionFailed", del, store.ErrPreconditionFailed},
		{"404 on swap", 404, "NoSuchKey", swap, store.ErrPreconditionFailed},
		{"404 on conditional delete", 404, "NoSuchKey", del, store.ErrPreconditionFailed},
		{"404 on get", 404, "NoSuchKey", get, store.ErrNotFound},
		{"404 NoSuchBucket on swap", 404, "NoSuchBucket", swap, store.ErrPermanent},
		{"404 NoSuchBucket on get", 404, "NoSuchBucket", get, store.ErrPermanent},
		{"404 NoSuchBucket on list", 404, "NoSuchBucket", list, store.ErrPermanent},
		{"409 ConditionalRequestConflict on create", 409, "ConditionalRequestConflict", create, store.ErrConflict},
		{"409 ConditionalRequestConflict on swap", 409, "ConditionalRequestConflict", swap, store.ErrConflict},
		{"409 other code", 409, "ObjectParentIsFile", create, store.ErrPermanent},
		{"503 SlowDown", 503, "SlowDown", swap, store.ErrThrottled},
		{"429", 429, "TooManyRequests", create, store.ErrThrottled},
		{"500 InternalError", 500, "InternalError", create, store.ErrTransient},
		{"503 ServiceUnavailable", 503, "ServiceUnavailable", create, store.ErrTransient},
		{"400 RequestTimeout", 400, "RequestTimeout", create, store.ErrTransient},
		{"501 NotImplemented", 501, "NotImplemented", create, store.ErrPermanent},
		{"403 AccessDenied", 403, "AccessDenied", get, store.ErrPermanent},
		{"403 InvalidAccessKeyId", 403, "InvalidAccessKeyId", create, store.ErrPermanent},
		{"403 SignatureDoesNotMatch", 403, "SignatureDoesNotMatch", list, store.ErrPermanent},
		{"400 KeyTooLongError", 400, "KeyTooLongError", create, store.ErrInvalidArgument},
		{"400 InvalidArgument", 400, "InvalidArgument", swap, store.ErrInvalidArgument},
	}
	sentinels := []error{store.ErrNotFound, store.ErrPreconditionFailed, store.ErrConflict, store.ErrThrottled,
		store.ErrTransient, store.ErrPermanent, store.ErrInvalidArgument}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, c.status, c.code) })
			err := c.call(f.store(t, "p"))
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one matching %v", err, c.want)
			}
			for _, other := range sentinels {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("errors.As(smithy.APIError) fails on %v", err)
			}
			if apiErr.ErrorCode() != c.code {
				t.Errorf("ErrorCode() = %q, want %q", apiErr.ErrorCode(), c.code)
			}
			var status interface{ HTTPStatusCode() int }
			if !errors.As(err, &status) || status.HTTPStatusCode() != c.status {
				t.Errorf("HTTP status not reachable through errors.As, or wrong: %v", err)
			}
			var se *store.Error
			if !errors.As(err, &se) || se.Op == "" {
				t.Errorf("not a *store.Error naming the operation: %v", err)
			}
		})
	}
}

func TestErrorsWithoutAResponse(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		client := s3.New(s3.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String("http://" + addr),
			UsePathStyle: true,
			Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		})
		d, err := s3store.New(client, "bucket", "", s3store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.New(d).Put(ctx(t), "k", []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
			t.Errorf("error %v: want transient and ambiguous", err)
		}
	})
	t.Run("connection dropped mid-answer", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
				conn.Close()
			}
		})
		_, err := f.store(t, "").Put(ctx(t), "k", []byte("x"), store.IfMatch(`"v"`))
		if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
			t.Errorf("error %v: want transient and ambiguous", err)
		}
		if n := len(f.requests()); n != 1 {
			t.Errorf("sent %d times, want 1", n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		release := make(chan struct{})
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { <-release })
		defer close(release)
		c, cancel := context.WithTimeout(ctx(t), 50*time.Millisecond)
		defer cancel()
		_, err := f.store(t, "").Put(c, "k", []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v: want transient and context.DeadlineExceeded", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {})
		c, cancel := context.WithCancel(ctx(t))
		cancel()
		_, _, err := f.store(t, "").Get(c, "k")
		if !errors.Is(err, context.Canceled) || store.KindOf(err) != driver.Canceled {
			t.Errorf("error %v (kind %v): want context.Canceled", err, store.KindOf(err))
		}
	})
}

func TestOverlongKeyIsRefusedBeforeAnyRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("ETag", `"e"`) })
	const prefix = "some/prefix/"
	s := f.store(t, prefix)
	max := s3store.MaxObjectKeyLen - len(prefix)
	if d := s.Driver().(*s3store.Store); d.MaxKeyLen() != max {
		t.Fatalf("MaxKeyLen() = %d, want %d", d.MaxKeyLen(), max)
	}
	_, err := s.Put(ctx(t), strings.Repeat("k", max+1), []byte("x"), store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("error %v, want ErrInvalidArgument", err)
	}
	if !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), fmt.Sprint(max)) {
		t.Errorf("error %q does not name the prefix and the limit", err)
	}
	_, _, err = s.Get(ctx(t), strings.Repeat("k", max+1))
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Get: error %v, want ErrInvalidArgument", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("%d requests sent for overlong keys", n)
	}
	if _, err := s.Put(ctx(t), strings.Repeat("k", max), []byte("x"), store.IfAbsent()); err != nil {
		t.Fatalf("key of exactly %d bytes: %v", max, err)
	}
	if got := f.last(t).URL.Path; len(got) != len("/bucket/")+s3store.MaxObjectKeyLen {
		t.Errorf("path %d bytes, want the bucket and a %d-byte object key", len(got), s3store.MaxObjectKeyLen)
	}
}

func TestListPagesAndStripsThePrefix(t *testing.T) {
	// The server answers with fewer keys than asked for and a continuation
	// token, as S3 may: the driver must ask again for the rest.
	pages := []string{
		listPage(true, "tok1", "pre/log/01", "pre/log/02"),
		listPage(true, "tok2", "pre/log/03"),
		listPage(false, "", "pre/log/04", "pre/log/05"),
	}
	var calls int
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, pages[min(calls, len(pages)-1)])
		calls++
	})
	s := f.store(t, "pre")
	items, err := s.List(ctx(t), "log/", "log/00", 4)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Key)
		if it.Version != `"etag-`+it.Key[len("log/"):]+`"` || it.Size != 7 {
			t.Errorf("item %+v: want its ETag as version and size 7", it)
		}
	}
	if want := []string{"log/01", "log/02", "log/03", "log/04"}; strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("keys %q, want %q", keys, want)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	want := []url.Values{
		{"list-type": {"2"}, "prefix": {"pre/log/"}, "start-after": {"pre/log/00"}, "max-keys": {"4"}},
		{"list-type": {"2"}, "prefix": {"pre/log/"}, "start-after": {"pre/log/00"}, "max-keys": {"2"}, "continuation-token": {"tok1"}},
		{"list-type": {"2"}, "prefix": {"pre/log/"}, "start-after": {"pre/log/00"}, "max-keys": {"1"}, "continuation-token": {"tok2"}},
	}
	for i, r := range reqs {
		q := r.URL.Query()
		for k, v := range want[i] {
			if q.Get(k) != v[0] {
				t.Errorf("request %d: %s=%q, want %q (query %s)", i, k, q.Get(k), v[0], r.URL.RawQuery)
			}
		}
		if _, ok := want[i]["continuation-token"]; !ok && q.Has("continuation-token") {
			t.Errorf("request %d sent a continuation token", i)
		}
	}
}

func listPage(truncated bool, next string, keys ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><KeyCount>%d</KeyCount><IsTruncated>%v</IsTruncated>`, len(keys), truncated)
	if next != "" {
		fmt.Fprintf(&b, "<NextContinuationToken>%s</NextContinuationToken>", next)
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "<Contents><Key>%s</Key><ETag>&quot;etag-%s&quot;</ETag><Size>7</Size></Contents>", k, k[len("pre/log/"):])
	}
	b.WriteString("</ListBucketResult>")
	return b.String()
}

func TestNewPrefix(t *testing.T) {
	client := s3.New(s3.Options{Region: "us-east-1"})
	for _, c := range []struct{ in, want string }{{"", ""}, {"p", "p/"}, {"p/", "p/"}, {"a/b", "a/b/"}} {
		d, err := s3store.New(client, "bucket", c.in, s3store.Options{})
		if err != nil {
			t.Errorf("New(prefix %q): %v", c.in, err)
			continue
		}
		if d.Prefix() != c.want || d.MaxKeyLen() != s3store.MaxObjectKeyLen-len(c.want) {
			t.Errorf("New(prefix %q): prefix %q, MaxKeyLen %d; want %q", c.in, d.Prefix(), d.MaxKeyLen(), c.want)
		}
	}
	for _, c := range []struct{ name, bucket, prefix string }{
		{"no bucket", "", "p"},
		{"leading slash", "bucket", "/p"},
		{"prefix too long", "bucket", strings.Repeat("p", s3store.MaxObjectKeyLen)},
	} {
		if _, err := s3store.New(client, c.bucket, c.prefix, s3store.Options{}); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		} else if driver.Classify(nil, err) != driver.Permanent {
			t.Errorf("%s: error %v is not permanent", c.name, err)
		}
	}
}
