package supervise

import "syscall"

// sysProcAttr: a process group of its own, and SIGKILL when tenure run's
// forking thread (see startCommand) dies, with tenure run itself.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
