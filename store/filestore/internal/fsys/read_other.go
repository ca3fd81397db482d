//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fsys

import "os"

// Reader reads a file (read_unix.go reads through its descriptor alone).
type Reader struct{ f *os.File }

// OpenReader opens path for reading.
func OpenReader(path string) (Reader, error) {
	f, err := os.Open(path)
	return Reader{f}, err
}

// Read reads into p; io.EOF at the end.
func (r Reader) Read(p []byte) (int, error) { return r.f.Read(p) }

// Size is the file's size, if it is a regular file; -1 if not, or unknown.
func (r Reader) Size() int64 {
	if fi, err := r.f.Stat(); err == nil && fi.Mode().IsRegular() {
		return fi.Size()
	}
	return -1
}

// Close closes the file.
func (r Reader) Close() error { return r.f.Close() }
