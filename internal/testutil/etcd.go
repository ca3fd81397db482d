package testutil

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/internal/etcdlaunch"
)

// EtcdMaxRequestBytes is the --max-request-bytes test servers run with:
// room for the conformance suite's 5 MiB value (etcd's default is 1.5 MiB).
const EtcdMaxRequestBytes = 8 << 20

// EtcdServer is a running single-node etcd cluster on loopback ports, with
// its data in a temporary directory.
type EtcdServer struct {
	Name      string // "etcd"
	Endpoint  string // "127.0.0.1:port", the client address
	ClientURL string // "http://127.0.0.1:port" (https with TLS)
	Version   string // the server's version, such as "3.4.23"

	MaxRequestBytes int // the server's --max-request-bytes

	// With EtcdOptions.TLS: PEM files for a client. The server requires a
	// client certificate signed by CAFile.
	CAFile, CertFile, KeyFile string
}

// URL returns the store URL of prefix on the server, for store.Open, with
// the TLS parameters if the server uses TLS.
func (e EtcdServer) URL(prefix string) string {
	u := url.URL{Scheme: "etcd", Host: e.Endpoint, Path: "/" + strings.TrimPrefix(prefix, "/")}
	if e.CAFile != "" {
		q := url.Values{}
		q.Set("ca", e.CAFile)
		q.Set("cert", e.CertFile)
		q.Set("key", e.KeyFile)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Client returns a new client for the server, closed when t ends. It has
// the etcd client's default settings but a quiet logger and a send limit
// that matches the server's.
func (e EtcdServer) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := e.newClient()
	if err != nil {
		t.Fatalf("testutil: etcd client for %s: %v", e.ClientURL, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e EtcdServer) newClient() (*clientv3.Client, error) {
	srv := etcdlaunch.Server{ClientURL: e.ClientURL, MaxRequestBytes: e.MaxRequestBytes, CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}
	return srv.NewClient()
}

// EtcdOptions configure a private server started by StartEtcd.
type EtcdOptions struct {
	// TLS serves clients over TLS and requires client certificates, all
	// from a throw-away CA; the PEM files are in the returned EtcdServer.
	TLS bool
}

// Etcd returns a running etcd server; see the package documentation for
// its lifetime. It skips or fails t if etcd is not installed. Tests share
// the server's key space: give every test a key prefix of its own, and do
// not compact or enable authentication on it (use StartEtcd).
func Etcd(t testing.TB) EtcdServer {
	t.Helper()
	if !mainActive.Load() {
		return StartEtcd(t, EtcdOptions{})
	}
	sharedEtcdMu.Lock()
	defer sharedEtcdMu.Unlock()
	if sharedEtcd.srv == nil && sharedEtcd.err == nil {
		srv, err := launchEtcd(EtcdOptions{})
		sharedEtcd.srv, sharedEtcd.err = srv, err
		if err == nil {
			// stopShared, which Main defers, stops every server in
			// shared: register this one there too.
			sharedMu.Lock()
			shared["etcd"] = &sharedServer{srv: &server{proc: srv.proc, dir: srv.dir}}
			sharedMu.Unlock()
		}
	}
	if sharedEtcd.err != nil {
		fail(t, sharedEtcd.err)
		return EtcdServer{}
	}
	return sharedEtcd.srv.info
}

// StartEtcd starts an etcd server of the test's own, stopped when t ends:
// for tests that compact, enable authentication, stop the server or need
// TLS. It skips or fails t if etcd is not installed.
func StartEtcd(t testing.TB, opts EtcdOptions) EtcdServer {
	t.Helper()
	srv, err := launchEtcd(opts)
	if err != nil {
		fail(t, err)
		return EtcdServer{}
	}
	t.Cleanup(srv.stop)
	return srv.info
}

var (
	sharedEtcdMu sync.Mutex
	sharedEtcd   struct {
		srv *etcdProcess
		err error
	}
)

type etcdProcess struct {
	info EtcdServer
	proc *process
	dir  string
}

func (p *etcdProcess) stop() {
	p.proc.stop()
	_ = os.RemoveAll(p.dir)
}

// etcdBinary finds etcd through TENURE_ETCD_BIN, CacheDir, PATH and
// /usr/bin/etcd (etcdlaunch.Find); a missing one skips the test.
func etcdBinary() (string, error) {
	bin, err := etcdlaunch.Find(CacheDir())
	if errors.Is(err, etcdlaunch.ErrMissing) {
		return "", fmt.Errorf("%w: %w; run scripts/install-servers (or set %s)", errMissing, err, etcdlaunch.BinEnv)
	}
	return bin, err
}

// etcdVersion runs bin --version and checks that it is recent enough.
func etcdVersion(bin string) (string, error) { return etcdlaunch.Version(bin) }

func launchEtcd(opts EtcdOptions) (*etcdProcess, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	version, err := etcdVersion(bin)
	if err != nil {
		return nil, err
	}
	srv, err := etcdlaunch.Launch(bin, version, etcdlaunch.Options{
		TLS:             opts.TLS,
		MaxRequestBytes: EtcdMaxRequestBytes,
		StartTimeout:    StartTimeout,
		Start: func(name, bin string, args, env []string, dir string) (etcdlaunch.Process, error) {
			p, err := startProcess(name, bin, args, env, dir)
			if err != nil {
				return nil, err
			}
			return launchedProcess{p}, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("testutil: %w", err)
	}
	return &etcdProcess{
		info: EtcdServer{
			Name: "etcd", Endpoint: srv.Endpoint, ClientURL: srv.ClientURL, Version: srv.Version,
			MaxRequestBytes: srv.MaxRequestBytes, CAFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile,
		},
		proc: srv.Proc.(launchedProcess).process,
		dir:  srv.Dir,
	}, nil
}

// launchedProcess is a testutil process as etcdlaunch sees it, so that
// stopShared stops the shared server as it stops the others.
type launchedProcess struct{ *process }

func (p launchedProcess) PID() int     { return p.cmd.Process.Pid }
func (p launchedProcess) Exited() bool { return p.exited() }
func (p launchedProcess) Err() error   { return p.err }
func (p launchedProcess) Tail() string { return p.tail() }
func (p launchedProcess) Stop()        { p.stop() }
