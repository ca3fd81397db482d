package rsm

import "io"

// StateMachine is a user's deterministic state machine. A group may host
// several, each under its own name.
//
// The node calls a machine from one goroutine at a time, never concurrently:
// commands and reads are handled strictly in sequence. Every replica applies
// the same commands in the same order, so Apply must be deterministic: the
// same state and command always give the same new state and result, with no
// clocks, randomness or I/O.
type StateMachine interface {
	// Apply applies a committed command and returns its result. It must not
	// fail: a command the machine rejects is a result that says so.
	Apply(command []byte) []byte
	// Query answers a read without changing the state.
	Query(query []byte) ([]byte, error)
	// Snapshot writes the whole state to w.
	Snapshot(w io.Writer) error
	// Restore replaces the whole state with what Snapshot wrote.
	Restore(r io.Reader) error
}
