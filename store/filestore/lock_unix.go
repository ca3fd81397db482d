//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filestore

import (
	"runtime"
	"syscall"
)

const supported = true

// pathMax is the longest path, terminating NUL included, that the kernel
// accepts in one call.
var pathMax = func() int {
	if runtime.GOOS == "linux" {
		return 4096
	}
	return 1024
}()

// rmdir removes dir if it is empty.
func rmdir(dir string) error { return syscall.Rmdir(dir) }
