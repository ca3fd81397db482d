//go:build !linux

package fsys

import "os"

// Fdatasync is fsync(2) where fdatasync(2) is not portable.
func Fdatasync(f *os.File) error { return f.Sync() }

// Preallocate is a no-op where fallocate(2) is missing.
func Preallocate(*os.File, int64) {}
