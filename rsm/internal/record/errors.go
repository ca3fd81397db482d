package record

import (
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/store"
)

var (
	// ErrCorrupt matches a *CorruptError (rsm.ErrCorrupt).
	ErrCorrupt = errors.New("rsm: corrupt object in the store")
	// ErrForeignRecord is a *CorruptError's cause when the object where
	// one of the group's belongs is of another kind (rsm.ErrForeignRecord).
	ErrForeignRecord = errors.New("rsm: an object of another kind")
	// ErrMissing is a *CorruptError's cause when an object the group's
	// state depends on is absent (deleted by hand, or never copied).
	ErrMissing = errors.New("missing")
	// ErrTooLarge is a *CorruptError's cause when an object is larger
	// than tenure writes at its key.
	ErrTooLarge = errors.New("larger than tenure writes there")
)

// CorruptError is rsm.CorruptError, documented there: an object in the
// store that fails its checksum or does not decode, is of another kind,
// is larger than tenure writes there, or is missing while the group
// depends on it. Nothing is applied over it.
type CorruptError struct {
	Key string
	Err error
}

func (e *CorruptError) Error() string {
	if errors.Is(e.Err, ErrMissing) {
		return fmt.Sprintf("rsm: object %q in the store: %v", e.Key, e.Err)
	}
	if errors.Is(e.Err, ErrForeignRecord) {
		return fmt.Sprintf("rsm: object %q in the store is not the group's: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("rsm: corrupt object %q in the store: %v", e.Key, e.Err)
}

func (e *CorruptError) Unwrap() error        { return e.Err }
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// TooLarge is the bounded reads' rule (docs/rsm.md, "Bounded reads"): an
// object the store refused as larger than the bound the read set
// (store.ErrTooLarge) is refused as a corrupt one is, a *CorruptError
// naming key; what is refused is the object, not the store. Other errors
// are returned as they are.
func TooLarge(err error, key, what string, bound int64) error {
	if !errors.Is(err, store.ErrTooLarge) {
		return err
	}
	return &CorruptError{Key: key, Err: fmt.Errorf("%w: a %s is at most %d bytes (%w)", ErrTooLarge, what, bound, err)}
}

// RefuseWrite is the error of a writer whose object would exceed the
// bound its readers set: it is not written, so that nothing tenure writes
// is refused by a reader.
func RefuseWrite(key, what string, size, bound int) error {
	return fmt.Errorf("rsm: %s %q would take %d bytes, above the %d its readers accept: not written", what, key, size, bound)
}
