package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GCSServer is a running fake-gcs-server (github.com/fsouza/fake-gcs-server)
// with one empty bucket. It speaks the Cloud Storage JSON API, and the XML
// API for downloads, over plain HTTP and accepts requests without
// credentials, as STORAGE_EMULATOR_HOST clients send them.
//
// fake-gcs-server is a test double, not a faithful copy of Cloud Storage:
// its memory backend applies ifGenerationMatch on uploads atomically, but
// it ignores ifGenerationMatch on object deletes. Tests that rely on those
// semantics say so.
type GCSServer struct {
	Endpoint string // "http://127.0.0.1:port"
	Bucket   string
}

// URL returns the store URL of prefix in the server's bucket, for
// store.Open.
func (g GCSServer) URL(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", g.Endpoint)
	u := url.URL{Scheme: "gs", Host: g.Bucket, Path: "/" + strings.TrimPrefix(prefix, "/"), RawQuery: q.Encode()}
	return u.String()
}

// fakeGCSName is the binary's name and the key of the shared server.
const fakeGCSName = "fake-gcs-server"

// FakeGCS returns a running fake-gcs-server with its memory backend and the
// bucket Bucket; see the package documentation for its lifetime. The binary
// is found through TENURE_FAKE_GCS_BIN, the cache directory that
// scripts/install-servers fills, then PATH. It skips or fails t if
// fake-gcs-server is not installed.
//
// Every test shares the bucket: give each one a prefix of its own.
func FakeGCS(t testing.TB) GCSServer {
	t.Helper()
	if mainActive.Load() {
		sharedMu.Lock()
		ss := shared[fakeGCSName]
		if ss == nil {
			ss = &sharedServer{}
			shared[fakeGCSName] = ss
		}
		sharedMu.Unlock()
		ss.once.Do(func() { ss.srv, ss.err = launchFakeGCS() })
		if ss.err != nil {
			fail(t, ss.err)
			return GCSServer{}
		}
		return gcsInfo(ss.srv)
	}
	srv, err := launchFakeGCS()
	if err != nil {
		fail(t, err)
		return GCSServer{}
	}
	t.Cleanup(srv.stop)
	return gcsInfo(srv)
}

func gcsInfo(srv *server) GCSServer {
	return GCSServer{Endpoint: srv.info.Endpoint, Bucket: srv.info.Bucket}
}

func launchFakeGCS() (*server, error) {
	bin, err := findBinary(fakeGCSName, "TENURE_FAKE_GCS_BIN")
	if err != nil {
		return nil, err
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchFakeGCSOnce(bin)
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return srv, err
		}
	}
}

func launchFakeGCSOnce(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "tenure-fake-gcs-")
	if err != nil {
		return nil, fmt.Errorf("testutil: %s: %w", fakeGCSName, err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: no free port: %w", fakeGCSName, err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"-scheme", "http",
		"-host", "127.0.0.1",
		"-port", strconv.Itoa(port),
		// Objects live in memory: the backend whose uploads check
		// ifGenerationMatch under the same lock that applies them.
		"-backend", "memory",
		// Without these, XML API downloads (GET /bucket/object) and the
		// upload URLs the server hands out would name another host.
		"-public-host", addr,
		"-external-url", "http://" + addr,
		"-log-level", "warn",
	}
	// FAKE_GCS_* variables in the environment change the server's
	// defaults; every setting that matters is a flag above, which wins.
	proc, err := startProcess(fakeGCSName, bin, args, nil, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{
		info: S3Server{Name: fakeGCSName, Endpoint: "http://" + addr, Bucket: Bucket},
		proc: proc,
		dir:  dir,
	}
	if err := waitFakeGCS(srv); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// waitFakeGCS polls until the server creates the bucket (or says it already
// has it), the process exits, or StartTimeout passes. It speaks plain JSON
// so that this package does not depend on the Cloud Storage client.
func waitFakeGCS(srv *server) error {
	client := &http.Client{Timeout: 5 * time.Second}
	body := fmt.Sprintf(`{"name":%q}`, srv.info.Bucket)
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for {
		if srv.proc.exited() {
			out := srv.proc.tail()
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("testutil: %s on %s: %w", fakeGCSName, srv.info.Endpoint, errPortTaken)
			}
			return fmt.Errorf("testutil: %s exited during start-up (%v); its output ends:\n%s", fakeGCSName, srv.proc.err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.info.Endpoint+"/storage/v1/b?project=tenure-test", bytes.NewBufferString(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			var resp *http.Response
			resp, err = client.Do(req)
			if err == nil {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK, http.StatusConflict: // created, or already there
				default:
					err = fmt.Errorf("create bucket: %s: %s", resp.Status, bytes.TrimSpace(msg))
				}
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("testutil: %s at %s not ready after %v (last error: %v); its output ends:\n%s",
				fakeGCSName, srv.info.Endpoint, StartTimeout, lastErr, srv.proc.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
