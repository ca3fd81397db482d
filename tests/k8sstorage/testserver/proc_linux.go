package testserver

import "syscall"

// sysProcAttr has a server killed when the test binary dies, so that no
// server outlives an interrupted run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
