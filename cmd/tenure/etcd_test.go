package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/internal/tlsutil"
)

// startEtcdServe runs tenure etcd serve with args and returns its client
// URL.
func startEtcdServe(t *testing.T, args ...string) (url string, stop func() (int, string)) {
	t.Helper()
	return startServe(t, regexp.MustCompile(`etcd API on (https?://\S+),`), append([]string{"etcd", "serve",
		"--listen-client-urls", "http://127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--peer-plaintext", "--flush-interval", "5ms", "--log-level", "warn"}, args...)...)
}

// TestEtcdServe runs a one-node group on a directory and uses it with the
// etcd client, then stops it and starts it again on the same store: the
// data is still there, at the same revision.
func TestEtcdServe(t *testing.T) {
	store := "file://" + t.TempDir()
	url, stop := startEtcdServe(t, "--store", store, "--id", "node-1")
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	p, err := c.Put(ctx, "greeting", "hello")
	if err != nil || p.Header.Revision != 2 {
		t.Fatalf("put: %v %+v", err, p)
	}
	if _, err := c.Get(ctx, "greeting", clientv3.WithRev(5)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get at a future revision: %v", err)
	}
	for path, want := range map[string]string{"/version": `"etcdserver":"3.7.0"`, "/health": `"health":"true"`, "/readyz": `"ready":true`} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d %s; want %s", path, resp.StatusCode, body, want)
		}
	}
	if code, out := stop(); code != 0 || !strings.Contains(out, `left group "etcd"`) {
		t.Fatalf("etcd serve stopped with %d:\n%s", code, out)
	}
	url, _ = startEtcdServe(t, "--store", store, "--id", "node-1")
	c2, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r, err := c2.Get(ctx, "greeting")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "hello" || r.Header.Revision != 2 {
		t.Fatalf("get after a restart: %v %+v", err, r)
	}
}

// TestEtcdServeRefuses: the client port's rules, with etcd's flag names.
func TestEtcdServeRefuses(t *testing.T) {
	store := "file://" + t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen-client-urls", "http://0.0.0.0:0"}, "--listen-client-urls 0.0.0.0:0 is not a loopback address"},
		{[]string{"--listen-client-urls", "https://127.0.0.1:0"}, "give --cert-file and --key-file"},
		{[]string{"--client-cert-auth"}, "--client-cert-auth needs --trusted-ca-file"},
		{[]string{"--cert-file", "x.pem"}, "--cert-file and --key-file go together"},
		{[]string{"--listen-client-urls", "127.0.0.1:2379"}, "want http://HOST:PORT or https://HOST:PORT"},
	} {
		code, _, errs := runCmd(t, append([]string{"etcd", "serve", "--store", store, "--peer-listen", "127.0.0.1:0"}, tc.args...)...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("etcd serve %v: exit %d, stderr %q; want exit 1 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestEtcdServeTLS: over https:// with --client-cert-auth, the etcd
// client with a certificate of the trusted CA works, one without is
// refused, and the probes answer without one.
func TestEtcdServeTLS(t *testing.T) {
	ca, err := tlsutil.NewCA("etcd api test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := ca.WriteFiles(dir, "api", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.WriteFiles(dir, "client", "client")
	if err != nil {
		t.Fatal(err)
	}
	url, _ := startServe(t, regexp.MustCompile(`etcd API on (https?://\S+),`), "etcd", "serve", "--store", "file://"+t.TempDir(),
		"--listen-client-urls", "https://127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--log-level", "warn",
		"--cert-file", srv.Cert, "--key-file", srv.Key, "--trusted-ca-file", srv.CA, "--client-cert-auth")
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("client URL %s; want https://", url)
	}
	withCert, err := tlsutil.LoadClient(srv.CA, cli.Cert, cli.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: withCert, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(t.Context(), "k", "v"); err != nil {
		t.Fatalf("put with a client certificate: %v", err)
	}
	noCert, err := tlsutil.LoadClient(srv.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: noCert, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c2.Get(ctx, "k"); err == nil {
		t.Fatal("get without a client certificate succeeded")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}
	resp, err := hc.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz without a client certificate: %d", resp.StatusCode)
	}
}
