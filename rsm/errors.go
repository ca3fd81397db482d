package rsm

import (
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/rsm/internal/record"
)

var (
	// ErrClosed is returned by calls on a closed node or host.
	ErrClosed = errors.New("rsm: closed")
	// ErrRequestOutOfSequence: the command's sequence number is ahead of
	// the next one the group expects from its client; the node retries it
	// until the commands before it are applied. It reaches the caller only
	// wrapped in the error of a request that timed out still out of
	// sequence.
	ErrRequestOutOfSequence = errors.New("rsm: request out of sequence")
	// ErrApplicationResultUnavailable: the command was applied, exactly
	// once, but its result is no longer kept. The group keeps the result
	// of every command of a node that the node still awaits, up to 1,024
	// at once; beyond that (or with a leader of the previous version,
	// which kept only the last) a later command of the same node may have
	// replaced it. The command is not applied again.
	ErrApplicationResultUnavailable = errors.New("rsm: command applied, result unavailable")
	// ErrUnknownOutcome: the request timed out or was cancelled after it
	// may have been committed. The node retried it under its sequence
	// number until then, so it is applied at most once; calling Command
	// again submits a new command, which may apply in addition. Settle the
	// outcome with a read (or make the command idempotent, e.g. a
	// compare-and-swap).
	ErrUnknownOutcome = errors.New("rsm: outcome unknown")
	// ErrNotCommitted: the command was definitely not applied.
	ErrNotCommitted = errors.New("rsm: not committed")
	// ErrUnknownMachine: no state machine of that name is registered.
	ErrUnknownMachine = errors.New("rsm: unknown state machine")
	// ErrTooLarge: a request or result exceeds MaxMessageSize.
	ErrTooLarge = errors.New("rsm: message too large")
	// ErrBusy: the leader holds MaxConcurrentRequests already. The node
	// backs off and retries; it reaches the caller only wrapped in the
	// error of a request that timed out while the leader stayed busy.
	ErrBusy = errors.New("rsm: too many pending requests")
	// errMissing is a *CorruptError's cause when an object the group's
	// state depends on is absent (deleted by hand, or never copied).
	errMissing = record.ErrMissing
	// ErrPeerUnauthenticated: an RPC's peer is not authenticated as a
	// member of the group (its key is not one the group's records in the
	// store list, or it presented none, as nodes of versions without peer
	// authentication do), or a Synchronize does not come from the leader
	// that leader_state.json names. Nothing it asked for was done.
	ErrPeerUnauthenticated = errors.New("rsm: peer not authenticated")
	// ErrCorrupt matches a *CorruptError.
	ErrCorrupt = record.ErrCorrupt
	// ErrForeignRecord is a *CorruptError's cause when the object where
	// one of the group's belongs is of another kind: an election lock or
	// a shard-lease record at leader_state.json, a JSON record or another
	// kind of frame where a log entry, snapshot, manifest or segment
	// belongs. It is never applied, taken over or written over.
	ErrForeignRecord = record.ErrForeignRecord
)

// Sessions and group settings.
var (
	// ErrSessionExpired: the group no longer holds the node's session
	// (evicted beyond MaxDedupClients), so it refused the command without
	// applying it. The node registers a new session and resubmits commands
	// that cannot have been applied; a command that may have been applied
	// under the old session fails with ErrUnknownOutcome wrapping this.
	ErrSessionExpired = errors.New("rsm: session expired")
	// ErrSettingsMismatch matches a *SettingsMismatchError.
	ErrSettingsMismatch = errors.New("rsm: options disagree with the group's settings")
	// ErrDuplicateID matches a *DuplicateIDError.
	ErrDuplicateID = errors.New("rsm: another process uses this node's ID")
)

// DuplicateIDError reports that another process uses this node's ID:
// since this node started, leader_state.json was written under its ID by
// another process (Incarnation, at Addr, term Term), which would take
// leadership from this one and back; or (Follower) the leader of term Term
// refused this node's Follow because a live process at Addr follows under
// the same ID. The node neither leads nor follows while that process
// lives, and requests on it fail at once with this error; stop one of the
// two.
type DuplicateIDError struct {
	ID          string
	Incarnation string
	Addr        string
	Term        uint64
	Follower    bool
}

func (e *DuplicateIDError) Error() string {
	if e.Follower {
		return fmt.Sprintf("rsm: another process uses node ID %q: it follows the leader of term %d from %s (incarnation %s); node IDs must be unique, stop one of them",
			e.ID, e.Term, e.Addr, e.Incarnation)
	}
	return fmt.Sprintf("rsm: another process uses node ID %q: it took term %d at %s (incarnation %s); node IDs must be unique, stop one of them",
		e.ID, e.Term, e.Addr, e.Incarnation)
}

func (e *DuplicateIDError) Is(target error) bool { return target == ErrDuplicateID }

// SettingsMismatchError reports that this node's options disagree with a
// setting the group recorded in its log; the node refuses to join rather
// than apply the log differently from the others. Setting names the
// option, Group and Node give the group's and this node's values.
type SettingsMismatchError struct {
	Setting string
	Group   string
	Node    string
}

func (e *SettingsMismatchError) Error() string {
	return fmt.Sprintf("rsm: the group records %s %s, this node has %s: refusing to join (start it with the group's setting)", e.Setting, e.Group, e.Node)
}

func (e *SettingsMismatchError) Is(target error) bool { return target == ErrSettingsMismatch }

// NotLeaderError reports that the node asked is not the leader of Term.
// Leader and Addr name the leader it knows of, if any.
type NotLeaderError struct {
	Leader string
	Addr   string
	Term   uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "rsm: not the leader, no leader known"
	}
	return fmt.Sprintf("rsm: not the leader; leader is %s at %s (term %d)", e.Leader, e.Addr, e.Term)
}

// CorruptError reports an object in the store that fails its checksum or
// does not decode, or that is missing while the group depends on it (a log
// entry below a committed index, the snapshot the log starts after,
// leader_state.json beside a log). Nothing is applied over it.
//
// It is the snapshot store's error too (package snapshot reads the
// snapshot objects), so it is defined beside the objects' codec.
type CorruptError = record.CorruptError
