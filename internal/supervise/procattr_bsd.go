//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr: a process group of its own. These systems have no
// parent-death signal: if tenure run is killed with SIGKILL, the command
// keeps running.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
