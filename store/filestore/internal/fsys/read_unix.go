//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fsys

import (
	"io"
	"os"
	"syscall"
)

// Reader reads a file through its descriptor alone. A small file read
// whole (leader_state.json, read for every confirmation round) costs less
// so than through an *os.File, whose poller registration and finalizer
// cost more than the read.
type Reader struct {
	fd   int
	path string
}

// OpenReader opens path for reading. Its errors are *os.PathError, as
// os.Open's.
func OpenReader(path string) (Reader, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		switch err {
		case nil:
			return Reader{fd, path}, nil
		case syscall.EINTR:
			continue
		}
		return Reader{-1, path}, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

// Read reads into p; io.EOF at the end.
func (r Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := syscall.Read(r.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: r.path, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Size is the file's size, if it is a regular file; -1 if not, or unknown.
func (r Reader) Size() int64 {
	var st syscall.Stat_t
	if syscall.Fstat(r.fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return -1
	}
	return st.Size
}

// Close closes the descriptor.
func (r Reader) Close() error { return syscall.Close(r.fd) }
