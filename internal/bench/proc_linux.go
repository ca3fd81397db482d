//go:build linux

package bench

import "syscall"

// memberProcAttr puts a bench member in its own process group, so that a
// terminal's ^C reaches only the bench (which then kills its members), and
// has the kernel kill it if the bench dies without cleaning up.
func memberProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
