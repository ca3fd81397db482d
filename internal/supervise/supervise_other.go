//go:build !unix

package supervise

import (
	"os"
	"os/exec"
	"syscall"
)

// Without process groups or signals to forward, tenure run stops the
// command itself, and a command can outlive a tenure run that is killed.
// ForwardedSignals reach the command as they reach tenure run: none here;
// StopSignals end leadership cleanly.
func ForwardedSignals() []os.Signal { return nil }

func StopSignals() []os.Signal { return []os.Signal{os.Interrupt} }

func startCommand(cmd *exec.Cmd, _ bool) (<-chan error, func(), error) {
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done, func() {}, nil
}

func ForegroundTerminal() bool { return false }

func signalGroup(pid int, _ syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
