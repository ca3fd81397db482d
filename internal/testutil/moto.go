package testutil

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MotoServer is a running moto_server: one HTTP endpoint that emulates many
// AWS services (DynamoDB, Route 53, S3, ...) in memory. It accepts any
// credentials; AccessKey and SecretKey are what tests should sign with.
//
// moto is a test double, not a faithful copy of AWS: it handles requests in
// concurrent threads without making a conditional write atomic, and its
// Route 53 does not enforce the conditions of a change batch. Tests that
// rely on those semantics say so.
type MotoServer struct {
	Endpoint  string // "http://127.0.0.1:port"
	Region    string
	AccessKey string
	SecretKey string
}

// SetEnv points the AWS default credential chain at the server's
// credentials for the rest of the test, as S3Server.SetEnv does.
func (m MotoServer) SetEnv(t testing.TB) {
	t.Helper()
	S3Server{AccessKey: m.AccessKey, SecretKey: m.SecretKey}.SetEnv(t)
}

// Serialized returns the server seen through a proxy that lets one request
// at a time reach moto, until t ends. moto runs each request in a thread of
// its own and checks a conditional write's condition, then applies it,
// with nothing to stop another thread in between (DynamoDB PutItem: two of
// sixteen racing create-if-absent writers can both succeed). Through the
// proxy every request is atomic, as AWS's are, so a test of mutual
// exclusion tests the code under test, not moto's threading.
func (m MotoServer) Serialized(t testing.TB) MotoServer {
	t.Helper()
	target, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatalf("testutil: moto endpoint %q: %v", m.Endpoint, err)
	}
	var mu sync.Mutex
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.Endpoint = srv.URL
	return m
}

// motoName is the binary's name and the key of the shared server.
const motoName = "moto_server"

// Moto returns a running moto_server; see the package documentation for
// its lifetime. The binary is found through TENURE_MOTO_BIN, the cache
// directory, then PATH (it is a Python program: pip install
// 'moto[server]'). It skips or fails t if moto_server is not installed.
//
// Every test shares the server's state: give each one a table, hosted zone
// or prefix of its own.
func Moto(t testing.TB) MotoServer {
	t.Helper()
	if mainActive.Load() {
		sharedMu.Lock()
		ss := shared[motoName]
		if ss == nil {
			ss = &sharedServer{}
			shared[motoName] = ss
		}
		sharedMu.Unlock()
		ss.once.Do(func() { ss.srv, ss.err = launchMoto() })
		if ss.err != nil {
			fail(t, ss.err)
			return MotoServer{}
		}
		return motoInfo(ss.srv)
	}
	srv, err := launchMoto()
	if err != nil {
		fail(t, err)
		return MotoServer{}
	}
	t.Cleanup(srv.stop)
	return motoInfo(srv)
}

func motoInfo(srv *server) MotoServer {
	return MotoServer{
		Endpoint:  srv.info.Endpoint,
		Region:    srv.info.Region,
		AccessKey: srv.info.AccessKey,
		SecretKey: srv.info.SecretKey,
	}
}

func launchMoto() (*server, error) {
	bin, err := findBinary(motoName, "TENURE_MOTO_BIN")
	if err != nil {
		return nil, err
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchMotoOnce(bin)
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return srv, err
		}
	}
}

func launchMotoOnce(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "tenure-moto-")
	if err != nil {
		return nil, fmt.Errorf("testutil: %s: %w", motoName, err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: %s: no free port: %w", motoName, err)
	}
	// Unbuffered output, so that the tail shown on failure is complete.
	// moto keeps its state in memory; it runs in dir all the same.
	env := []string{"PYTHONUNBUFFERED=1"}
	proc, err := startProcess(motoName, bin, []string{"-H", "127.0.0.1", "-p", strconv.Itoa(port)}, env, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{
		info: S3Server{
			Name:      motoName,
			Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
			Region:    Region,
			AccessKey: AccessKey,
			SecretKey: SecretKey,
		},
		proc: proc,
		dir:  dir,
	}
	if err := waitMoto(srv); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// waitMoto polls moto's own API until it answers, the process exits, or
// StartTimeout passes.
func waitMoto(srv *server) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for {
		if srv.proc.exited() {
			out := srv.proc.tail()
			if strings.Contains(strings.ToLower(out), "address already in use") {
				return fmt.Errorf("testutil: %s on %s: %w", motoName, srv.info.Endpoint, errPortTaken)
			}
			return fmt.Errorf("testutil: %s exited during start-up (%v); its output ends:\n%s", motoName, srv.proc.err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.info.Endpoint+"/moto-api/", nil)
		if err == nil {
			var resp *http.Response
			resp, err = client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("GET /moto-api/: %s", resp.Status)
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
				motoName, srv.info.Endpoint, StartTimeout, lastErr, srv.proc.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
