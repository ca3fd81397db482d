//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
	"syscall"

	"github.com/tenure-io/tenure/store/driver"
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

// openLockFile opens (creating it) a lock file. Read-only is enough for
// flock and lets processes of other users share a store whose lock files
// they cannot write.
func openLockFile(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CREAT|syscall.O_CLOEXEC, 0o666)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// tryLock takes an exclusive flock without blocking: a blocking flock could
// not be abandoned when the caller's context ends.
func tryLock(fd int) (bool, error) { return tryFlock(fd, syscall.LOCK_EX) }

// tryLockShared takes a shared flock without blocking.
func tryLockShared(fd int) (bool, error) { return tryFlock(fd, syscall.LOCK_SH) }

// tryFlock takes the flock how (LOCK_EX or LOCK_SH) without blocking.
func tryFlock(fd, how int) (bool, error) {
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case syscall.EINTR:
			continue
		case syscall.EWOULDBLOCK:
			return false, nil
		}
		return false, err
	}
}

func unlock(fd int) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_UN)
		if err != syscall.EINTR {
			return err
		}
	}
}

func closeFD(fd int) error { return syscall.Close(fd) }

// rmdir removes dir if it is empty.
func rmdir(dir string) error { return syscall.Rmdir(dir) }

// unlinked reports whether the file (or directory) open as f was removed (no name
// links to it any more): a name made since is another directory.
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

func errnoKind(err error) driver.Kind {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return driver.Unknown
	}
	switch errno {
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EAGAIN, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EINTR:
		return driver.Transient
	case syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.ENOTDIR, syscall.ELOOP:
		return driver.Permanent
	case syscall.ENAMETOOLONG:
		return driver.InvalidArgument
	}
	return driver.Unknown
}

// fileID identifies a file: its device and inode.
type fileID struct{ dev, ino uint64 }

// idOf returns the identity of the file at path (not following a link).
func idOf(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}

// fdID returns the identity of the open file fd.
func fdID(fd int) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fileID{}, err
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}
