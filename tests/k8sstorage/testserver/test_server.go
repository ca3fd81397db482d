// Package testserver stands in for k8s.io/apiserver's
// pkg/storage/etcd3/testserver when scripts/k8s-storage runs Kubernetes'
// storage suites: it has the same functions, NewTestConfig and RunEtcd,
// but RunEtcd starts a fresh tenure group (`tenure etcd serve` OS
// processes on a file:// store under the config's Dir) instead of an
// embedded etcd, or, for reference, an etcd binary. The client it returns is
// wrapped in the suites' KV recorder as upstream's is.
//
// The environment chooses the server:
//
//	TENURE_K8S_SERVER      tenure (the default) or etcd
//	TENURE_K8S_SERVER_BIN  the server's binary (required)
//	TENURE_K8S_NODES       the tenure group's node count (default 1)
package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// Environment variables that choose the server.
const (
	ServerEnv = "TENURE_K8S_SERVER"
	BinEnv    = "TENURE_K8S_SERVER_BIN"
	NodesEnv  = "TENURE_K8S_NODES"
)

// startTimeout bounds a server's start, as upstream's wait for ReadyNotify.
const startTimeout = 60 * time.Second

// stopTimeout is how long a stopping server has after SIGTERM before it is
// killed.
const stopTimeout = 10 * time.Second

// getAvailablePorts returns count TCP ports that are free for binding.
func getAvailablePorts(count int) ([]int, error) {
	ports := []int{}
	for i := 0; i < count; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("could not bind to a port: %v", err)
		}
		// It is possible but unlikely that someone else binds this port
		// before the server does.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NewTestConfig returns a configuration as upstream's does: embed.NewConfig()
// with free loopback ports for the client and peer listeners, a data
// directory removed at the end of the test, and fsync off (etcd only).
// RunEtcd reads its Dir, client URL, peer URL (etcd), MaxRequestBytes,
// WatchProgressNotifyInterval and QuotaBackendBytes (etcd).
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()

	cfg.UnsafeNoFsync = true

	ports, err := getAvailablePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	cfg.Dir = t.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return cfg
}

var autoPortLock sync.Mutex

// RunEtcd starts a server with the provided config (or NewTestConfig(t) if
// nil): a new tenure group, or an etcd process, per TENURE_K8S_SERVER. It
// returns a client connected to every node, wrapped in the suites'
// recorders. The server is stopped when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()

	if cfg == nil {
		// Ports are picked free, then bound by the server: hold the lock
		// until the server has them.
		autoPortLock.Lock()
		defer autoPortLock.Unlock()
		cfg = NewTestConfig(t)
	}
	if cfg.ClientTLSInfo.CertFile != "" || cfg.ClientTLSInfo.TrustedCAFile != "" {
		t.Fatal("testserver: client TLS is not supported by this test server")
	}

	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Fatalf("testserver: set %s to the server's binary", BinEnv)
	}
	var (
		endpoints []string
		procs     []*serverProcess
		err       error
	)
	switch kind := os.Getenv(ServerEnv); kind {
	case "", "tenure":
		endpoints, procs, err = startTenure(t, bin, cfg)
	case "etcd":
		endpoints, procs, err = startEtcd(t, bin, cfg)
	default:
		err = fmt.Errorf("%s=%q: want tenure or etcd", ServerEnv, kind)
	}
	// Registered even on error: stop whatever was started.
	t.Cleanup(func() { stopAll(t, procs) })
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := waitReady(endpoints, procs); err != nil {
		t.Fatalf("testserver: %v", err)
	}

	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	kubernetesRecorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.KV = storagetesting.NewKVRecorder(client.KV, kubernetesRecorder)
	client.Kubernetes = kubernetesRecorder
	return client
}

// startTenure starts the nodes of a new tenure group on a file:// store
// under cfg.Dir. The first node listens on cfg's client URL.
func startTenure(t testing.TB, bin string, cfg *embed.Config) ([]string, []*serverProcess, error) {
	nodes := 1
	if s := os.Getenv(NodesEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, nil, fmt.Errorf("%s=%q: want a node count", NodesEnv, s)
		}
		nodes = n
	}
	hosts := []string{cfg.ListenClientUrls[0].Host}
	if nodes > 1 {
		ports, err := getAvailablePorts(nodes - 1)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range ports {
			hosts = append(hosts, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
	}
	storeDir := filepath.Join(cfg.Dir, "store")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, nil, err
	}
	var (
		endpoints []string
		procs     []*serverProcess
	)
	for i, host := range hosts {
		args := []string{"etcd", "serve",
			"--store", "file://" + storeDir,
			"--id", fmt.Sprintf("node%d", i+1),
			"--peer-listen", "127.0.0.1:0",
			"--peer-plaintext",
			"--listen-client-urls", "http://" + host,
			"--watch-progress-notify-interval", cfg.WatchProgressNotifyInterval.String(),
			"--log-level", "error",
		}
		if cfg.MaxRequestBytes != 0 {
			args = append(args, "--max-request-bytes", strconv.FormatUint(uint64(cfg.MaxRequestBytes), 10))
		}
		p, err := startProcess(t, fmt.Sprintf("tenure-%d", i+1), bin, args)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, p)
		endpoints = append(endpoints, "http://"+host)
	}
	return endpoints, procs, nil
}

// startEtcd starts one etcd member with cfg's URLs and data directory.
func startEtcd(t testing.TB, bin string, cfg *embed.Config) ([]string, []*serverProcess, error) {
	client, peer := cfg.ListenClientUrls[0].String(), cfg.ListenPeerUrls[0].String()
	args := []string{
		"--name", cfg.Name,
		"--data-dir", cfg.Dir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", cfg.Name + "=" + peer,
		"--watch-progress-notify-interval", cfg.WatchProgressNotifyInterval.String(),
		"--log-level", "error",
	}
	if cfg.UnsafeNoFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	if cfg.QuotaBackendBytes != 0 {
		args = append(args, "--quota-backend-bytes", strconv.FormatInt(cfg.QuotaBackendBytes, 10))
	}
	if cfg.MaxRequestBytes != 0 {
		args = append(args, "--max-request-bytes", strconv.FormatUint(uint64(cfg.MaxRequestBytes), 10))
	}
	p, err := startProcess(t, "etcd", bin, args)
	if err != nil {
		return nil, nil, err
	}
	return []string{client}, []*serverProcess{p}, nil
}

// waitReady waits until a linearizable read succeeds on every endpoint, or
// a server exits, or startTimeout passes.
func waitReady(endpoints []string, procs []*serverProcess) error {
	deadline := time.Now().Add(startTimeout)
	for _, ep := range endpoints {
		// Quiet: until the server listens, every attempt is refused.
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: startTimeout, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Get(ctx, "testserver-ready")
			cancel()
			if err == nil {
				break
			}
			for _, p := range procs {
				if p.exited() {
					_ = c.Close()
					return fmt.Errorf("%s exited before it was ready: %v\n%s", p.name, p.err, p.output())
				}
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return fmt.Errorf("%s not ready after %v: %v", ep, startTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nil
}

// serverProcess is a server's OS process and its combined output.
type serverProcess struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // set before done closes
}

func startProcess(t testing.TB, name, bin string, args []string) (*serverProcess, error) {
	p := &serverProcess{name: name, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *serverProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *serverProcess) output() string { return p.out.String() }

// stopAll stops every process with SIGTERM, and SIGKILL after
// stopTimeout. A process that had exited on its own fails the test, as
// upstream's does through the embedded server's error channel; a test that
// failed gets the servers' output.
func stopAll(t testing.TB, procs []*serverProcess) {
	for _, p := range procs {
		if p.exited() {
			t.Errorf("testserver: %s exited during the test: %v\n%s", p.name, p.err, p.output())
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("testserver: %s did not stop within %v of SIGTERM\n%s", p.name, stopTimeout, p.output())
		}
		var exit *exec.ExitError
		if p.err != nil && !errors.As(p.err, &exit) {
			t.Errorf("testserver: %s: %v", p.name, p.err)
		}
		if t.Failed() && p.out.Len() > 0 {
			t.Logf("testserver: %s's output:\n%s", p.name, p.output())
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}
