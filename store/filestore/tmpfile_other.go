//go:build !linux

package filestore

import (
	"errors"
	"os"
	"sync/atomic"
)

// O_TMPFILE is Linux's: elsewhere every create writes a named temp file.

func openTmpfileSys(string) (int, error)          { return -1, errors.ErrUnsupported }
func tmpfileRefused(err error) bool               { return errors.Is(err, errors.ErrUnsupported) }
func linkTmpfile(int, string, *atomic.Bool) error { return errors.ErrUnsupported }
func writeFD(int, []byte) error                   { return errors.ErrUnsupported }

// writeFile writes all of data to f.
func writeFile(f *os.File, data []byte) error {
	_, err := f.Write(data)
	return err
}
