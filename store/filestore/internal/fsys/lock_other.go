//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fsys

import (
	"errors"
	"io/fs"
	"os"

	"github.com/tenure-io/tenure/store/driver"
)

// Supported is false where this package has no flock.
const Supported = false

// ErrUnsupported is the error of the lock calls where there is no flock.
var ErrUnsupported = errors.New("filestore: not supported on this operating system")

func OpenLockFile(string) (int, error) { return -1, ErrUnsupported }
func TryLock(int) (bool, error)        { return false, ErrUnsupported }
func TryLockShared(int) (bool, error)  { return false, ErrUnsupported }
func Unlock(int) error                 { return ErrUnsupported }
func CloseFD(int) error                { return ErrUnsupported }
func errnoKind(error) driver.Kind      { return driver.Unknown }
func Unlinked(*os.File) bool           { return false }
func UnlinkedInfo(fs.FileInfo) bool    { return false }

// FileID identifies a file.
type FileID struct{ dev, ino uint64 }

func IDOf(string) (FileID, error) { return FileID{}, ErrUnsupported }
func FDID(int) (FileID, error)    { return FileID{}, ErrUnsupported }
