package azurestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/azurestore"
	"github.com/tenure-io/tenure/store/driver"
)

// fakeAzure is an httptest server that records every request and answers
// with respond. It lets tests see exactly what goes on the wire.
type fakeAzure struct {
	srv     *httptest.Server
	respond http.HandlerFunc

	mu   sync.Mutex
	reqs []*http.Request
	body []string // reqs[i]'s body
}

func newFake(t *testing.T, respond http.HandlerFunc) *fakeAzure {
	t.Helper()
	f := &fakeAzure{respond: respond}
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
func (f *fakeAzure) requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*http.Request(nil), f.reqs...)
}

func (f *fakeAzure) last(t *testing.T) *http.Request {
	t.Helper()
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return reqs[len(reqs)-1]
}

// fakeContainer is the container path every fake store addresses.
const fakeContainer = "/devstoreaccount1/c"

// client returns an SDK client for the fake's container, built as any
// caller of New might build theirs: shared key, the SDK's default retry
// policy (three retries) with delays shortened so tests do not wait.
func (f *fakeAzure) client(t *testing.T) *container.Client {
	return clientFor(t, testutil.AzuriteServer{
		Endpoint:  f.srv.URL + "/devstoreaccount1",
		Account:   testutil.AzuriteAccount,
		Key:       testutil.AzuriteKey,
		Container: "c",
	}, &container.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport:       f.srv.Client(),
		Retry:           policy.RetryOptions{RetryDelay: time.Millisecond, MaxRetryDelay: 2 * time.Millisecond},
		PerCallPolicies: []policy.Policy{azurestore.ListPolicy()},
	}})
}

func (f *fakeAzure) store(t *testing.T, prefix string) *store.Store {
	t.Helper()
	d, err := azurestore.New(f.client(t), prefix, azurestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(d)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// azureError writes an error response as Azure Blob Storage does: the code
// in x-ms-error-code and, except for HEAD, in an XML body.
func azureError(w http.ResponseWriter, r *http.Request, status int, code string) {
	w.Header().Set("x-ms-request-id", "req-123")
	if code != "" {
		w.Header().Set("x-ms-error-code", code)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	if code != "" && r.Method != http.MethodHead {
		fmt.Fprintf(w, "\ufeff<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>%s</Code><Message>test message for %s\nRequestId:req-123</Message></Error>", code, code)
	}
}

// listing writes a List Blobs response with names (relative to nothing:
// they are full blob names) and nextMarker.
func listing(w http.ResponseWriter, names []string, etags []string, nextMarker string) {
	w.Header().Set("Content-Type", "application/xml")
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1/devstoreaccount1/" ContainerName="c"><Blobs>`)
	for i, n := range names {
		fmt.Fprintf(&b, `<Blob><Name>%s</Name><Properties><Etag>%s</Etag><Content-Length>%d</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>`,
			n, etags[i], len(n))
	}
	fmt.Fprintf(&b, `</Blobs><NextMarker>%s</NextMarker></EnumerationResults>`, nextMarker)
	_, _ = io.WriteString(w, b.String())
}

func TestWireHeaders(t *testing.T) {
	const etag = `"0x8DC0123456789AB"`
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			w.Header().Set("ETag", `"0x8DCNEW"`)
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet:
			w.Header().Set("ETag", etag)
			w.Header().Set("x-ms-blob-type", "BlockBlob")
			_, _ = io.WriteString(w, "stored bytes")
		case http.MethodDelete:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	s := f.store(t, "tenure")
	cases := []struct {
		name        string
		call        func() error
		method      string
		ifNoneMatch string // "" means the header must be absent
		ifMatch     string
		also        map[string]string // other headers that must be sent
	}{
		{"create", func() error {
			v, err := s.Put(ctx(t), "lock", []byte("a"), store.IfAbsent())
			if err == nil && v != `"0x8DCNEW"` {
				err = fmt.Errorf("version %q, want the ETag verbatim", v)
			}
			return err
		}, http.MethodPut, "*", "", map[string]string{"x-ms-blob-type": "BlockBlob"}},
		{"compare-and-swap", func() error {
			_, err := s.Put(ctx(t), "lock", []byte("b"), store.IfMatch(etag))
			return err
		}, http.MethodPut, "", etag, map[string]string{"x-ms-blob-type": "BlockBlob"}},
		{"conditional delete", func() error { return s.Delete(ctx(t), "lock", store.IfMatch(etag)) },
			http.MethodDelete, "", etag, map[string]string{"x-ms-delete-snapshots": "include"}},
		{"unconditional delete", func() error { return s.Delete(ctx(t), "lock", store.Cond{}) },
			http.MethodDelete, "", "", map[string]string{"x-ms-delete-snapshots": "include"}},
		{"get", func() error {
			data, v, err := s.Get(ctx(t), "lock")
			if err == nil && (string(data) != "stored bytes" || v != etag) {
				err = fmt.Errorf("got %q, %q", data, v)
			}
			return err
		}, http.MethodGet, "", "", nil},
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
			if want := fakeContainer + "/tenure/lock"; r.Method != c.method || r.URL.Path != want {
				t.Errorf("request %s %s, want %s %s", r.Method, r.URL.Path, c.method, want)
			}
			if !strings.HasPrefix(r.Header.Get("Authorization"), "SharedKey devstoreaccount1:") {
				t.Errorf("Authorization %q: want a shared-key signature", r.Header.Get("Authorization"))
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
			for name, want := range c.also {
				if got := r.Header.Get(name); got != want {
					t.Errorf("%s: %q sent, want %q", name, got, want)
				}
			}
		})
	}
}

func TestPutSendsTheBytes(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"0x1"`)
		w.WriteHeader(http.StatusCreated)
	})
	s := f.store(t, "")
	for _, data := range [][]byte{[]byte("{\"nonce\":\"a93e\"}\x00\xff"), {}} {
		if _, err := s.Put(ctx(t), "k", data, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		got := f.body[len(f.body)-1]
		f.mu.Unlock()
		r := f.last(t)
		if got != string(data) || r.ContentLength != int64(len(data)) {
			t.Errorf("body on the wire %q (Content-Length %d), want %q", got, r.ContentLength, data)
		}
		if r.URL.Path != fakeContainer+"/k" {
			t.Errorf("path %q, want %q", r.URL.Path, fakeContainer+"/k")
		}
	}
}

// TestConditionalWritesAreSentOnce: a conditional write whose outcome is
// unknown (503, 500, a dropped connection) is reported at once, never
// repeated by the SDK, and the error says it may have landed.
func TestConditionalWritesAreSentOnce(t *testing.T) {
	answers := []struct {
		name    string
		respond http.HandlerFunc
		want    error
	}{
		{"503 ServerBusy", func(w http.ResponseWriter, r *http.Request) {
			azureError(w, r, http.StatusServiceUnavailable, "ServerBusy")
		}, store.ErrThrottled},
		{"500 OperationTimedOut", func(w http.ResponseWriter, r *http.Request) {
			azureError(w, r, http.StatusInternalServerError, "OperationTimedOut")
		}, store.ErrTransient},
		{"429", func(w http.ResponseWriter, r *http.Request) {
			azureError(w, r, http.StatusTooManyRequests, "")
		}, store.ErrThrottled},
		{"connection dropped", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, store.ErrTransient},
	}
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			f := newFake(t, a.respond)
			s := f.store(t, "p")
			writes := map[string]func() error{
				"create": func() error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err },
				"swap":   func() error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch(`"0x1"`)); return err },
				"delete": func() error { return s.Delete(ctx(t), "k", store.IfMatch(`"0x1"`)) },
			}
			for name, write := range writes {
				before := len(f.requests())
				err := write()
				if n := len(f.requests()) - before; n != 1 {
					t.Errorf("%s: %d requests, want exactly 1", name, n)
				}
				if !errors.Is(err, a.want) || !store.IsAmbiguous(err) {
					t.Errorf("%s: %v; want an ambiguous error matching %v", name, err, a.want)
				}
			}
		})
	}
}

// TestReadsAreRetried: reads and unconditional deletes keep the client's
// retry policy.
func TestReadsAreRetried(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		azureError(w, r, http.StatusServiceUnavailable, "ServerBusy")
	})
	s := f.store(t, "p")
	calls := map[string]func() error{
		"get":                  func() error { _, _, err := s.Get(ctx(t), "k"); return err },
		"list":                 func() error { _, err := s.List(ctx(t), "", "", 10); return err },
		"unconditional delete": func() error { return s.Delete(ctx(t), "k", store.Cond{}) },
	}
	for name, call := range calls {
		before := len(f.requests())
		err := call()
		// The SDK's default: one try and three retries.
		if n := len(f.requests()) - before; n != 4 {
			t.Errorf("%s: %d requests, want 4 (the SDK's retries)", name, n)
		}
		if !errors.Is(err, store.ErrThrottled) {
			t.Errorf("%s: %v, want ErrThrottled", name, err)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	type op struct {
		name string
		call func(s *store.Store) error
	}
	var (
		get    = op{"get", func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }}
		create = op{"create", func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }}
		swap   = op{"swap", func(s *store.Store) error {
			_, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch(`"0x1"`))
			return err
		}}
		delMatch = op{"delete if-match", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.IfMatch(`"0x1"`)) }}
		delAny   = op{"delete", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.Cond{}) }}
		list     = op{"list", func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }}
	)
	cases := []struct {
		op     op
		status int
		code   string
		want   error // nil: success
	}{
		{get, 404, "BlobNotFound", store.ErrNotFound},
		{get, 404, "ContainerNotFound", store.ErrPermanent},
		{get, 403, "AuthenticationFailed", store.ErrPermanent},
		{get, 403, "AuthorizationPermissionMismatch", store.ErrPermanent},
		{get, 400, "InvalidResourceName", store.ErrInvalidArgument},
		{create, 409, "BlobAlreadyExists", store.ErrPreconditionFailed},
		{create, 412, "ConditionNotMet", store.ErrPreconditionFailed},
		{create, 404, "ContainerNotFound", store.ErrPermanent},
		{create, 403, "AuthenticationFailed", store.ErrPermanent},
		{create, 403, "AuthorizationFailure", store.ErrPermanent},
		{create, 400, "InvalidResourceName", store.ErrInvalidArgument},
		{create, 413, "RequestBodyTooLarge", store.ErrInvalidArgument},
		{create, 412, "LeaseIdMissing", store.ErrPermanent},
		{create, 409, "LeaseAlreadyPresent", store.ErrPermanent},
		{create, 409, "BlobArchived", store.ErrPermanent},
		{create, 503, "ServerBusy", store.ErrThrottled},
		{create, 500, "OperationTimedOut", store.ErrTransient},
		{create, 500, "InternalError", store.ErrTransient},
		{create, 502, "", store.ErrTransient},
		{create, 400, "Md5Mismatch", store.ErrTransient},
		{swap, 412, "ConditionNotMet", store.ErrPreconditionFailed},
		{swap, 404, "BlobNotFound", store.ErrPreconditionFailed},
		{swap, 404, "ContainerNotFound", store.ErrPermanent},
		{swap, 412, "LeaseIdMismatchWithBlobOperation", store.ErrPermanent},
		{delMatch, 412, "ConditionNotMet", store.ErrPreconditionFailed},
		{delMatch, 404, "BlobNotFound", store.ErrPreconditionFailed},
		{delMatch, 409, "SnapshotsPresent", store.ErrPermanent},
		{delAny, 404, "BlobNotFound", nil},
		{delAny, 404, "ContainerNotFound", store.ErrPermanent},
		{list, 404, "ContainerNotFound", store.ErrPermanent},
		{list, 403, "AuthenticationFailed", store.ErrPermanent},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %d %s", c.op.name, c.status, c.code), func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { azureError(w, r, c.status, c.code) })
			err := c.op.call(f.store(t, "p"))
			if c.want == nil {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v (kind %v), want %v", err, store.KindOf(err), c.want)
			}
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != c.status || re.ErrorCode != c.code {
				t.Errorf("errors.As does not reach the SDK's *azcore.ResponseError with %d %s: %v", c.status, c.code, err)
			}
		})
	}
}

func TestValueTooLarge(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("unexpected request %s %s", r.Method, r.URL) })
	s := f.store(t, "p")
	_, err := s.Put(ctx(t), "k", make([]byte, azurestore.MaxValueSize+1), store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Put over MaxValueSize: %v, want ErrInvalidArgument naming the limit", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent for a value over the limit", n)
	}
}

func TestListRequests(t *testing.T) {
	// Two pages: the first ends with a marker. ETags in a listing are
	// unquoted, as Azure sends them.
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("marker") == "" {
			listing(w, []string{"tenure/log/1", "tenure/log/2"}, []string{"0x1", "0x2"}, "page2")
			return
		}
		listing(w, []string{"tenure/log/3"}, []string{"0x3"}, "")
	})
	s := f.store(t, "tenure")
	items, err := s.List(ctx(t), "log/", "log/0", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Item{{Key: "log/1", Version: `"0x1"`, Size: 12}, {Key: "log/2", Version: `"0x2"`, Size: 12}, {Key: "log/3", Version: `"0x3"`, Size: 12}}
	if fmt.Sprint(items) != fmt.Sprint(want) {
		t.Errorf("List = %v, want %v (prefix stripped, ETags quoted as headers carry them)", items, want)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2 (one per page)", len(reqs))
	}
	q := reqs[0].URL.Query()
	for k, v := range map[string]string{"restype": "container", "comp": "list", "prefix": "tenure/log/", "startFrom": "tenure/log/0", "maxresults": "11"} {
		if got := q.Get(k); got != v {
			t.Errorf("first request: %s=%q, want %q", k, got, v)
		}
	}
	if got := reqs[1].URL.Query().Get("marker"); got != "page2" {
		t.Errorf("second request: marker=%q, want page2", got)
	}
}

// TestListWithoutStartFrom: a service that ignores startFrom (older API
// versions) lists from the start of the prefix; the driver skips keys up
// to after itself.
func TestListWithoutStartFrom(t *testing.T) {
	names := []string{"p/a", "p/b", "p/c", "p/d", "p/e"}
	etags := []string{"0xa", "0xb", "0xc", "0xd", "0xe"}
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		// Two blobs a page, from the marker, whatever startFrom says.
		i := 0
		if m := r.URL.Query().Get("marker"); m != "" {
			fmt.Sscan(m, &i)
		}
		next := ""
		if i+2 < len(names) {
			next = fmt.Sprint(i + 2)
		}
		end := min(i+2, len(names))
		listing(w, names[i:end], etags[i:end], next)
	})
	s := f.store(t, "p")
	items, err := s.List(ctx(t), "", "b", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keysOf(items)); got != "[c d]" {
		t.Errorf("List after b, limit 2 = %s, want [c d]", got)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

func keysOf(items []store.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}

// TestMissingETag: a success without an ETag gives no version, and says
// so.
func TestMissingETag(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusCreated)
			return
		}
		_, _ = io.WriteString(w, "x")
	})
	s := f.store(t, "p")
	_, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent())
	if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
		t.Errorf("Put answered without an ETag: %v, want an ambiguous transient error", err)
	}
	_, _, err = s.Get(ctx(t), "k")
	if store.KindOf(err) != driver.Permanent {
		t.Errorf("Get answered without an ETag: %v, want a permanent error", err)
	}
}

func TestCheckContainer(t *testing.T) {
	cases := []struct {
		status int
		code   string
		kind   driver.Kind
		says   string
	}{
		{404, "ContainerNotFound", driver.Permanent, "does not exist"},
		{403, "AuthenticationFailed", driver.Permanent, "denied"},
		{403, "AuthorizationPermissionMismatch", driver.Permanent, "Storage Blob Data Contributor"},
		{400, "InvalidHeaderValue", driver.InvalidArgument, "check container"},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { azureError(w, r, c.status, c.code) })
			// A SAS client: the signature is in the container URL's query.
			client, err := container.NewClientWithNoCredential(f.srv.URL+fakeContainer+"?sv=2026-02-06&sig=SECRET", &container.ClientOptions{
				ClientOptions: policy.ClientOptions{Transport: f.srv.Client(), Retry: policy.RetryOptions{MaxRetries: -1}},
			})
			if err != nil {
				t.Fatal(err)
			}
			d, err := azurestore.New(client, "p", azurestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = d.CheckContainer(ctx(t))
			if driver.Classify(d, err) != c.kind || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), fakeContainer) {
				t.Errorf("CheckContainer: %v; want a %v error naming the container and saying %q", err, c.kind, c.says)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the error shows the SAS signature: %v", err)
			}
			if q := f.last(t).URL.Query(); q.Get("comp") != "list" || q.Get("prefix") != "p/" || q.Get("maxresults") != "1" {
				t.Errorf("request query %v, want a listing of one blob under p/", q)
			}
		})
	}
}

// TestUnexpectedSuccessIsAmbiguous: a write answered with a success status
// the SDK does not expect (200 where Put Blob answers 201, as a proxy in
// front of the service might) may have been applied.
func TestUnexpectedSuccessIsAmbiguous(t *testing.T) {
	for _, body := range []string{"", "<html>ok</html>"} {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"0x1"`)
			_, _ = io.WriteString(w, body)
		})
		s := f.store(t, "p")
		for _, cond := range []store.Cond{store.IfAbsent(), store.IfMatch(`"0x1"`)} {
			_, err := s.Put(ctx(t), "k", []byte("x"), cond)
			if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
				t.Errorf("%v put answered 200 with %q: %v; want an ambiguous transient error", cond.Kind, body, err)
			}
		}
	}
}
