package kv

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("kv: key not found")
	// ErrInvalidKey: the key is empty, longer than MaxKeySize or not UTF-8.
	ErrInvalidKey = errors.New("kv: invalid key")
	// ErrInvalidArgument: an argument other than the key is out of range,
	// such as a list limit above MaxListLimit.
	ErrInvalidArgument = errors.New("kv: invalid argument")
	// ErrMalformed: bytes that should hold a command, query or result do
	// not decode.
	ErrMalformed = errors.New("kv: malformed message")
	// ErrSnapshotVersion: a snapshot was written in a format version this
	// build does not read.
	ErrSnapshotVersion = errors.New("kv: unsupported snapshot format version")
	// ErrCorruptSnapshot: a snapshot fails its checksum or does not decode.
	ErrCorruptSnapshot = errors.New("kv: corrupt snapshot")
)

// Error codes carried by an error result, so that a client reached through
// any node gets the same error back.
const (
	codeMalformed       byte = 1
	codeInvalidKey      byte = 2
	codeInvalidArgument byte = 3
)

// codeOf is the code an error result carries for err.
func codeOf(err error) byte {
	switch {
	case errors.Is(err, ErrInvalidKey):
		return codeInvalidKey
	case errors.Is(err, ErrInvalidArgument):
		return codeInvalidArgument
	}
	return codeMalformed
}

// errorOf turns an error result back into an error that matches the
// sentinel its code names. msg is the machine's message, which already
// names the sentinel.
func errorOf(code byte, msg string) error {
	var sentinel error
	switch code {
	case codeMalformed:
		sentinel = ErrMalformed
	case codeInvalidKey:
		sentinel = ErrInvalidKey
	case codeInvalidArgument:
		sentinel = ErrInvalidArgument
	default:
		return fmt.Errorf("kv: the machine refused the request (code %d): %s", code, msg)
	}
	return &machineError{sentinel: sentinel, msg: msg}
}

// machineError is an error the state machine reported in its result.
type machineError struct {
	sentinel error
	msg      string
}

func (e *machineError) Error() string { return e.msg }
func (e *machineError) Unwrap() error { return e.sentinel }
