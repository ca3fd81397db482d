//go:build linux

package fsys

import (
	"os"

	"golang.org/x/sys/unix"
)

// Fdatasync flushes f's data, and of its metadata only what reading the
// data needs (its size): one flush of the device for a file that grows.
func Fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// Preallocate allocates n bytes of blocks to f beyond its end, keeping
// its size (fallocate(2), FALLOC_FL_KEEP_SIZE); best effort.
func Preallocate(f *os.File, n int64) {
	for unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n) == unix.EINTR {
	}
}
