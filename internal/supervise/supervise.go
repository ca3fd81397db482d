// Package supervise runs a command for as long as its caller leads, as
// tenure run does: in a process group of its own (its children are
// signalled with it), in the terminal's foreground when tenure run has
// it, and dead before leadership ends: SIGTERM to its group, then SIGKILL
// after a grace period the caller keeps shorter than its lease's margin.
//
// On Linux the command also gets SIGKILL if the process that started it
// dies; on other systems a command can outlive a caller that is killed.
// Without process groups (not unix), the command alone is killed.
package supervise

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Lead is one run of a command for one leadership.
type Lead struct {
	Cmd *exec.Cmd // the command, not started
	// Terminal gives the command the terminal, which the caller's
	// standard input is and whose foreground group is the caller's (see
	// ForegroundTerminal).
	Terminal bool
	Grace    time.Duration // between SIGTERM and SIGKILL
	Term     uint64        // the leadership's term, for the log
	Log      *slog.Logger
	// Started, if set, is called with the command's process once it
	// runs, and with nil once it has stopped: the process to forward
	// signals to.
	Started func(*os.Process)
}

// Run starts the command and waits until it exits by itself (exited is
// true) or lctx ends; then it stops the command's group, SIGTERM and,
// after Grace, SIGKILL, and waits for it. status is the command's exit
// status (ExitStatus). err is the error of starting it; then nothing
// runs.
func (l *Lead) Run(lctx context.Context) (status int, exited bool, err error) {
	log, cmd := l.Log, l.Cmd
	done, restore, err := startCommand(cmd, l.Terminal)
	if err != nil {
		return 0, false, err
	}
	defer restore()
	if l.Started != nil {
		l.Started(cmd.Process)
		defer l.Started(nil)
	}
	log.Info("leading: started the command", "term", l.Term, "pid", cmd.Process.Pid)
	select {
	case err := <-done:
		return ExitStatus(err), true, nil
	case <-lctx.Done():
	}
	// Leadership is ending: stop the command before the lease can lapse.
	log.Info("leadership ending: sending SIGTERM", "pid", cmd.Process.Pid, "grace", l.Grace)
	signalGroup(cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(l.Grace)
	defer t.Stop()
	var werr error
	select {
	case werr = <-done:
	case <-t.C:
		log.Warn("the command outlived its grace period: sending SIGKILL", "pid", cmd.Process.Pid)
		signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	log.Info("the command has stopped", "term", l.Term, "status", ExitStatus(werr))
	return ExitStatus(werr), false, nil
}

// ExitStatus is the exit status of a command that cmd.Wait answered err:
// 0, its own status, 128+N for death by signal N, or 1 when it did not
// run.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
