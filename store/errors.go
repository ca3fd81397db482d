package store

import (
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/store/driver"
)

// Sentinel errors. Every error returned by a *Store method is an *Error that
// matches exactly one of the first six, ErrInvalidArgument, ErrTooLarge or
// ErrUnsupported with errors.Is (or none, for an unclassified error), and
// unwraps to the driver's own error, so errors.As reaches SDK error types.
var (
	ErrNotFound           = errors.New("store: not found")
	ErrPreconditionFailed = errors.New("store: precondition failed")
	ErrConflict           = errors.New("store: conflict")
	ErrThrottled          = errors.New("store: throttled")
	ErrTransient          = errors.New("store: transient error")
	ErrPermanent          = errors.New("store: permanent error")

	// ErrInvalidArgument: a bad key, condition or limit, or a key the driver
	// cannot store. Nothing was sent to the store.
	ErrInvalidArgument = errors.New("store: invalid argument")
	// ErrTooLarge: GetLimited found a value larger than its limit, and read
	// no more of it than the limit.
	ErrTooLarge = errors.New("store: value too large")
	// ErrUnsupported: the store cannot keep the call's contract, so the
	// call was refused and changed nothing: a conditional delete on a
	// server that ignores its condition (MinIO, for one). The error names
	// the store and what it ignores.
	ErrUnsupported = errors.New("store: unsupported by this store")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrConditionsIgnored: the store accepted a write whose condition did
	// not hold. tenure refuses to run on such a store.
	ErrConditionsIgnored = errors.New("store: conditional writes are not enforced")
	// ErrReadOnly: a write through a Store opened with ReadOnly(). Nothing
	// was sent to the store. It comes with ErrInvalidArgument.
	ErrReadOnly = errors.New("store: read-only")
	// ErrUnknownScheme: Open was given a URL whose scheme no driver registered.
	ErrUnknownScheme = errors.New("store: unknown URL scheme")
	// ErrCorrupt: the store's own data is damaged, a value or something
	// the driver keeps beside it (a file:// pack segment missing between
	// others, a frame that fails its checksum; a Route 53 TXT record at a
	// key's name that the driver cannot decode). It comes with
	// ErrPermanent; the call fails until the data is repaired.
	ErrCorrupt = errors.New("store: corrupt data")
)

// Error is the error every Store method returns: the operation, the key, the
// classification and the driver's error.
type Error struct {
	Op   string // "get", "put", "delete", "list"
	Key  string // the key, or the prefix for list
	Kind driver.Kind
	Err  error // the driver's error
}

func (e *Error) Error() string {
	return fmt.Sprintf("store: %s %q: %s: %v", e.Op, e.Key, e.Kind, e.Err)
}

// Unwrap returns the driver's error, so errors.As reaches SDK types and
// errors.Is reaches context errors.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of the error's kind.
func (e *Error) Is(target error) bool {
	s := kindSentinel(e.Kind)
	return s != nil && target == s
}

func kindSentinel(k driver.Kind) error {
	switch k {
	case driver.NotFound:
		return ErrNotFound
	case driver.PreconditionFailed:
		return ErrPreconditionFailed
	case driver.Conflict:
		return ErrConflict
	case driver.Throttled:
		return ErrThrottled
	case driver.Transient:
		return ErrTransient
	case driver.Permanent:
		return ErrPermanent
	case driver.InvalidArgument:
		return ErrInvalidArgument
	case driver.TooLarge:
		return ErrTooLarge
	case driver.Unsupported:
		return ErrUnsupported
	}
	return nil
}

// KindOf returns the classification of an error returned by a Store method,
// or driver.Unknown for any other error.
func KindOf(err error) driver.Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return driver.Unknown
}

// IsRetryable reports whether a failed call may succeed if repeated: conflict,
// throttling, transient and unclassified errors. A write that failed this way
// may have been applied; resolve it with PutResolved.
func IsRetryable(err error) bool {
	switch KindOf(err) {
	case driver.Conflict, driver.Throttled, driver.Transient, driver.Unknown:
		return err != nil
	}
	return false
}

// IsAmbiguous reports whether a failed write may nonetheless have been
// applied: any error except a definite answer from the store (not found,
// precondition failed, permanent, invalid argument) or a closed store.
func IsAmbiguous(err error) bool {
	if err == nil || errors.Is(err, ErrClosed) {
		return false
	}
	switch KindOf(err) {
	case driver.NotFound, driver.PreconditionFailed, driver.Permanent, driver.InvalidArgument, driver.TooLarge, driver.Unsupported:
		return false
	}
	return true
}
