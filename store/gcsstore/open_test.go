package gcsstore_test

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/api/storage/v1"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/gcsstore"
)

// isolateGoogleConfig keeps the developer's own Google configuration out
// of a test, and makes sure the Google client never probes the metadata
// server (a link-local address) for credentials: a missing credentials
// file fails before that.
func isolateGoogleConfig(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(dir, "no-such-credentials.json"))
	t.Setenv("CLOUDSDK_CONFIG", dir)
	t.Setenv("STORAGE_EMULATOR_HOST", "")
}

func TestSchemeIsRegistered(t *testing.T) {
	if !slices.Contains(store.Schemes(), gcsstore.Scheme) {
		t.Fatalf("schemes %v lack %q", store.Schemes(), gcsstore.Scheme)
	}
}

// Malformed URLs are refused before any request, with a message that says
// what is wrong.
func TestOpenRefusesBadURLs(t *testing.T) {
	isolateGoogleConfig(t)
	cases := []struct{ name, url, want string }{
		{"no bucket", "gs:///prefix", "no bucket"},
		{"no bucket, no slash", "gs:prefix", "no bucket"},
		{"prefix with a leading slash", "gs://bucket//p", `prefix "/p" starts with "/"`},
		{"port in the bucket", "gs://bucket:4443/p", "?endpoint="},
		{"credentials in the URL", "gs://user:hunter2@bucket/p", "credentials do not belong in the URL"},
		{"unknown parameter", "gs://bucket/p?endpiont=http://127.0.0.1:1", `unknown parameter "endpiont"`},
		{"repeated parameter", "gs://bucket/p?endpoint=http://a:1&endpoint=http://b:1", "given 2 times"},
		{"endpoint without scheme", "gs://bucket/p?endpoint=127.0.0.1:4443", "http:// or https://"},
		{"endpoint with a query", "gs://bucket/p?endpoint=" + url.QueryEscape("http://127.0.0.1:1/?x=1"), "http:// or https://"},
		{"prefix too long", "gs://bucket/" + strings.Repeat("p", 1024), "at most 1024 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Open(ctx(t), c.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			if !errors.Is(err, store.ErrPermanent) {
				t.Errorf("error %v does not match ErrPermanent", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

// Without ?endpoint= or STORAGE_EMULATOR_HOST, Open needs Application
// Default Credentials, and says so when there are none usable.
func TestOpenWithoutCredentials(t *testing.T) {
	isolateGoogleConfig(t)
	s, err := store.Open(ctx(t), "gs://bucket/p")
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded without credentials")
	}
	if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "no usable Google credentials") {
		t.Errorf("error %v: want ErrPermanent saying there are no usable credentials", err)
	}
}

// Open checks the bucket: a missing one, or credentials the server
// refuses, give a permanent error that says so at start-up.
func TestOpenChecksTheBucket(t *testing.T) {
	srv := testutil.FakeGCS(t)
	isolateGoogleConfig(t)

	s, err := store.Open(ctx(t), srv.URL("p"))
	if err != nil {
		t.Fatalf("Open of an existing bucket: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	missing := testutil.GCSServer{Endpoint: srv.Endpoint, Bucket: "no-such-bucket"}
	s, err = store.Open(ctx(t), missing.URL("p"))
	if err == nil {
		s.Close()
		t.Fatal("Open of a missing bucket succeeded")
	}
	if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist at `+srv.Endpoint) {
		t.Errorf("missing bucket: %v; want ErrPermanent naming the bucket and the server", err)
	}

	for _, c := range []struct {
		status       int
		reason, want string
	}{
		{401, "required", "denied"},
		{403, "forbidden", "denied"},
		{400, "invalid", `refuses the bucket name "bucket"`},
	} {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { gcsError(w, c.status, c.reason) })
		s, err := store.Open(ctx(t), f.url("p"))
		if err == nil {
			s.Close()
			t.Fatalf("Open answered %d succeeded", c.status)
		}
		if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d: %v; want ErrPermanent saying %q", c.status, err, c.want)
		}
	}
}

// A server that cannot be reached is not a permanent condition: Open
// fails with a transient error that names it.
func TestOpenUnreachable(t *testing.T) {
	isolateGoogleConfig(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	s, err := store.Open(ctx(t), "gs://bucket/p?endpoint="+url.QueryEscape(endpoint))
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable endpoint succeeded")
	}
	if !errors.Is(err, store.ErrTransient) || !strings.Contains(err.Error(), endpoint) {
		t.Errorf("error %v: want ErrTransient naming %s", err, endpoint)
	}
}

// STORAGE_EMULATOR_HOST sends a URL without ?endpoint= to the emulator,
// without credentials, as Google's Cloud Storage clients document.
func TestOpenWithEmulatorHost(t *testing.T) {
	srv := testutil.FakeGCS(t)
	isolateGoogleConfig(t)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.Endpoint, "http://"))
	s, err := store.Open(ctx(t), "gs://"+srv.Bucket+"/"+newPrefix())
	if err != nil {
		t.Fatalf("Open with STORAGE_EMULATOR_HOST: %v", err)
	}
	defer s.Close()
	v, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, gv, err := s.Get(ctx(t), "k"); err != nil || gv != v {
		t.Fatalf("Get = %q, %v; want version %q", gv, err, v)
	}

	missing, err := store.Open(ctx(t), "gs://no-such-bucket/p")
	if err == nil {
		missing.Close()
		t.Fatal("Open of a missing bucket succeeded")
	}
	if !strings.Contains(err.Error(), "STORAGE_EMULATOR_HOST=") {
		t.Errorf("error %v does not name the emulator it asked", err)
	}
}

// STORAGE_EMULATOR_HOST may also be a URL, as Google's Cloud Storage
// clients read it; one that is neither a host nor a URL is refused at
// Open, naming it.
func TestOpenWithEmulatorURL(t *testing.T) {
	srv := testutil.FakeGCS(t)
	isolateGoogleConfig(t)
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Endpoint+"/")
	s, err := store.Open(ctx(t), "gs://"+srv.Bucket+"/"+newPrefix())
	if err != nil {
		t.Fatalf("Open with STORAGE_EMULATOR_HOST=%s/: %v", srv.Endpoint, err)
	}
	defer s.Close()
	if _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}

	t.Setenv("STORAGE_EMULATOR_HOST", "http://[::1")
	s, err = store.Open(ctx(t), "gs://"+srv.Bucket+"/p")
	if err == nil {
		s.Close()
		t.Fatal("Open with a malformed STORAGE_EMULATOR_HOST succeeded")
	}
	if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), `STORAGE_EMULATOR_HOST="http://[::1"`) {
		t.Errorf("error %v: want ErrPermanent naming STORAGE_EMULATOR_HOST", err)
	}
}

// ClientOptions gives a service for New what Open would build: without an
// endpoint, it follows STORAGE_EMULATOR_HOST.
func TestClientOptionsFollowEmulatorHost(t *testing.T) {
	srv := testutil.FakeGCS(t)
	isolateGoogleConfig(t)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.Endpoint, "http://"))
	service, err := storage.NewService(ctx(t), gcsstore.ClientOptions("")...)
	if err != nil {
		t.Fatalf("NewService with ClientOptions(\"\"): %v", err)
	}
	d, err := gcsstore.New(service, srv.Bucket, newPrefix(), gcsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckBucket(ctx(t)); err != nil {
		t.Fatalf("CheckBucket on the emulator: %v", err)
	}
	s := store.New(d)
	defer s.Close()
	v, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, gv, err := s.Get(ctx(t), "k"); err != nil || gv != v {
		t.Fatalf("Get = %q, %v; want version %q", gv, err, v)
	}

	// A malformed value gives a service that New refuses, rather than one
	// that fails at its first request.
	t.Setenv("STORAGE_EMULATOR_HOST", "http://[::1")
	service, err = storage.NewService(ctx(t), gcsstore.ClientOptions("")...)
	if err != nil {
		t.Fatalf("NewService with ClientOptions(\"\"): %v", err)
	}
	if _, err := gcsstore.New(service, srv.Bucket, "p", gcsstore.Options{}); driver.Classify(nil, err) != driver.Permanent || !strings.Contains(err.Error(), "http://[::1") {
		t.Errorf("New with a service for STORAGE_EMULATOR_HOST=http://[::1: %v; want ErrPermanent naming it", err)
	}
}
