package rsm

import (
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/store"
)

// Every object a node reads from the store is read with a bound derived
// from what tenure writes there (store.Store.GetLimited, store.Store.Read):
// a larger object is refused as a corrupt one is (a *CorruptError naming
// it), and no more of it than the bound is read. The writers keep to the
// same bounds, so nothing tenure wrote is refused. docs/rsm.md, "Objects",
// gives the figures.
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
	entryMax = frameHeader + MaxMessageSizeLimit

	// segmentObjectMax bounds a segment: entries up to segmentMax bytes
	// together, each behind its 4-byte length, or one entry alone when it
	// is larger; after the magic and the kind byte. A manifest also bounds
	// each of its segments by their bytes all together (SegBytes).
	segmentObjectMax = len(frameMagic) + 1 + max(segmentMax, 4+entryMax)

	// basePartObjectMax bounds a base part: a base is cut into parts of
	// basePartMax bytes. A manifest also bounds each part by the base's
	// bytes (Base.Bytes).
	basePartObjectMax = basePartMax

	// manifestMax bounds the snapshot object in its current format, the
	// manifest: its fixed fields (a group name and a writer's ID of at
	// most 200 bytes each, nonces, varints) take under 1 KiB, and each
	// segment at most 105 bytes (a run of its own: a term, a nonce of at
	// most 64 hex digits, a count and one pair). A leader writes a base
	// instead of a segment once a manifest lists maxSegments of them (6.9
	// MiB at the most), and never writes a manifest above the bound.
	manifestMax = 16 << 20
)

// earlierSnapshotMax bounds the snapshot object in the earlier formats
// (snapfile.go), which hold the whole state in one object: 2 GiB, the
// largest protobuf the first format could hold. Such an object is read
// only when it is larger than a manifest can be, once per version
// (groupStore.snapshotEnd remembers one it refused). Tests lower it.
var earlierSnapshotMax int64 = 2 << 30

// errTooLarge is a *CorruptError's cause when an object is larger than
// tenure writes at its key.
var errTooLarge = errors.New("larger than tenure writes there")

// tooLarge returns err as a *CorruptError naming key if the store refused
// the object as larger than the bound the read set (store.ErrTooLarge):
// what is refused is the object, not the store, and it is reported as
// corrupt objects are. Other errors are returned as they are.
func tooLarge(err error, key, what string, bound int64) error {
	if !errors.Is(err, store.ErrTooLarge) {
		return err
	}
	return &CorruptError{Key: key, Err: fmt.Errorf("%w: a %s is at most %d bytes (%w)", errTooLarge, what, bound, err)}
}

// refuseWrite is the error of a writer whose object would exceed the
// bound its readers set: it is not written.
func refuseWrite(key, what string, size, bound int) error {
	return fmt.Errorf("rsm: %s %q would take %d bytes, above the %d its readers accept: not written", what, key, size, bound)
}
