//go:build !linux

package bench

import "syscall"

// memberProcAttr puts a bench member in its own process group, so that a
// terminal's ^C reaches only the bench, which then kills its members. Only
// Linux can also tie a member's life to the bench's if the bench is killed.
func memberProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
