package testutil

import (
	"net"
	"os"
	"strings"
	"testing"
)

func TestEtcd(t *testing.T) {
	srv := Etcd(t)
	if !strings.HasPrefix(srv.Endpoint, "127.0.0.1:") || srv.ClientURL != "http://"+srv.Endpoint {
		t.Errorf("server %+v is not on loopback over plain HTTP", srv)
	}
	if srv.Version == "" || srv.MaxRequestBytes != EtcdMaxRequestBytes {
		t.Errorf("server %+v: version or request limit missing", srv)
	}
	// The same server is handed to every caller while Main runs.
	if again := Etcd(t); again != srv {
		t.Errorf("second call returned %+v, want the shared %+v", again, srv)
	}
	c := srv.Client(t)
	ctx := t.Context()
	if _, err := c.Put(ctx, "testutil/"+t.Name(), "x"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := c.Get(ctx, "testutil/"+t.Name())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get: %v, %v", resp, err)
	}
	if got, want := srv.URL("p/q"), "etcd://"+srv.Endpoint+"/p/q"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestEtcdURLWithTLS(t *testing.T) {
	srv := EtcdServer{Endpoint: "127.0.0.1:2379", CAFile: "/d/ca.pem", CertFile: "/d/c.pem", KeyFile: "/d/k.pem"}
	want := "etcd://127.0.0.1:2379/p?ca=%2Fd%2Fca.pem&cert=%2Fd%2Fc.pem&key=%2Fd%2Fk.pem"
	if got := srv.URL("/p"); got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestStartEtcdStopsWithItsTest(t *testing.T) {
	var srv EtcdServer
	t.Run("inner", func(t *testing.T) {
		srv = StartEtcd(t, EtcdOptions{})
		if _, err := net.Dial("tcp", srv.Endpoint); err != nil {
			t.Fatalf("server not listening: %v", err)
		}
	})
	if srv.Endpoint == "" {
		t.Skip("inner test skipped: etcd not installed")
	}
	if c, err := net.Dial("tcp", srv.Endpoint); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after its test ended", srv.Endpoint)
	}
}

func TestEtcdVersionCheck(t *testing.T) {
	bin, err := etcdBinary()
	if err != nil {
		t.Skip(err)
	}
	v, err := etcdVersion(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s is etcd %s", bin, v)
	old := writeExecutable(t, t.TempDir(), "etcd")
	if err := writeScript(old, "echo 'etcd Version: 3.3.25'"); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdVersion(old); err == nil || !strings.Contains(err.Error(), "3.4 or later") {
		t.Errorf("etcd 3.3: got %v, want a refusal naming 3.4", err)
	}
}

func writeScript(path, body string) error {
	return os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
}
