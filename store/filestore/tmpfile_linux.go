//go:build linux

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"sync/atomic"

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

// linkTmpfile names the unnamed file fd as path; like link(2), linkat(2)
// fails with EEXIST if path exists. It links the descriptor itself
// (AT_EMPTY_PATH), which the kernel refuses (ENOENT) to a process without
// CAP_DAC_READ_SEARCH, else through /proc/self/fd/N, which needs no
// privilege but costs a walk through /proc. Once the first is refused,
// viaProc is set and only the second is tried.
func linkTmpfile(fd int, path string, viaProc *atomic.Bool) error {
	if viaProc.Load() {
		return linkErr(path, linkViaProc(fd, path))
	}
	err := linkEmptyPath(fd, path)
	if err != unix.ENOENT && err != unix.EPERM {
		return linkErr(path, err)
	}
	// Refused, or path's directory is missing: the other way tells.
	err = linkViaProc(fd, path)
	if err == nil || err == unix.EEXIST {
		viaProc.Store(true)
	}
	return linkErr(path, err)
}

func linkViaProc(fd int, path string) error {
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
}

// linkEmptyPath links fd itself as path; tests replace it to refuse.
var linkEmptyPath = linkEmptyPathSys

func linkEmptyPathSys(fd int, path string) error {
	return unix.Linkat(fd, "", unix.AT_FDCWD, path, unix.AT_EMPTY_PATH)
}

func linkErr(path string, err error) error {
	if err != nil {
		return &os.LinkError{Op: "linkat", Old: "O_TMPFILE", New: path, Err: err}
	}
	return nil
}

// writeFD writes all of data to fd and syncs it.
func writeFD(fd int, data []byte) error {
	if err := writeOut(fd, data); err != nil {
		return err
	}
	for {
		err := unix.Fsync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// writeOut writes all of data to fd, a large value piece by piece, each
// piece on the disk (not yet synced) before the next is written. The
// sync that follows is what makes it durable and reports its errors:
// sync_file_range is advice here, and its errors are ignored.
func writeOut(fd int, data []byte) error {
	large := len(data) > writeBackPiece
	for off := 0; off < len(data); {
		piece := data[off:min(len(data), off+writeBackPiece)]
		for len(piece) > 0 {
			n, err := unix.Write(fd, piece)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			piece, off = piece[n:], off+n
		}
		if large {
			start := int64(max(0, off-writeBackPiece))
			for unix.SyncFileRange(fd, start, int64(off)-start, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER) == unix.EINTR {
			}
		}
	}
	return nil
}

// writeFile writes all of data to f (see writeOut).
func writeFile(f *os.File, data []byte) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := sc.Write(func(fd uintptr) bool {
		werr = writeOut(int(fd), data)
		return true
	}); err != nil {
		return err
	}
	return werr
}
