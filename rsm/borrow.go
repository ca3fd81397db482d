package rsm

import "github.com/tenure-io/tenure/rsm/internal/snapshot"

// A Borrower is a StateMachine whose Apply keeps nothing of its command
// once it returns, and returns no memory of it (as io.Writer's Write must
// not retain p). When every machine of a group is one, a cold start hands
// them the commands of a snapshot's log segments where the segments were
// read, in memory it then reads the next segments into: no copy of each
// command, and no garbage from one, for the collector (kv's Machine is
// one). Other machines get commands of their own.
type Borrower interface {
	StateMachine
	// BorrowsCommands marks the promise; it is never called.
	BorrowsCommands()
}

// A Preparer is a Borrower that does part of applying a command ahead of
// Apply, off the goroutine that applies: a cold start calls Prepare for
// the commands of a snapshot's log segments on the goroutines that decode
// them, concurrently and in no particular order, and then ApplyPrepared,
// in the log's order, where it would call Apply. What is slow and needs no
// state belongs in Prepare (decoding a command, copying what Apply would
// keep of it); kv's Machine copies a put's value there, and the page
// faults of a cold start's fresh memory go with it. Prepare is lent its
// command as Apply is, reads no state of the machine and changes none;
// ApplyPrepared must return what Apply would for the command. A prepared
// command may never be applied (a retry found in the log twice, a load
// abandoned): what Prepare returns is only memory.
type Preparer interface {
	Borrower
	// Prepare returns what ApplyPrepared is then given with cmd.
	Prepare(cmd []byte) any
	// ApplyPrepared applies cmd as Apply does, with what Prepare
	// returned for it.
	ApplyPrepared(cmd []byte, prepared any) []byte
}

// preparers returns the Preparers among machines when all of them are
// Borrowers (a cold start lends their commands), else nil.
func preparers(machines map[string]StateMachine) map[string]snapshot.Preparer {
	if !borrowsAll(machines) {
		return nil
	}
	var out map[string]snapshot.Preparer
	for name, m := range machines {
		if p, ok := m.(Preparer); ok {
			if out == nil {
				out = map[string]snapshot.Preparer{}
			}
			out[name] = p
		}
	}
	return out
}

// borrowsAll reports whether every machine is a Borrower.
func borrowsAll(machines map[string]StateMachine) bool {
	for _, m := range machines {
		if _, ok := m.(Borrower); !ok {
			return false
		}
	}
	return len(machines) > 0
}

// prepareFrom is the bytes of a cold start's load from which it prepares
// commands (snapshot.Options.PrepareFrom). Tests lower it.
var prepareFrom uint64 = snapshot.DefaultPrepareFrom
