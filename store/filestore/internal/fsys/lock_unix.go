//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fsys

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/tenure-io/tenure/store/driver"
)

// Supported is whether this system has the flock this package needs.
const Supported = true

// OpenLockFile opens (creating it) a lock file. Read-only is enough for
// flock and lets processes of other users share a store whose lock files
// they cannot write.
func OpenLockFile(path string) (int, error) {
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

// TryLock takes an exclusive flock without blocking: a blocking flock could
// not be abandoned when the caller's context ends.
func TryLock(fd int) (bool, error) { return tryFlock(fd, syscall.LOCK_EX) }

// TryLockShared takes a shared flock without blocking.
func TryLockShared(fd int) (bool, error) { return tryFlock(fd, syscall.LOCK_SH) }

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

// Unlock releases fd's flock.
func Unlock(fd int) error {
	for {
		err := syscall.Flock(fd, syscall.LOCK_UN)
		if err != syscall.EINTR {
			return err
		}
	}
}

// CloseFD closes fd.
func CloseFD(fd int) error { return syscall.Close(fd) }

// Unlinked reports whether the file (or directory) open as f was removed (no name
// links to it any more): a name made since is another directory.
func Unlinked(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && UnlinkedInfo(fi)
}

// UnlinkedInfo is Unlinked of the file fi describes, as it was when fi
// was taken.
func UnlinkedInfo(fi fs.FileInfo) bool {
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

// FileID identifies a file: its device and inode.
type FileID struct{ dev, ino uint64 }

// IDOf returns the identity of the file at path (not following a link).
func IDOf(path string) (FileID, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return FileID{}, err
	}
	return FileID{uint64(st.Dev), uint64(st.Ino)}, nil
}

// FDID returns the identity of the open file fd.
func FDID(fd int) (FileID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return FileID{}, err
	}
	return FileID{uint64(st.Dev), uint64(st.Ino)}, nil
}
