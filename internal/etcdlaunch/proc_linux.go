//go:build linux

package etcdlaunch

import "syscall"

// A parent killed without cleaning up (a test's -timeout, a panic) runs no
// Stop; the kernel then kills the server for it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
