package s3store_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
)

// Malformed URLs are refused before any request, with a message that says
// what is wrong.
func TestOpenRefusesBadURLs(t *testing.T) {
	testutil.IsolateAWSConfig(t)
	cases := []struct{ name, url, want string }{
		{"no bucket", "s3:///prefix?region=us-east-1", "no bucket"},
		{"no bucket, no slash", "s3:?region=us-east-1", "no bucket"},
		{"prefix with a leading slash", "s3://bucket//p?region=us-east-1", `prefix "/p" starts with "/"`},
		{"port in the bucket", "s3://bucket:9000/p?region=us-east-1", "?endpoint="},
		{"credentials in the URL", "s3://AKID:hunter2@bucket/p", "credentials do not belong in the URL"},
		{"unknown parameter", "s3://bucket/p?regoin=us-east-1", `unknown parameter "regoin"`},
		{"repeated parameter", "s3://bucket/p?region=a&region=b", "given 2 times"},
		{"bad path_style", "s3://bucket/p?path_style=maybe", "path_style"},
		{"endpoint without scheme", "s3://bucket/p?endpoint=127.0.0.1:9000", "http:// or https://"},
		{"no region", "s3://bucket/p?endpoint=http://127.0.0.1:1", "no region"},
		{"no credentials", "s3://bucket/p?endpoint=http://127.0.0.1:1&region=us-east-1", "no usable AWS credentials"},
		{"missing profile", "s3://bucket/p?region=us-east-1&profile=nosuchprofile", "nosuchprofile"},
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

// Open against real servers: the bucket check turns a missing bucket or bad
// credentials into a clear permanent error at start-up.
func TestOpen(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			srv := server.start(t)
			testutil.IsolateAWSConfig(t)
			srv.SetEnv(t)

			t.Run("ok", func(t *testing.T) {
				s, err := store.Open(ctx(t), srv.URL(newPrefix()))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				v, err := s.Put(ctx(t), "k", []byte("v"), store.IfAbsent())
				if err != nil {
					t.Fatal(err)
				}
				if data, gv, err := s.Get(ctx(t), "k"); err != nil || string(data) != "v" || gv != v {
					t.Fatalf("Get = %q, %q, %v; want v, %q", data, gv, err, v)
				}
			})
			t.Run("missing bucket", func(t *testing.T) {
				missing := srv
				missing.Bucket = "no-such-bucket"
				_, err := store.Open(ctx(t), missing.URL("p"))
				t.Log(err)
				if !errors.Is(err, store.ErrPermanent) {
					t.Fatalf("error %v, want ErrPermanent", err)
				}
				for _, want := range []string{`bucket "no-such-bucket" does not exist`, srv.Endpoint} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
			})
			t.Run("wrong secret", func(t *testing.T) {
				t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
				_, err := store.Open(ctx(t), srv.URL("p"))
				t.Log(err)
				if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "denied") {
					t.Fatalf("error %v, want ErrPermanent saying access is denied", err)
				}
			})
			t.Run("unknown access key", func(t *testing.T) {
				t.Setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEY")
				_, err := store.Open(ctx(t), srv.URL("p"))
				t.Log(err)
				if !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "denied") {
					t.Fatalf("error %v, want ErrPermanent saying access is denied", err)
				}
			})
			t.Run("nothing listening", func(t *testing.T) {
				gone := testutil.S3Server{Endpoint: "http://127.0.0.1:1", Region: srv.Region, Bucket: srv.Bucket}
				_, err := store.Open(ctx(t), gone.URL("p"))
				if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
					t.Fatalf("error %v, want one naming the endpoint", err)
				}
				if !store.IsRetryable(err) {
					t.Errorf("error %v: an unreachable endpoint may come back; want it retryable", err)
				}
			})
		})
	}
}

// TestSDKLogsGoToTheStoreLogger: a warning the SDK would print on stderr (a
// Date header it cannot parse) reaches the logger given to store.Open as a
// slog record.
func TestSDKLogsGoToTheStoreLogger(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", "not a date")
		w.Header().Set("ETag", `"e"`)
		_, _ = io.WriteString(w, "x")
	}))
	defer srv.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	s, err := store.Open(ctx(t), "s3://bucket/p?region=us-east-1&endpoint="+url.QueryEscape(srv.URL), store.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Get(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"failed to parse response Date header value`) ||
		!strings.Contains(logs.String(), `"source":"aws-sdk"`) {
		t.Fatalf("the SDK's warning is not in the store's logger:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
