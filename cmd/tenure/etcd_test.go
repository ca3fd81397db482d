package main

import (
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
	if err != nil || p.Header.Revision != 1 {
		t.Fatalf("put: %v %+v", err, p)
	}
	if _, err := c.Get(ctx, "greeting", clientv3.WithRev(5)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get at a future revision: %v", err)
	}
	for path, want := range map[string]string{"/version": `"etcdserver":"3.6.0"`, "/health": `"health":"true"`, "/readyz": `"ready":true`} {
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
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "hello" || r.Header.Revision != 1 {
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
