// Package snapshot is an rsm group's snapshot in the store: the snapshot
// object, a manifest written by compare-and-swap, and the immutable
// objects it references under {group}/snap/, a base (the whole state at an
// index, in parts) and log segments after it (docs/rsm.md, "Objects",
// rule 7 and rule 8).
//
// A Store writes a snapshot (Write), deletes what no manifest can
// reference any more (Collect), and reads the snapshot for its end index
// (End), whole (Read) or into a replica (Load). Package rsm decides when
// to write one and what it covers; this package keeps the rules of the
// objects themselves: the manifest only moves forward, every object is
// written under a name no other write uses before the manifest that
// references it, every read is bounded and checked, and a reader whose
// manifest moved on starts over.
//
// Store calls and their retries are the caller's (Options.Do, Options.Resolve);
// errors about an object in the store are *record.CorruptError (which is
// rsm.CorruptError). A Store is safe for concurrent use.
package snapshot

import (
	"context"
	"errors"
	"sync"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// Key is the snapshot object's name under {group}/, and Dir the folder of
// the objects its manifest references.
const (
	Key = "snapshot"
	Dir = "snap/"
)

// ErrMoved: an object a manifest referenced is gone and the manifest has
// changed since it was read (a newer snapshot was written and the old
// one's objects collected). Read the snapshot again.
var ErrMoved = errors.New("rsm: the snapshot changed while it was read")

// Preparer is what a cold start needs of rsm.Preparer: the part of
// applying a command done as its segment is decoded.
type Preparer interface {
	Prepare(cmd []byte) any
}

// Options are a Store's collaborators and tunings. Do, Resolve and
// ReadLog are required; zero values of the others mean their defaults,
// except PrepareFrom's.
type Options struct {
	// Do runs a store call with the group's retries.
	Do func(ctx context.Context, call func(ctx context.Context) error) error
	// Resolve returns the options of a conditional write settled by
	// reading back a key that holds at most max bytes.
	Resolve func(owns func([]byte) bool, max int64) store.ResolveOptions
	// ReadLog returns the confirmed log entries from..to, read from the
	// log under rule 8, for a segment whose entries the leader's cache no
	// longer holds; an error if any is missing or a snapshot superseded
	// them.
	ReadLog func(ctx context.Context, from, to uint64) ([]*rsmpb.Entry, error)
	// EntryMax is the largest log entry object (a segment holds one alone
	// when it is larger than a segment's bytes).
	EntryMax int

	Nonce     func() []byte       // the writes' nonces; nil: record.NewNonce (the simulator's are seeded)
	PartMax   int                 // bytes per base part; 0: basePartMax
	Par       int                 // objects read or deleted at once; 0: one at a time, in the caller's goroutine
	ReadAhead int                 // bytes of objects read ahead (objectReader); 0: readAheadMax
	Borrow    bool                // the machines are all Borrowers: segments' commands are lent (segFeed)
	Prep      map[string]Preparer // with Borrow: the machines a cold start prepares commands for
	// PrepareFrom is the bytes of a load (base and segments) from which
	// it prepares commands (Prep): DefaultPrepareFrom for a node; 0
	// prepares every load's.
	PrepareFrom uint64
}

// Store reads and writes one group's snapshot. Every write is
// conditional or under a name no other write uses; ambiguous writes are
// settled by reading back their nonce.
type Store struct {
	st    *store.Store
	group string

	do        func(ctx context.Context, call func(ctx context.Context) error) error
	resolve   func(owns func([]byte) bool, max int64) store.ResolveOptions
	readLog   func(ctx context.Context, from, to uint64) ([]*rsmpb.Entry, error)
	segMax    int // segmentObjectMax: a segment object's bound
	nonces    func() []byte
	partMax   int
	par       int
	readAhead int
	borrow    bool
	prep      map[string]Preparer
	prepFrom  uint64

	mu          sync.Mutex
	snapVersion string    // the snapshot version last read or written
	snapEnd     uint64    // its end index
	snapMan     *Manifest // its manifest; nil for the earlier formats
	snapTerm    uint64    // its writer's term

	// refused is the snapshot version last refused as corrupt, with its
	// error: refused again, not read again, while the key lists it.
	refused    string
	refusedErr error
	// refusedObj is the base part or segment a load last refused as
	// corrupt (Store.Load).
	refusedObj *refusedObject
}

// New returns the snapshot store of group in st.
func New(st *store.Store, group string, o Options) *Store {
	g := &Store{st: st, group: group, do: o.Do, resolve: o.Resolve, readLog: o.ReadLog,
		segMax: segmentObjectMax(o.EntryMax), nonces: o.Nonce, partMax: o.PartMax, par: o.Par,
		readAhead: o.ReadAhead, borrow: o.Borrow, prep: o.Prep, prepFrom: o.PrepareFrom}
	if g.nonces == nil {
		g.nonces = record.NewNonce
	}
	return g
}

func (g *Store) key(name string) string { return g.group + "/" + name }

// Job is a snapshot to write (rule 7: every index it covers is
// confirmed): a new base, or a segment of the confirmed entries since the
// stored snapshot.
type Job struct {
	Base      *Captured      // the state captured at Base.Head.EndIndex; nil for a segment
	From, End uint64         // what it adds to the stored snapshot
	Entries   []*rsmpb.Entry // a segment's entries the cache held: consecutive, up to End
	// The stored snapshot it replaces by compare-and-swap.
	PrevEnd     uint64
	PrevVersion string
}

// Writer is who writes a snapshot: the leader's identity, its term and
// its leadership's nonce (in its segments' names).
type Writer struct {
	ID    string
	Term  uint64
	Nonce string
}

// Stats is the size of a stored manifest: its base's bytes, its segments'
// bytes and their number (zero for a snapshot of the earlier formats).
type Stats struct {
	Base, Segs uint64
	Count      int
}
