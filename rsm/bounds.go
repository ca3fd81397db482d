package rsm

import "github.com/tenure-io/tenure/rsm/internal/record"

// Every object a node reads from the store is read with a bound derived
// from what tenure writes there (store.Store.GetLimited, store.Store.Read):
// a larger object is refused as a corrupt one is (record.TooLarge: a
// *CorruptError naming it), and no more of it than the bound is read. The
// writers keep to the same bounds (record.RefuseWrite), so nothing tenure
// wrote is refused. docs/rsm.md, "Bounded reads", gives the figures; the
// snapshot objects' bounds are package snapshot's.
const (
	// leaderStateMax bounds leader_state.json. Its size grows with the
	// followers it lists: some 9,800 fit with short IDs and addresses
	// (about 106 bytes each), 3,500 with IDs of 200 bytes. A leader
	// refuses to write a larger one, so a Follow that would take it past
	// the bound is refused.
	leaderStateMax = 1 << 20

	// entryMax bounds a log entry object: a leader cuts a batch so that its
	// entry fits in MaxMessageSize less syncReserve, and refuses a command
	// that does not fit alone. MaxMessageSize is each node's option, not
	// the group's (a rolling change may raise it), so a reader allows the
	// largest any node may set, MaxMessageSizeLimit, plus the frame.
	entryMax = record.Header + MaxMessageSizeLimit
)
