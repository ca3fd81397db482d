package gcsstore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/storage/v1"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// fakeGCS is an httptest server that speaks enough of the Cloud Storage
// JSON API for the driver, records every request, and answers with
// respond. It lets tests see exactly what goes on the wire.
type fakeGCS struct {
	srv     *httptest.Server
	respond http.HandlerFunc

	mu   sync.Mutex
	reqs []*http.Request
}

func newFake(t *testing.T, respond http.HandlerFunc) *fakeGCS {
	t.Helper()
	f := &fakeGCS{respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.mu.Unlock()
		f.respond(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// requests returns the requests received so far, except the listing that
// Open makes to check the bucket.
func (f *fakeGCS) requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*http.Request
	for _, r := range f.reqs {
		if r.URL.Query().Get("maxResults") == "1" && op(r) == "list" {
			continue
		}
		out = append(out, r)
	}
	return out
}

func (f *fakeGCS) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = nil
}

// url returns the store URL of prefix in the bucket "bucket" on the fake.
func (f *fakeGCS) url(prefix string) string {
	return "gs://bucket/" + prefix + "?endpoint=" + url.QueryEscape(f.srv.URL)
}

// store opens a store on the fake through store.Open, as a user would:
// with the retry settings of the clients Open builds.
func (f *fakeGCS) store(t *testing.T, prefix string) *store.Store {
	t.Helper()
	s, err := store.Open(ctx(t), f.url(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	gcsstore.TrustConditionalDeletes(s.Driver().(*gcsstore.Store))
	f.reset()
	return s
}

// op names the JSON API call r makes.
func op(r *http.Request) string {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/upload/storage/v1/b/"):
		return "upload"
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/o"):
		return "list"
	case r.Method == http.MethodGet && strings.Contains(p, "/o/"):
		return "get"
	case r.Method == http.MethodDelete:
		return "delete"
	}
	return r.Method + " " + p
}

// objectName returns the object an upload, get or delete names.
func objectName(r *http.Request) string {
	if n := r.URL.Query().Get("name"); n != "" {
		return n
	}
	_, name, _ := strings.Cut(r.URL.Path, "/o/")
	return name
}

// serveOK answers every call as Cloud Storage answers a success: uploads
// with generation 1001, reads with generation 1000 and "stored bytes",
// listings with nothing.
func serveOK(w http.ResponseWriter, r *http.Request) {
	switch op(r) {
	case "upload":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"storage#object","bucket":"bucket","name":%q,"generation":"1001","metageneration":"1","size":"1"}`, objectName(r))
	case "get":
		w.Header().Set("X-Goog-Generation", "1000")
		w.Header().Set("X-Goog-Metageneration", "1")
		_, _ = io.WriteString(w, "stored bytes")
	case "list":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"storage#objects"}`)
	case "delete":
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unexpected call", http.StatusNotImplemented)
	}
}

// gcsError writes a JSON API error response as Cloud Storage does.
func gcsError(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":"test message for %s","errors":[{"domain":"global","reason":%q,"message":"test message for %s"}]}}`,
		status, reason, reason, reason)
}

func TestWireConditions(t *testing.T) {
	f := newFake(t, serveOK)
	s := f.store(t, "tenure")
	cases := []struct {
		name       string
		call       func() error
		op         string
		object     string
		ifGenMatch string // "" means the parameter must be absent
	}{
		{"create", func() error {
			v, err := s.Put(ctx(t), "lock", []byte("a"), store.IfAbsent())
			if err == nil && v != "1001" {
				return fmt.Errorf("version %q, want the generation 1001", v)
			}
			return err
		}, "upload", "tenure/lock", "0"},
		{"compare-and-swap", func() error {
			_, err := s.Put(ctx(t), "lock", []byte("b"), store.IfMatch("1000"))
			return err
		}, "upload", "tenure/lock", "1000"},
		{"conditional delete", func() error { return s.Delete(ctx(t), "lock", store.IfMatch("1000")) }, "delete", "tenure/lock", "1000"},
		{"unconditional delete", func() error { return s.Delete(ctx(t), "lock", store.Cond{}) }, "delete", "tenure/lock", ""},
		{"get", func() error {
			data, v, err := s.Get(ctx(t), "lock")
			if err == nil && (string(data) != "stored bytes" || v != "1000") {
				return fmt.Errorf("got %q version %q, want \"stored bytes\" version 1000", data, v)
			}
			return err
		}, "get", "tenure/lock", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.reset()
			if err := c.call(); err != nil {
				t.Fatal(err)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if got := op(r); got != c.op {
				t.Errorf("call %q, want %q", got, c.op)
			}
			if got := objectName(r); got != c.object {
				t.Errorf("object %q, want %q", got, c.object)
			}
			q := r.URL.Query()
			if got, ok := q["ifGenerationMatch"]; c.ifGenMatch == "" && ok {
				t.Errorf("ifGenerationMatch=%q sent, want none", got)
			} else if c.ifGenMatch != "" && q.Get("ifGenerationMatch") != c.ifGenMatch {
				t.Errorf("ifGenerationMatch=%q, want %q (query %s)", q.Get("ifGenerationMatch"), c.ifGenMatch, r.URL.RawQuery)
			}
			for _, p := range []string{"ifGenerationNotMatch", "ifMetagenerationMatch", "generation"} {
				if q.Has(p) {
					t.Errorf("unexpected parameter %s=%q", p, q.Get(p))
				}
			}
			if c.op == "upload" && q.Get("uploadType") != "multipart" {
				t.Errorf("uploadType=%q, want one multipart request", q.Get("uploadType"))
			}
		})
	}
}

// The upload declares the value's CRC32C, so that the server refuses
// damaged bytes instead of storing them.
func TestWireUploadDeclaresChecksum(t *testing.T) {
	f := newFake(t, serveOK)
	s := f.store(t, "p")
	if _, err := s.Put(ctx(t), "k", []byte("hello"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	body, _ := io.ReadAll(reqs[0].Body)
	// CRC32C("hello") = 0x9a71bb4c, base64 of its big-endian bytes.
	if !bytes.Contains(body, []byte(`"crc32c":"mnG7TA=="`)) {
		t.Errorf("the upload's metadata does not declare crc32c mnG7TA==:\n%s", body)
	}
}

// A version that cannot be a generation matches no object: the write fails
// as a precondition failure without a request, and generation 0 (which the
// API reads as "does not exist") is never sent.
func TestVersionsThatAreNotGenerations(t *testing.T) {
	f := newFake(t, serveOK)
	s := f.store(t, "p")
	for _, v := range []string{"0", "-5", "abc", "12x", "007", "+7", "99999999999999999999", " 7"} {
		_, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch(v))
		if !errors.Is(err, store.ErrPreconditionFailed) {
			t.Errorf("Put IfMatch(%q): %v, want ErrPreconditionFailed", v, err)
		}
		if err := s.Delete(ctx(t), "k", store.IfMatch(v)); !errors.Is(err, store.ErrPreconditionFailed) {
			t.Errorf("Delete IfMatch(%q): %v, want ErrPreconditionFailed", v, err)
		}
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("%d requests sent for versions that are no generation; first: %s %s", len(reqs), reqs[0].Method, reqs[0].URL)
	}
}

// A conditional write answered 503 (or 429, or 500) is sent once, and its
// error is ambiguous: the write may have landed. A read answered the same
// way is made again, up to three attempts.
func TestConditionalWritesAreSentOnce(t *testing.T) {
	for _, c := range []struct {
		status   int
		reason   string
		sentinel error
	}{
		{503, "backendError", store.ErrTransient},
		{500, "internalError", store.ErrTransient},
		{429, "rateLimitExceeded", store.ErrThrottled},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if op(r) == "list" {
					serveOK(w, r)
					return
				}
				gcsError(w, c.status, c.reason)
			})
			s := f.store(t, "p")
			writes := map[string]func(context.Context) error{
				"create": func(ctx context.Context) error { _, err := s.Put(ctx, "k", []byte("x"), store.IfAbsent()); return err },
				"swap": func(ctx context.Context) error {
					_, err := s.Put(ctx, "k", []byte("x"), store.IfMatch("42"))
					return err
				},
				"delete": func(ctx context.Context) error { return s.Delete(ctx, "k", store.IfMatch("42")) },
			}
			for name, write := range writes {
				f.reset()
				// Bounded: an upload retried by the service itself
				// (WithRetry) goes on until the context ends, so a
				// regression would otherwise hang.
				wctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
				err := write(wctx)
				cancel()
				if !errors.Is(err, c.sentinel) {
					t.Errorf("%s: %v, want %v", name, err, c.sentinel)
				}
				if !store.IsAmbiguous(err) {
					t.Errorf("%s: IsAmbiguous(%v) = false", name, err)
				}
				var ge *googleapi.Error
				if !errors.As(err, &ge) || ge.Code != c.status {
					t.Errorf("%s: errors.As does not reach a *googleapi.Error with code %d: %v", name, c.status, err)
				}
				if n := len(f.requests()); n != 1 {
					t.Errorf("%s: sent %d times, want once", name, n)
				}
			}

			// The control: the driver repeats what it may.
			f.reset()
			_, _, err := s.Get(ctx(t), "k")
			if !errors.Is(err, c.sentinel) {
				t.Errorf("get: %v, want %v", err, c.sentinel)
			}
			if n := len(f.requests()); n != 3 {
				t.Errorf("get: sent %d times, want 3", n)
			}
			f.reset()
			if err := s.Delete(ctx(t), "k", store.Cond{}); !errors.Is(err, c.sentinel) {
				t.Errorf("unconditional delete: %v, want %v", err, c.sentinel)
			}
			if n := len(f.requests()); n != 3 {
				t.Errorf("unconditional delete: sent %d times, want 3", n)
			}
		})
	}
}

// List asks for the store prefix plus the caller's, starts at after (the
// server's startOffset is inclusive) and skips it, strips the store prefix,
// and reads versions and sizes.
func TestWireList(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if op(r) != "list" {
			serveOK(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("maxResults") == "1" {
			_, _ = io.WriteString(w, `{"kind":"storage#objects"}`)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"storage#objects","items":[
			{"name":"tenure/log/0002","generation":"7","size":"3"},
			{"name":"tenure/log/0003","generation":"8","size":"4"},
			{"name":"tenure/log/0004","generation":"9","size":"5"}]}`)
	})
	s := f.store(t, "tenure")
	items, err := s.List(ctx(t), "log/", "log/0002", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Item{{Key: "log/0003", Version: "8", Size: 4}, {Key: "log/0004", Version: "9", Size: 5}}
	if fmt.Sprint(items) != fmt.Sprint(want) {
		t.Errorf("List = %v, want %v", items, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	q := reqs[0].URL.Query()
	for p, v := range map[string]string{"prefix": "tenure/log/", "startOffset": "tenure/log/0002", "maxResults": "3"} {
		if q.Get(p) != v {
			t.Errorf("%s=%q, want %q (query %s)", p, q.Get(p), v, reqs[0].URL.RawQuery)
		}
	}
	if f := q.Get("fields"); !strings.Contains(f, "name") || !strings.Contains(f, "generation") || !strings.Contains(f, "size") {
		t.Errorf("fields=%q: want only the name, generation and size of items", f)
	}
}

// Keys that Cloud Storage refuses are refused before any request.
func TestKeysCloudStorageRefuses(t *testing.T) {
	f := newFake(t, serveOK)
	s := f.store(t, "") // no prefix: the key is the whole object name
	for _, key := range []string{".", "..", ".well-known/acme-challenge/x"} {
		_, err := s.Put(ctx(t), key, []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Put(%q): %v, want ErrInvalidArgument", key, err)
		}
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("%d requests sent for keys Cloud Storage refuses", len(reqs))
	}
	// Under a prefix they are ordinary names.
	p := f.store(t, "p")
	for _, key := range []string{".", "..", ".well-known/acme-challenge/x"} {
		if _, err := p.Put(ctx(t), key, []byte("x"), store.IfAbsent()); err != nil {
			t.Errorf("Put(%q) under a prefix: %v", key, err)
		}
	}
}

// A response without the object's generation cannot be used: Get says so
// rather than return a version that would match nothing.
func TestGetWithoutGeneration(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if op(r) == "get" {
			_, _ = io.WriteString(w, "bytes")
			return
		}
		serveOK(w, r)
	})
	s := f.store(t, "p")
	if _, _, err := s.Get(ctx(t), "k"); !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("Get without X-Goog-Generation: %v, want ErrPermanent about the generation", err)
	}
}

// Close leaves a service passed to New to its owner.
func TestCloseLeavesTheCallersService(t *testing.T) {
	f := newFake(t, serveOK)
	service, err := storage.NewService(ctx(t), gcsstore.ClientOptions(f.srv.URL)...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := gcsstore.New(service, "bucket", "p", gcsstore.Options{Endpoint: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if d.Prefix() != "p/" || d.MaxKeyLen() != gcsstore.MaxObjectNameLen-2 {
		t.Errorf("Prefix %q, MaxKeyLen %d; want \"p/\", %d", d.Prefix(), d.MaxKeyLen(), gcsstore.MaxObjectNameLen-2)
	}
	if err := store.New(d).Close(); err != nil {
		t.Fatal(err)
	}
	res, err := service.Objects.Get("bucket", "p/k").Context(ctx(t)).Download()
	if err != nil {
		t.Fatalf("the caller's service no longer works after Close: %v", err)
	}
	res.Body.Close()
}

// TestAnswersThatDoNotParseAreAmbiguous: an upload answered with a success
// whose body is not the object's JSON (a proxy's page, an empty or cut
// document) may have been applied.
func TestAnswersThatDoNotParseAreAmbiguous(t *testing.T) {
	for name, body := range map[string]string{"html": "<html>ok</html>", "empty": "", "cut": `{"kind":"storage#object","generation":`, "wrong type": `{"generation":[1]}`} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if op(r) != "upload" {
					serveOK(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, body)
			})
			s := f.store(t, "")
			for _, cond := range []store.Cond{store.IfAbsent(), store.IfMatch("1000")} {
				_, err := s.Put(ctx(t), "k", []byte("x"), cond)
				if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
					t.Errorf("%v upload answered 200 with %q: %v; want an ambiguous transient error", cond.Kind, body, err)
				}
			}
		})
	}
}

// crc32cHeader is the X-Goog-Hash value Cloud Storage sends for data.
func crc32cHeader(data []byte) string {
	crc := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	return "crc32c=" + base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc)) + ",md5=1B2M2Y8AsgTpgAmY7PhCfg=="
}

// Get checks the CRC32C that the download announces against the bytes it
// read, and reads again when they differ; it skips the check when the
// bytes were decompressed on the way, since the CRC32C is that of the
// stored, compressed bytes.
func TestWireGetChecksCRC32C(t *testing.T) {
	value := []byte("stored bytes")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(value)
	_ = zw.Close()

	cases := []struct {
		name    string
		serve   func(w http.ResponseWriter)
		wantErr bool
	}{
		{"matches", func(w http.ResponseWriter) {
			w.Header().Set("X-Goog-Hash", crc32cHeader(value))
			_, _ = w.Write(value)
		}, false},
		{"differs", func(w http.ResponseWriter) {
			w.Header().Set("X-Goog-Hash", crc32cHeader([]byte("other bytes")))
			_, _ = w.Write(value)
		}, true},
		{"none announced", func(w http.ResponseWriter) { _, _ = w.Write(value) }, false},
		// The HTTP client decompresses a gzipped answer it asked for.
		{"decompressed by the client", func(w http.ResponseWriter) {
			w.Header().Set("X-Goog-Hash", crc32cHeader(gz.Bytes()))
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz.Bytes())
		}, false},
		// An object stored gzipped is served decompressed.
		{"decompressed by the server", func(w http.ResponseWriter) {
			w.Header().Set("X-Goog-Hash", crc32cHeader(gz.Bytes()))
			w.Header().Set("X-Goog-Stored-Content-Encoding", "gzip")
			_, _ = w.Write(value)
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if op(r) != "get" {
					serveOK(w, r)
					return
				}
				w.Header().Set("X-Goog-Generation", "1000")
				c.serve(w)
			})
			s := f.store(t, "p")
			data, v, err := s.Get(ctx(t), "k")
			n := len(f.requests())
			if c.wantErr {
				if !errors.Is(err, store.ErrTransient) || !strings.Contains(err.Error(), "CRC32C") {
					t.Fatalf("Get = %q, %v; want ErrTransient about the CRC32C", data, err)
				}
				if n != 3 {
					t.Errorf("%d downloads, want 3", n)
				}
				return
			}
			if err != nil || string(data) != string(value) || v != "1000" {
				t.Fatalf("Get = %q, %q, %v; want %q, version 1000", data, v, err, value)
			}
			if n != 1 {
				t.Errorf("%d downloads, want 1", n)
			}
		})
	}
}

// A download whose body breaks off is made again, and the value comes
// whole from the answer that completes.
func TestWireGetRepeatsABodyCutShort(t *testing.T) {
	var downloads atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if op(r) != "get" {
			serveOK(w, r)
			return
		}
		w.Header().Set("X-Goog-Generation", "1000")
		if downloads.Add(1) == 1 {
			w.Header().Set("Content-Length", "12")
			_, _ = io.WriteString(w, "stored")
			return // the server closes the connection short of 12 bytes
		}
		_, _ = io.WriteString(w, "stored bytes")
	})
	s := f.store(t, "p")
	data, v, err := s.Get(ctx(t), "k")
	if err != nil || string(data) != "stored bytes" || v != "1000" {
		t.Fatalf("Get = %q, %q, %v; want \"stored bytes\", version 1000", data, v, err)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d downloads, want 2", n)
	}
}

// Answers that a repeat cannot change are not repeated, whatever the call.
func TestWireAnswersNotRepeated(t *testing.T) {
	for _, c := range []struct {
		status int
		reason string
	}{{404, "notFound"}, {403, "forbidden"}, {401, "required"}, {400, "invalid"}, {501, "notImplemented"}} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if op(r) == "list" && r.URL.Query().Get("maxResults") == "1" {
					serveOK(w, r)
					return
				}
				gcsError(w, c.status, c.reason)
			})
			s := f.store(t, "p")
			calls := map[string]func() error{
				"get":    func() error { _, _, err := s.Get(ctx(t), "k"); return err },
				"list":   func() error { _, err := s.List(ctx(t), "", "", 10); return err },
				"delete": func() error { return s.Delete(ctx(t), "k", store.Cond{}) },
			}
			for name, call := range calls {
				f.reset()
				_ = call()
				if n := len(f.requests()); n != 1 {
					t.Errorf("%s answered %d: sent %d times, want once", name, c.status, n)
				}
			}
		})
	}
}

// An unconditional delete whose first answer was lost is made again, and
// finding the object gone, succeeds.
func TestWireRepeatedDeleteFindsNothing(t *testing.T) {
	var deletes atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if op(r) != "delete" {
			serveOK(w, r)
			return
		}
		if deletes.Add(1) == 1 {
			gcsError(w, http.StatusServiceUnavailable, "backendError")
			return
		}
		gcsError(w, http.StatusNotFound, "notFound")
	})
	s := f.store(t, "p")
	if err := s.Delete(ctx(t), "k", store.Cond{}); err != nil {
		t.Fatalf("Delete: %v, want success", err)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d deletes sent, want 2", n)
	}
}

// List follows nextPageToken with the same query until it has limit
// items or the listing ends, and stops there.
func TestWireListPages(t *testing.T) {
	pages := map[string]string{
		"":   `{"items":[{"name":"p/a","generation":"1","size":"1"},{"name":"p/b","generation":"2","size":"2"}],"nextPageToken":"t1"}`,
		"t1": `{"items":[{"name":"p/c","generation":"3","size":"3"}],"nextPageToken":"t2"}`,
		"t2": `{"items":[{"name":"p/d","generation":"4","size":"4"},{"name":"p/e","generation":"5","size":"5"}],"nextPageToken":"t3"}`,
		"t3": `{"items":[{"name":"p/f","generation":"6","size":"6"}]}`,
	}
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if op(r) != "list" || r.URL.Query().Get("maxResults") == "1" {
			serveOK(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, pages[r.URL.Query().Get("pageToken")])
	})
	s := f.store(t, "p")
	for _, c := range []struct {
		limit  int
		want   string
		tokens []string
	}{
		{4, "a b c d", []string{"", "t1", "t2"}},
		{10, "a b c d e f", []string{"", "t1", "t2", "t3"}},
		{1, "a", []string{""}},
	} {
		f.reset()
		items, err := s.List(ctx(t), "", "", c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, it := range items {
			keys = append(keys, it.Key)
		}
		if got := strings.Join(keys, " "); got != c.want {
			t.Errorf("List limit %d = %s, want %s", c.limit, got, c.want)
		}
		reqs := f.requests()
		var tokens []string
		for _, r := range reqs {
			q := r.URL.Query()
			tokens = append(tokens, q.Get("pageToken"))
			if q.Get("prefix") != "p/" || q.Get("maxResults") != fmt.Sprint(min(c.limit+1, 1000)) {
				t.Errorf("limit %d: page query %s", c.limit, r.URL.RawQuery)
			}
		}
		if fmt.Sprint(tokens) != fmt.Sprint(c.tokens) {
			t.Errorf("limit %d: page tokens %q, want %q", c.limit, tokens, c.tokens)
		}
	}
}
