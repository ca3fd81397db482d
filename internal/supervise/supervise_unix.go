//go:build unix

package supervise

import (
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ForwardedSignals reach the command as they reach tenure run, as consul
// lock forwards them; StopSignals end leadership cleanly.
func ForwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}
}

func StopSignals() []os.Signal { return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT} }

// startCommand starts cmd in a process group of its own, so that the
// command's children are signalled with it. If ctty is true, tenure run's
// standard input is a terminal and tenure run is in its foreground process
// group: the command's group becomes the foreground group, so the command
// can read the terminal (a background group that reads gets SIGTTIN), and
// restore gives the terminal back. exited yields cmd.Wait's result.
//
// The command gets SIGKILL if tenure run dies (on Linux): the parent-death
// signal fires when the thread that forked the child exits, so the child
// is started from a goroutine locked to its thread, which lives until the
// child has been waited for.
func startCommand(cmd *exec.Cmd, ctty bool) (exited <-chan error, restore func(), err error) {
	cmd.SysProcAttr = sysProcAttr()
	if ctty {
		cmd.SysProcAttr.Foreground = true // implies Setpgid
		cmd.SysProcAttr.Ctty = 0          // the child's fd 0, tenure run's stdin
	}
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with this goroutine, after the
		// child is dead.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	restore = func() {}
	if ctty {
		restore = takeTerminalBack
	}
	return done, restore, nil
}

// ForegroundTerminal reports whether standard input is a terminal whose
// foreground process group is tenure run's.
func ForegroundTerminal() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// takeTerminalBack makes tenure run's process group the terminal's
// foreground group again. A background group that sets it gets SIGTTOU
// unless it ignores the signal.
func takeTerminalBack() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
}

// signalGroup signals the command's process group.
func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
