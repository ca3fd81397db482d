package kv

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	// ErrNeedsCommand: a read-only Txn query (TxnQuery) reached a machine
	// before the group's first etcd write; propose the Txn as a command.
	ErrNeedsCommand = errors.New("kv: a Txn before the first etcd write is a command")
)

// Error codes carried by an error result, so that a client reached through
// any node gets the same error back.
const (
	codeMalformed       byte = 1
	codeInvalidKey      byte = 2
	codeInvalidArgument byte = 3
	codeNeedsCommand    byte = 0xFF
	// Codes 4 and up are etcd's errors (etcdErrors).
)

// etcdErrors are the errors of etcd's API an error result can carry,
// indexed by code: the gRPC status errors of
// go.etcd.io/etcd/api/v3/v3rpc/rpctypes, whose text clients match on.
var etcdErrors = map[byte]error{
	4:  rpctypes.ErrGRPCCompacted,
	5:  rpctypes.ErrGRPCFutureRev,
	6:  rpctypes.ErrGRPCLeaseNotFound,
	7:  rpctypes.ErrGRPCLeaseExist,
	8:  rpctypes.ErrGRPCLeaseTTLTooLarge,
	9:  rpctypes.ErrGRPCDuplicateKey,
	10: rpctypes.ErrGRPCTooManyOps,
	11: rpctypes.ErrGRPCEmptyKey,
	12: rpctypes.ErrGRPCKeyNotFound,
	13: rpctypes.ErrGRPCValueProvided,
	14: rpctypes.ErrGRPCLeaseProvided,
	15: rpctypes.ErrGRPCInvalidSortOption,
}

// The etcd errors the machine reports; codeOf finds their codes.
var (
	errCompacted     = etcdErrors[4]
	errFutureRev     = etcdErrors[5]
	errLeaseNotFound = etcdErrors[6]
	errLeaseExist    = etcdErrors[7]
	errLeaseTTLLarge = etcdErrors[8]
	errDuplicateKey  = etcdErrors[9]
	errTooManyOps    = etcdErrors[10]
	errEmptyKey      = etcdErrors[11]
	errKeyNotFound   = etcdErrors[12]
	errValueProvided = etcdErrors[13]
	errLeaseProvided = etcdErrors[14]
	errInvalidSort   = etcdErrors[15]
	// errKeyTooLong: etcd has no such limit; this machine keeps keys to
	// MaxKeySize.
	errKeyTooLong = fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, MaxKeySize)
)

// codeOf is the code an error result carries for err.
func codeOf(err error) byte {
	for code, e := range etcdErrors {
		if err == e { //nolint:errorlint // the values themselves, never wrapped
			return code
		}
	}
	switch {
	case errors.Is(err, ErrInvalidKey):
		return codeInvalidKey
	case errors.Is(err, ErrInvalidArgument):
		return codeInvalidArgument
	case errors.Is(err, ErrNeedsCommand):
		return codeNeedsCommand
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
	case codeNeedsCommand:
		sentinel = ErrNeedsCommand
	default:
		if e, ok := etcdErrors[code]; ok {
			return e
		}
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
