package rsm

import "io"

// Capturer is an optional interface of a StateMachine whose state can be
// captured in constant time and serialized later, so that a snapshot does
// not hold up commands for as long as it takes to write the whole state.
// A snapshotter looks for it by type assertion: it calls Capture where it
// would have called Snapshot, then writes the view elsewhere; a machine
// without it is snapshotted by Snapshot, which holds up the apply path
// for the whole write.
//
// Capture is called the way Apply is: from the goroutine that applies
// commands, never concurrently with Apply, Query, Snapshot, Restore or
// another Capture of the same machine. It must not block, must not fail,
// and must take time and memory independent of the size of the state
// (copy-on-write, a persistent structure or similar), since commands wait
// while it runs.
//
// The StateView it returns holds exactly the state that Snapshot would
// have written at that moment: every command applied (and any Restore)
// before the call is in it, nothing applied after is. It never changes
// afterwards, whatever the machine goes on to apply or restore.
type Capturer interface {
	Capture() StateView
}

// StateView is a machine's state as captured by Capturer.Capture. It is
// immutable and safe for concurrent use: WriteTo may run in any goroutine,
// concurrently with the machine's Apply, Query, Restore and Capture, and
// with other views' and its own WriteTo calls.
//
// WriteTo writes the captured state to w in the machine's snapshot
// format: the same bytes Snapshot would have written at capture time, so
// that Restore reads them back. Each call writes the whole state again,
// so a failed upload can be retried from the same view. It streams,
// holding no more than a bounded buffer beyond the state itself, and
// returns the number of bytes written and the first error of w, wrapped.
//
// A view keeps alive whatever the machine has changed since the capture;
// drop the view (there is nothing to close) to let that memory go.
type StateView interface {
	WriteTo(w io.Writer) (n int64, err error)
}
