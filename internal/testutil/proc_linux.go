//go:build linux

package testutil

import "syscall"

// A test binary killed by -timeout or a panic runs no cleanups; the kernel
// then kills the server for us.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
