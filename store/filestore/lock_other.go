//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filestore

import "errors"

// supported is false where this package has no flock: New refuses to open a
// store rather than offer compare-and-swap without a lock.
const supported = false

var pathMax = 260

var errUnsupported = errors.New("filestore: not supported on this operating system")

func rmdir(string) error { return errUnsupported }
