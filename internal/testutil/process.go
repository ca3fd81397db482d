package testutil

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// errMissing marks a server binary that is not installed: tests skip on it
// unless TENURE_REQUIRE_SERVERS=1.
var errMissing = errors.New("testutil: server binary not installed")

// CacheDir is where scripts/install-servers puts binaries.
func CacheDir() string {
	if d := os.Getenv("TENURE_CACHE"); d != "" {
		return filepath.Join(d, "bin")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "tenure", "bin")
}

// findBinary looks for name through envVar, then CacheDir, then PATH.
func findBinary(name, envVar string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		// An explicit setting that is wrong is a mistake to report, not a
		// reason to fall back to some other binary.
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("testutil: %s=%s: %w", envVar, p, err)
		}
		return p, nil
	}
	if d := CacheDir(); d != "" {
		p := filepath.Join(d, name)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s not found in $%s, %s or PATH; run scripts/install-servers (or set %s)",
		errMissing, name, envVar, CacheDir(), envVar)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago. Another
// process may take it before the server binds it; start retries on that.
var freePort = freePortSys

func freePortSys() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a running server.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done

	stopOnce sync.Once
}

func startProcess(name, bin string, args, env []string, dir string) (*process, error) {
	p := &process{name: name, log: newTailBuffer(64 << 10), done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testutil: start %s: %w", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the server to exit, kills it if it has not within a few seconds,
// and waits for it.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		if p.exited() {
			return
		}
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// tail returns the last lines of the server's output, for error messages.
func (p *process) tail() string {
	s := strings.TrimSpace(p.log.String())
	if s == "" {
		return "(no output)"
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last max bytes written to it. Servers write to it from
// os/exec's copying goroutines while tests read it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
