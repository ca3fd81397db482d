//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filestore

import (
	"errors"
	"os"

	"github.com/tenure-io/tenure/store/driver"
)

// supported is false where this package has no flock: New refuses to open a
// store rather than offer compare-and-swap without a lock.
const supported = false

var pathMax = 260

var errUnsupported = errors.New("filestore: not supported on this operating system")

func openLockFile(string) (int, error) { return -1, errUnsupported }
func tryLock(int) (bool, error)        { return false, errUnsupported }
func tryLockShared(int) (bool, error)  { return false, errUnsupported }
func unlock(int) error                 { return errUnsupported }
func closeFD(int) error                { return errUnsupported }
func errnoKind(error) driver.Kind      { return driver.Unknown }
func rmdir(string) error               { return errUnsupported }
func unlinked(*os.File) bool           { return false }

type fileID struct{ dev, ino uint64 }

func idOf(string) (fileID, error) { return fileID{}, errUnsupported }
func fdID(int) (fileID, error)    { return fileID{}, errUnsupported }
