package testutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/internal/tlsutil"
)

// EtcdMaxRequestBytes is the --max-request-bytes test servers run with:
// room for the conformance suite's 5 MiB value (etcd's default is 1.5 MiB).
const EtcdMaxRequestBytes = 8 << 20

// etcdMinVersion is the oldest etcd the tests accept.
var etcdMinVersion = [2]int{3, 4}

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
	cfg := clientv3.Config{
		Endpoints:          []string{e.ClientURL},
		DialTimeout:        5 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: e.MaxRequestBytes + 1<<20,
	}
	if e.CAFile != "" {
		tc, err := tlsutil.LoadClient(e.CAFile, e.CertFile, e.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
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

// etcdBinary finds etcd as findBinary does, then at /usr/bin/etcd, where
// Debian's etcd-server package puts it (PATH may not include /usr/bin).
func etcdBinary() (string, error) {
	bin, err := findBinary("etcd", "TENURE_ETCD_BIN")
	if errors.Is(err, errMissing) && isExecutable("/usr/bin/etcd") == nil {
		return "/usr/bin/etcd", nil
	}
	if errors.Is(err, errMissing) {
		return "", fmt.Errorf("%w (on Debian and Ubuntu: apt-get install etcd-server)", err)
	}
	return bin, err
}

var etcdVersionLine = regexp.MustCompile(`(?m)^etcd Version: (\d+)\.(\d+)\.(\d+)`)

// etcdVersion runs bin --version and checks that it is recent enough.
func etcdVersion(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testutil: %s --version: %w; output:\n%s", bin, err, out)
	}
	m := etcdVersionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("testutil: %s --version printed no version:\n%s", bin, out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	v := fmt.Sprintf("%s.%s.%s", m[1], m[2], m[3])
	if major < etcdMinVersion[0] || major == etcdMinVersion[0] && minor < etcdMinVersion[1] {
		return "", fmt.Errorf("testutil: %s is etcd %s; the tests need %d.%d or later", bin, v, etcdMinVersion[0], etcdMinVersion[1])
	}
	return v, nil
}

func launchEtcd(opts EtcdOptions) (*etcdProcess, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	version, err := etcdVersion(bin)
	if err != nil {
		return nil, err
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchEtcdOnce(bin, version, opts)
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return srv, err
		}
	}
}

func launchEtcdOnce(bin, version string, opts EtcdOptions) (*etcdProcess, error) {
	dir, err := os.MkdirTemp("", "tenure-etcd-")
	if err != nil {
		return nil, fmt.Errorf("testutil: etcd: %w", err)
	}
	clientPort, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: etcd: no free port: %w", err)
	}
	peerPort, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testutil: etcd: no free port: %w", err)
	}
	info := EtcdServer{
		Name:            "etcd",
		Endpoint:        "127.0.0.1:" + strconv.Itoa(clientPort),
		Version:         version,
		MaxRequestBytes: EtcdMaxRequestBytes,
	}
	scheme := "http"
	var tlsArgs []string
	if opts.TLS {
		scheme = "https"
		if err := writeEtcdCerts(dir, &info); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		tlsArgs = []string{
			"--cert-file", filepath.Join(dir, "server.pem"),
			"--key-file", filepath.Join(dir, "server-key.pem"),
			"--trusted-ca-file", info.CAFile,
			"--client-cert-auth",
		}
	}
	info.ClientURL = scheme + "://" + info.Endpoint
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := append([]string{
		"--name", "tenure-test",
		// etcd creates the data directory itself, with the 0700
		// permissions it insists on.
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", info.ClientURL,
		"--advertise-client-urls", info.ClientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "tenure-test=" + peerURL,
		"--initial-cluster-state", "new",
		"--max-request-bytes", strconv.Itoa(EtcdMaxRequestBytes),
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	}, tlsArgs...)
	// etcd also reads its flags from ETCD_* variables: an inherited one
	// must not change the test server.
	proc, err := startProcess("etcd", bin, args, cleanEtcdEnv(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := &etcdProcess{info: info, proc: proc, dir: dir}
	if err := waitEtcdReady(srv); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// cleanEtcdEnv returns assignments that empty every ETCD_* variable of the
// test's environment.
func cleanEtcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "ETCD_") {
			env = append(env, name+"=")
		}
	}
	return env
}

// waitEtcdReady polls with a Get until the server answers, the process
// exits, or StartTimeout passes.
func waitEtcdReady(srv *etcdProcess) error {
	c, err := srv.info.newClient()
	if err != nil {
		return fmt.Errorf("testutil: etcd client for %s: %w", srv.info.ClientURL, err)
	}
	defer c.Close()
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for {
		if srv.proc.exited() {
			out := srv.proc.tail()
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("testutil: etcd on %s: %w", srv.info.Endpoint, errPortTaken)
			}
			return fmt.Errorf("testutil: etcd exited during start-up (%v); its output ends:\n%s", srv.proc.err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Get(ctx, "tenure-testutil-ready")
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("testutil: etcd at %s not ready after %v (last error: %v); its output ends:\n%s",
				srv.info.ClientURL, StartTimeout, lastErr, srv.proc.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeEtcdCerts writes a CA, a server certificate for 127.0.0.1 and a
// client certificate into dir, and records the client's files in info.
func writeEtcdCerts(dir string, info *EtcdServer) error {
	ca, err := tlsutil.NewCA("tenure etcd test CA")
	if err != nil {
		return fmt.Errorf("testutil: etcd CA: %w", err)
	}
	server, err := ca.Issue("tenure etcd test server", "127.0.0.1", "localhost")
	if err != nil {
		return fmt.Errorf("testutil: etcd server certificate: %w", err)
	}
	client, err := ca.Issue("tenure etcd test client")
	if err != nil {
		return fmt.Errorf("testutil: etcd client certificate: %w", err)
	}
	info.CAFile = filepath.Join(dir, "ca.pem")
	info.CertFile = filepath.Join(dir, "client.pem")
	info.KeyFile = filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(info.CAFile, ca.PEM(), 0o600); err != nil {
		return fmt.Errorf("testutil: %w", err)
	}
	if err := writeKeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), server); err != nil {
		return err
	}
	return writeKeyPair(info.CertFile, info.KeyFile, client)
}

func writeKeyPair(certFile, keyFile string, c tls.Certificate) error {
	var certPEM []byte
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("testutil: unexpected private key type %T", c.PrivateKey)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("testutil: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return fmt.Errorf("testutil: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("testutil: %w", err)
	}
	return nil
}
