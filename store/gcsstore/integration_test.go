package gcsstore_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/storage/v1"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// fake-gcs-server ignores ifGenerationMatch on a delete: the driver finds
// that out and refuses conditional deletes there with ErrUnsupported
// naming the server, deleting nothing; unconditional deletes work.
func TestConditionalDeleteOnFakeGCS(t *testing.T) {
	srv := testutil.FakeGCS(t)
	s := openOn(srv)(t)
	defer s.Close()
	v1, err := s.Put(ctx(t), "k", []byte("one"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Put(ctx(t), "k", []byte("two"), store.IfMatch(v1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, key, version string }{
		{"on a stale version", "k", v1},
		{"on the current version", "k", v2},
		{"of a missing key", "absent", v2},
	} {
		err := s.Delete(ctx(t), c.key, store.IfMatch(c.version))
		if !errors.Is(err, store.ErrUnsupported) || !strings.Contains(err.Error(), srv.Endpoint) ||
			!strings.Contains(err.Error(), "a delete on a stale version succeeded") {
			t.Fatalf("conditional delete %s: %v; want ErrUnsupported naming %s and what it ignores "+
				"(if fake-gcs-server was fixed, update doc.go)", c.name, err, srv.Endpoint)
		}
	}
	if data, v, err := s.Get(ctx(t), "k"); err != nil || string(data) != "two" || v != v2 {
		t.Fatalf("k after the refused deletes: %q, %q, %v; want \"two\" at %q", data, v, err, v2)
	}
	if err := s.Delete(ctx(t), "k", store.Cond{}); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}
	if items, err := s.List(ctx(t), "", "", 10); err != nil || len(items) != 0 {
		t.Fatalf("List after deletes = %v, %v; want nothing (no scratch key left)", items, err)
	}
}

// The probe finds create-if-absent and compare-and-swap enforced on
// fake-gcs-server, and conditional deletes refused by the driver, which it
// accepts.
func TestProbeOnFakeGCS(t *testing.T) {
	s := openOn(testutil.FakeGCS(t))(t)
	defer s.Close()
	res, err := store.Probe(ctx(t), s, 3)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if !res.OK() || !res.CreateIfAbsent || !res.IfMatch {
		t.Errorf("probe = %+v; want create-if-absent and if-match enforced", res)
	}
	if res.DeleteIfMatch || res.DeleteUnsupported == "" {
		t.Errorf("probe = %+v; want conditional deletes refused: if fake-gcs-server was fixed, update doc.go", res)
	}
	t.Logf("probe: create %v\n  swap %v\n  get %v", res.CreatePut, res.CASPut, res.Get)
}

// lossyProxy forwards requests to a server and, while armed, lets the next
// upload land but loses its answer: it answers 503 in its place, or breaks
// the connection.
type lossyProxy struct {
	srv    *httptest.Server
	target string

	mu      sync.Mutex
	armed   string // "", "503" or "reset"
	uploads int
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	t.Helper()
	p := &lossyProxy{target: target}
	client := &http.Client{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.ContentLength = r.ContentLength
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)

		p.mu.Lock()
		mode := ""
		if op(r) == "upload" {
			p.uploads++
			mode, p.armed = p.armed, ""
		}
		p.mu.Unlock()
		switch mode {
		case "503":
			gcsError(w, http.StatusServiceUnavailable, "backendError")
			return
		case "reset":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	t.Cleanup(client.CloseIdleConnections)
	return p
}

// arm makes the proxy lose the answer to the next upload, and resets the
// upload count.
func (p *lossyProxy) arm(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.uploads = mode, 0
}

func (p *lossyProxy) uploadCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uploads
}

// TestLostAnswer makes fake-gcs-server apply a conditional write whose
// answer the client never gets. The driver must report it once, as
// ambiguous, instead of sending it again into a 412 against its own
// write; PutResolved then finds that it landed.
func TestLostAnswer(t *testing.T) {
	srv := testutil.FakeGCS(t)
	for _, mode := range []string{"503", "reset"} {
		t.Run(mode, func(t *testing.T) {
			p := newLossyProxy(t, srv.Endpoint)
			s, err := store.Open(ctx(t), testutil.GCSServer{Endpoint: p.srv.URL, Bucket: srv.Bucket}.URL(newPrefix()))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			p.arm(mode)
			_, err = s.Put(ctx(t), "create", []byte(`{"nonce":"1"}`), store.IfAbsent())
			if !store.IsAmbiguous(err) || errors.Is(err, store.ErrPreconditionFailed) {
				t.Fatalf("create whose answer was lost: %v; want an ambiguous error", err)
			}
			if n := p.uploadCount(); n != 1 {
				t.Fatalf("%d uploads sent, want 1", n)
			}
			if data, _, err := s.Get(ctx(t), "create"); err != nil || string(data) != `{"nonce":"1"}` {
				t.Fatalf("the write should have landed: %q, %v", data, err)
			}

			v, err := s.Put(ctx(t), "swap", []byte(`{"nonce":"2"}`), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			p.arm(mode)
			want := []byte(`{"nonce":"3"}`)
			nv, err := store.PutResolved(ctx(t), s, "swap", want, store.IfMatch(v), store.ResolveOptions{})
			if err != nil {
				t.Fatalf("PutResolved after a lost answer: %v", err)
			}
			if data, gv, err := s.Get(ctx(t), "swap"); err != nil || string(data) != string(want) || gv != nv {
				t.Fatalf("Get = %q, %q, %v; want %q, %q", data, gv, err, want, nv)
			}
			if n := p.uploadCount(); n != 1 {
				t.Errorf("%d uploads sent, want 1: PutResolved should read back, not write again", n)
			}
		})
	}
}

// TestLibraryRetryHazard is the reason the driver sends conditional writes
// once: a create whose answer is lost, sent again by the service's own
// retry (WithRetry), fails with 412 against its own write, which landed.
func TestLibraryRetryHazard(t *testing.T) {
	srv := testutil.FakeGCS(t)
	p := newLossyProxy(t, srv.Endpoint)
	service, err := storage.NewService(ctx(t), gcsstore.ClientOptions(p.srv.URL)...)
	if err != nil {
		t.Fatal(err)
	}

	name := newPrefix() + "k"
	p.arm("503")
	// The default chunk size: a value that fits in one chunk is sent in
	// one request, buffered so that it can be sent again. (With ChunkSize
	// 0, as the driver sets, the value is streamed; and the driver never
	// asks for WithRetry.)
	_, err = service.Objects.Insert(srv.Bucket, &storage.Object{Name: name}).
		Media(strings.NewReader("mine")).
		IfGenerationMatch(0).
		WithRetry(&gax.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}, nil).
		Context(ctx(t)).Do()
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusPreconditionFailed {
		t.Fatalf("the service's own retry: %v; want 412 against its own write", err)
	}
	if n := p.uploadCount(); n != 2 {
		t.Errorf("%d uploads, want 2 (the lost one and the retry)", n)
	}
	res, err := service.Objects.Get(srv.Bucket, name).Context(ctx(t)).Download()
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if data, _ := io.ReadAll(res.Body); string(data) != "mine" {
		t.Fatalf("stored %q; the write that was reported lost should have landed", data)
	}
}
