//go:build linux

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openTmpfileSys opens an unnamed file in dir (O_TMPFILE): it has no name
// until linkTmpfile gives it one, and it vanishes with its last descriptor,
// so a writer that crashes leaves nothing behind.
func openTmpfileSys(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// tmpfileRefused tells whether openTmpfileSys failed because the kernel or
// the file system has no O_TMPFILE (EISDIR and EINVAL from kernels before
// 3.11, EOPNOTSUPP from file systems without it), not for want of access.
func tmpfileRefused(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
}

// linkTmpfile names the unnamed file fd as path. linkat(2) through
// /proc/self/fd needs no privilege (AT_EMPTY_PATH does), and fails with
// EEXIST if path exists, like link(2).
func linkTmpfile(fd int, path string) error {
	err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return &os.LinkError{Op: "linkat", Old: "O_TMPFILE", New: path, Err: err}
	}
	return nil
}

// writeFD writes all of data to fd and syncs it.
func writeFD(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	for {
		err := unix.Fsync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}
