//go:build !linux

package etcdlaunch

import "syscall"

// Only Linux can tie a child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
