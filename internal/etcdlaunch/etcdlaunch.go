// Package etcdlaunch finds an etcd binary and runs a private single-node
// etcd on loopback ports with its data in a directory of its own. The
// integration tests (through internal/testutil) and tenure bench kv (which
// compares the kv store with etcd on the same disk) share it; it does not
// depend on package testing.
package etcdlaunch

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/internal/tlsutil"
)

// ErrMissing means no etcd binary was found.
var ErrMissing = errors.New("etcd is not installed")

// ErrPortTaken means another process bound a port chosen for the server
// before it did; Launch retries on it.
var ErrPortTaken = errors.New("port taken")

// MinVersion is the oldest etcd accepted, as major and minor.
var MinVersion = [2]int{3, 4}

// BinEnv names the variable that points at an etcd binary explicitly.
const BinEnv = "TENURE_ETCD_BIN"

// Find looks for etcd through $TENURE_ETCD_BIN, then in cacheDir (if not
// empty), then on PATH, then at /usr/bin/etcd, where Debian's etcd-server
// package puts it (PATH may not include /usr/bin). The error wraps
// ErrMissing when there is none.
func Find(cacheDir string) (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		// An explicit setting that is wrong is a mistake to report, not a
		// reason to fall back to some other binary.
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("etcdlaunch: %s=%s: %w", BinEnv, p, err)
		}
		return p, nil
	}
	if cacheDir != "" {
		if p := filepath.Join(cacheDir, "etcd"); isExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if isExecutable("/usr/bin/etcd") == nil {
		return "/usr/bin/etcd", nil
	}
	where := "PATH or /usr/bin"
	if cacheDir != "" {
		where = cacheDir + ", " + where
	}
	return "", fmt.Errorf("%w: etcd not found in $%s, %s (on Debian and Ubuntu: apt-get install etcd-server)", ErrMissing, BinEnv, where)
}

// cachedVersioned matches the versioned binaries scripts/k8s-storage --etcd
// builds into the cache, etcd-v3.7.3 and the like.
var cachedVersioned = regexp.MustCompile(`^etcd-v(\d+)\.(\d+)\.(\d+)$`)

// FindNewest is Find for a reference measurement, which should be made
// against the newest etcd at hand: $TENURE_ETCD_BIN when set, then the
// newest versioned binary in cacheDir (etcd-vX.Y.Z, as scripts/k8s-storage
// --etcd builds it), then whatever Find finds. The tests keep to Find, so
// a cached newer etcd does not change the server they run against.
func FindNewest(cacheDir string) (string, error) {
	if os.Getenv(BinEnv) != "" || cacheDir == "" {
		return Find(cacheDir)
	}
	entries, _ := os.ReadDir(cacheDir)
	best, bestV := "", [3]int{}
	for _, e := range entries {
		m := cachedVersioned.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		var v [3]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		p := filepath.Join(cacheDir, e.Name())
		if isExecutable(p) != nil {
			continue
		}
		if best == "" || v[0] > bestV[0] || v[0] == bestV[0] && (v[1] > bestV[1] || v[1] == bestV[1] && v[2] > bestV[2]) {
			best, bestV = p, v
		}
	}
	if best != "" {
		return best, nil
	}
	return Find(cacheDir)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

var versionLine = regexp.MustCompile(`(?m)^etcd Version: (\d+)\.(\d+)\.(\d+)`)

// Version runs bin --version and checks that it is MinVersion or later.
func Version(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("etcdlaunch: %s --version: %w; output:\n%s", bin, err, out)
	}
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("etcdlaunch: %s --version printed no version:\n%s", bin, out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	v := fmt.Sprintf("%s.%s.%s", m[1], m[2], m[3])
	if major < MinVersion[0] || major == MinVersion[0] && minor < MinVersion[1] {
		return "", fmt.Errorf("etcdlaunch: %s is etcd %s; tenure needs %d.%d or later", bin, v, MinVersion[0], MinVersion[1])
	}
	return v, nil
}

// Process is a started server process.
type Process interface {
	PID() int
	// Exited reports whether the process has exited; Err is then Wait's
	// result.
	Exited() bool
	Err() error
	// Tail returns the last lines of its output, for error messages.
	Tail() string
	// Stop asks the process to exit, kills it if it has not within a few
	// seconds, and waits for it.
	Stop()
}

// StartFunc starts bin with args in dir, adding env to this process's
// environment.
type StartFunc func(name, bin string, args, env []string, dir string) (Process, error)

// Options configure a server.
type Options struct {
	// TLS serves clients over TLS and requires client certificates, all
	// from a throw-away CA; the PEM files are in the returned Server.
	TLS bool
	// MaxRequestBytes is the server's --max-request-bytes; 0 leaves etcd's
	// default (1.5 MiB).
	MaxRequestBytes int
	// ParentDir holds the server's directory (its data, certificates);
	// empty means os.TempDir(). Give a directory on the disk to measure.
	ParentDir string
	// ExtraArgs are appended to the server's flags.
	ExtraArgs []string
	// StartTimeout bounds the wait for the first answer; 0 means a minute.
	StartTimeout time.Duration
	// Start runs the process; nil means StartProcess.
	Start StartFunc
}

// Server is a running single-node etcd cluster.
type Server struct {
	Endpoint  string // "127.0.0.1:port", the client address
	ClientURL string // "http://127.0.0.1:port" (https with TLS)
	Version   string // the server's version, such as "3.4.23"

	MaxRequestBytes int // as in Options; 0: etcd's default

	// With Options.TLS: PEM files for a client. The server requires a
	// client certificate signed by CAFile.
	CAFile, CertFile, KeyFile string

	Dir     string // the server's directory, removed by Stop
	DataDir string // etcd's --data-dir, inside Dir
	Proc    Process
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() {
	s.Proc.Stop()
	_ = os.RemoveAll(s.Dir)
}

// NewClient returns a client with the etcd client's default settings but a
// quiet logger and a send limit that matches the server's.
func (s *Server) NewClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   []string{s.ClientURL},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if s.MaxRequestBytes > 0 {
		cfg.MaxCallSendMsgSize = s.MaxRequestBytes + 1<<20
	}
	if s.CAFile != "" {
		tc, err := tlsutil.LoadClient(s.CAFile, s.CertFile, s.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

// Launch starts etcd binary bin, of version version (see Find and
// Version), and waits until it answers a read. It retries with other ports
// when one is taken.
func Launch(bin, version string, opts Options) (*Server, error) {
	if opts.Start == nil {
		opts.Start = StartProcess
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = time.Minute
	}
	const attempts = 3
	for i := 1; ; i++ {
		srv, err := launchOnce(bin, version, opts)
		if err == nil || !errors.Is(err, ErrPortTaken) || i == attempts {
			return srv, err
		}
	}
}

func launchOnce(bin, version string, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp(opts.ParentDir, "tenure-etcd-")
	if err != nil {
		return nil, fmt.Errorf("etcdlaunch: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("etcdlaunch: no free port: %w", err)
	}
	srv := &Server{
		Endpoint:        "127.0.0.1:" + strconv.Itoa(ports[0]),
		Version:         version,
		MaxRequestBytes: opts.MaxRequestBytes,
		Dir:             dir,
		// etcd creates the data directory itself, with the 0700
		// permissions it insists on.
		DataDir: filepath.Join(dir, "data"),
	}
	scheme := "http"
	var tlsArgs []string
	if opts.TLS {
		scheme = "https"
		if err := writeCerts(dir, srv); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		tlsArgs = []string{
			"--cert-file", filepath.Join(dir, "server.pem"),
			"--key-file", filepath.Join(dir, "server-key.pem"),
			"--trusted-ca-file", srv.CAFile,
			"--client-cert-auth",
		}
	}
	srv.ClientURL = scheme + "://" + srv.Endpoint
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		"--name", "tenure",
		"--data-dir", srv.DataDir,
		"--listen-client-urls", srv.ClientURL,
		"--advertise-client-urls", srv.ClientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "tenure=" + peerURL,
		"--initial-cluster-state", "new",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	}
	if opts.MaxRequestBytes > 0 {
		args = append(args, "--max-request-bytes", strconv.Itoa(opts.MaxRequestBytes))
	}
	args = append(append(args, tlsArgs...), opts.ExtraArgs...)
	// etcd also reads its flags from ETCD_* variables: an inherited one
	// must not change the server.
	proc, err := opts.Start("etcd", bin, args, cleanEnv(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv.Proc = proc
	if err := waitReady(srv, opts.StartTimeout); err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the server binds it; Launch retries
// on that.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// cleanEnv returns assignments that empty every ETCD_* variable of this
// process's environment.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "ETCD_") {
			env = append(env, name+"=")
		}
	}
	return env
}

// waitReady polls with a Get until the server answers, the process exits,
// or timeout passes.
func waitReady(srv *Server, timeout time.Duration) error {
	c, err := srv.NewClient()
	if err != nil {
		return fmt.Errorf("etcdlaunch: client for %s: %w", srv.ClientURL, err)
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		if srv.Proc.Exited() {
			out := srv.Proc.Tail()
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("etcdlaunch: etcd on %s: %w", srv.Endpoint, ErrPortTaken)
			}
			return fmt.Errorf("etcdlaunch: etcd exited during start-up (%v); its output ends:\n%s", srv.Proc.Err(), out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Get(ctx, "tenure-etcdlaunch-ready")
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdlaunch: etcd at %s not ready after %v (last error: %v); its output ends:\n%s",
				srv.ClientURL, timeout, lastErr, srv.Proc.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeCerts writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir, and records the client's files in srv.
func writeCerts(dir string, srv *Server) error {
	ca, err := tlsutil.NewCA("tenure etcd CA")
	if err != nil {
		return fmt.Errorf("etcdlaunch: CA: %w", err)
	}
	server, err := ca.Issue("tenure etcd server", "127.0.0.1", "localhost")
	if err != nil {
		return fmt.Errorf("etcdlaunch: server certificate: %w", err)
	}
	client, err := ca.Issue("tenure etcd client")
	if err != nil {
		return fmt.Errorf("etcdlaunch: client certificate: %w", err)
	}
	srv.CAFile = filepath.Join(dir, "ca.pem")
	srv.CertFile = filepath.Join(dir, "client.pem")
	srv.KeyFile = filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(srv.CAFile, ca.PEM(), 0o600); err != nil {
		return fmt.Errorf("etcdlaunch: %w", err)
	}
	if err := writeKeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), server); err != nil {
		return err
	}
	return writeKeyPair(srv.CertFile, srv.KeyFile, client)
}

func writeKeyPair(certFile, keyFile string, c tls.Certificate) error {
	var certPEM []byte
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("etcdlaunch: unexpected private key type %T", c.PrivateKey)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("etcdlaunch: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return fmt.Errorf("etcdlaunch: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("etcdlaunch: %w", err)
	}
	return nil
}

// StartProcess is the default StartFunc: the process's output is kept for
// Tail, and on Linux the kernel kills it if this process dies first.
func StartProcess(name, bin string, args, env []string, dir string) (Process, error) {
	p := &process{done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = &p.out
	cmd.Stderr = &p.out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("etcdlaunch: start %s: %w", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type process struct {
	cmd      *exec.Cmd
	out      tailBuffer
	done     chan struct{} // closed when the process has exited
	err      error         // Wait's result, valid after done
	stopOnce sync.Once
}

func (p *process) PID() int { return p.cmd.Process.Pid }

func (p *process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

func (p *process) Stop() {
	p.stopOnce.Do(func() {
		if p.Exited() {
			return
		}
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (p *process) Tail() string {
	s := strings.TrimSpace(p.out.String())
	if s == "" {
		return "(no output)"
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last 64 KiB written to it; os/exec's copying
// goroutine writes while Tail reads.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const tailMax = 64 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - tailMax; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
