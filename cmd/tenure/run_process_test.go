//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tenure run as an OS process: this test binary, acting as the tenure
// command (runMainEnv), supervising a shell script.

// startRunProcess starts tenure run on a lock in a file store under dir
// and returns it with the file its command writes its pid to.
func startRunProcess(t *testing.T, dir, script string, attr *syscall.SysProcAttr, stdio *os.File) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	args := append([]string{"run", "--lock", "file://" + dir + "/store/leader.json"}, fastFlags...)
	args = append(args, "--", "sh", "-c", `echo $$ > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; `+script)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.SysProcAttr = attr
	if stdio != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio, stdio, stdio
	} else {
		// A file, not a pipe: a command that outlived tenure run would
		// hold a pipe open and keep cmd.Wait waiting.
		f, err := os.Create(filepath.Join(dir, "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, pidFile
}

func stderrOf(cmd *exec.Cmd) string {
	if f, ok := cmd.Stderr.(*os.File); ok {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
	return ""
}

func readPid(t *testing.T, pidFile string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitNonEmpty(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !gone(pid) {
			_ = syscall.Kill(-pid, syscall.SIGKILL) // its group: a failed test leaves nothing behind
		}
	})
	return pid
}

// gone reports whether pid has exited (a zombie has: it only waits to be
// reaped by whoever adopted it).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || strings.HasPrefix(string(b[i:]), ") Z") || strings.HasPrefix(string(b[i:]), ") X")
}

// waitExit waits for tenure run and returns its exit status.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatalf("tenure run did not exit\n%s", stderrOf(cmd))
		return -1
	}
}

func TestRunProcessCommandDiesWithTenureRun(t *testing.T) {
	dir := t.TempDir()
	cmd, pidFile := startRunProcess(t, dir, `while :; do sleep 0.05; done`, nil, nil)
	pid := readPid(t, pidFile)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Generous: the kernel delivers the parent-death signal at once, but
	// a loaded machine may take a while to run the dying process.
	for end := time.Now().Add(30 * time.Second); !gone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) outlived tenure run, which was killed with SIGKILL", pid)
		}
	}
}

// TestRunProcessSignals: SIGHUP, SIGUSR1, SIGUSR2 and SIGWINCH reach the
// command; SIGTERM, SIGINT and SIGQUIT stop it, release the lock, and
// tenure run exits with the command's status.
func TestRunProcessSignals(t *testing.T) {
	const recorder = `for s in HUP USR1 USR2 WINCH; do trap "echo $s >> $LOG" $s; done; ` +
		`trap 'echo TERM >> $LOG; exit 7' TERM; echo ready >> $LOG; while :; do sleep 0.05; done`
	t.Run("forwarded", func(t *testing.T) {
		dir := t.TempDir()
		log := filepath.Join(dir, "log")
		t.Setenv("LOG", log)
		cmd, pidFile := startRunProcess(t, dir, recorder, nil, nil)
		readPid(t, pidFile)
		want := "ready\n"
		waitFile(t, log, want)
		for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			want += strings.TrimPrefix(unix.SignalName(sig), "SIG") + "\n"
			waitFile(t, log, want)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != 7 {
			t.Fatalf("tenure run exited %d; want the command's 7\n%s", code, stderrOf(cmd))
		}
		waitFile(t, log, want+"TERM\n")
		checkReleased(t, dir)
	})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			dir := t.TempDir()
			// The command does not handle signals: it dies of SIGTERM
			// when tenure run stops it, and of a forwarded SIGHUP.
			cmd, pidFile := startRunProcess(t, dir, `while :; do sleep 0.05; done`, nil, nil)
			pid := readPid(t, pidFile)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			want := 128 + int(syscall.SIGTERM)
			if sig == syscall.SIGHUP {
				want = 128 + int(syscall.SIGHUP)
			}
			if code := waitExit(t, cmd); code != want {
				t.Fatalf("tenure run exited %d after %v; want %d\n%s", code, sig, want, stderrOf(cmd))
			}
			if !gone(pid) {
				t.Fatalf("the command (pid %d) is still running after tenure run exited", pid)
			}
			checkReleased(t, dir)
		})
	}
}

func checkReleased(t *testing.T, dir string) {
	t.Helper()
	code, out, errs := runCmd(t, "status", "file://"+dir+"/store/leader.json")
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("the lock after tenure run stopped (exit %d):\n%s%s", code, out, errs)
	}
}

// TestRunProcessCommandReadsTheTerminal: started from a terminal, the
// command can read it (it is not a background process group, which would
// be stopped by SIGTTIN).
func TestRunProcessCommandReadsTheTerminal(t *testing.T) {
	master, slave := openPty(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// tenure run leads a session whose controlling terminal is the pty,
	// so it is in the terminal's foreground process group, as a command
	// started from a shell is.
	cmd, pidFile := startRunProcess(t, dir, `read line && echo "got $line" > `+out,
		&syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}, slave)
	_ = slave.Close()
	go func() { _, _ = readAll(master) }() // drain the echo and the logs
	readPid(t, pidFile)
	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitFile(t, out, "got hello\n")
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("tenure run exited %d; want the command's 0", code)
	}
}

func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

func readAll(f *os.File) (int, error) {
	buf := make([]byte, 4096)
	total := 0
	for {
		n, err := f.Read(buf)
		total += n
		if err != nil {
			return total, err
		}
	}
}
