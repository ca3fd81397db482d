//go:build !linux

package testutil

import "syscall"

// Only Linux can tie a child's life to its parent's; elsewhere Main and
// t.Cleanup stop servers, which a test binary killed by -timeout skips.
func sysProcAttr() *syscall.SysProcAttr { return nil }
