// Package kv is the key-value state machine bundled with rsm, its typed
// client and its HTTP API (served by tenure kv).
//
// # Usage
//
//	m := kv.New()
//	node, err := host.Join(ctx, "config", map[string]rsm.StateMachine{kv.MachineName: m}, rsm.Options{})
//	c := kv.NewClient(node)
//	rev, err := c.Put(ctx, "feature/x", []byte("on"))
//	ok, cur, err := c.CAS(ctx, "feature/x", rev, []byte("off")) // swaps only at revision rev
//	item, err := c.Get(ctx, "feature/x")                      // linearizable; ErrNotFound if absent
//	page, err := c.List(ctx, "feature/", kv.ListOptions{Limit: 100})
//	http.ListenAndServe(addr, kv.Handler(c))
//
// # Data model
//
// The machine is an MVCC key-value store with etcd's semantics, and
// serves both Client (and the HTTP API) and etcd's v3 KV and Lease
// requests (see PutCommand and the others). One revision counter counts
// the revisions the machine's writes made: every put, every delete of an
// existing key and every successful swap increments it; a Txn makes one
// revision for all its writes (each a sub revision, in order) and a Txn
// without writes, a DeleteRange of nothing, a failed swap, a compaction
// and a lease grant make none. Each key records the revision that created
// it (CreateRevision), the one that last changed it (ModRevision), its
// Version (the puts since it was created: 1 after a create, reset by a
// delete; always 1 in the legacy era, below) and the lease it is
// attached to.
//
// Keys are non-empty strings of at most MaxKeySize (4096) bytes (etcd has
// no such limit; a longer key is refused with ErrInvalidKey); Client and
// the HTTP API also require UTF-8. Values are any bytes (bounded by the
// group's MaxMessageSize, and by HandlerOptions.MaxValueSize over HTTP;
// MessageSize(n) is the MaxMessageSize that carries values of n bytes, up
// to MaxValueSizeLimit). CAS compares the key's ModRevision; 0 means the
// key must not exist. A failed CAS changes nothing. A put through Client
// is an etcd put without lease: it detaches the key from a lease it had.
//
// # History and compaction
//
// A group starts in the legacy era, and a state restored from a format 1
// snapshot (the previous kv machine's, which holds no history, versions
// nor leases) is in it too: until the first etcd write, Client's commands
// (put, delete, swap) act as that machine's did, so that every replica
// reaches the same state at the same log index whether it loaded a
// format 1 snapshot or applied the log from further back. A put keeps no
// older version and the key's Version stays 1; a delete removes the key
// outright; the compact revision follows the current revision, so a
// Range or watch at a past revision is ErrGRPCCompacted and a compaction
// ErrGRPCCompacted (ErrGRPCFutureRev after the current revision), changing
// nothing. Revisions, create and mod revisions and results are as for an
// etcd put or delete. The first command of etcd's API applied that
// writes or may write (Put, DeleteRange, Txn, LeaseGrant, LeaseRevoke,
// a lease's expiry; read-only, refused or malformed ones too: not a
// compaction) ends the era before it is applied, on every replica
// alike; from then on history and versions are kept for every key
// (existing keys go on from Version 1) and Client's commands are etcd
// puts and deletes. A new group is at revision 0 and the era's writes
// count from 1; ending the era at revision 0 (no write yet) moves the
// revision to 1, an empty etcd's, so the first etcd write makes revision
// 2 as on etcd, on every replica alike (a group with writes keeps its
// revisions). Queries cannot move it: etcd's API reads a group at
// revision 0 as empty at revision 1 (a Range's header and its Revision
// 1, the etcd server's headers). A group used only through Client and
// the HTTP API so keeps no history, and its memory is its live keys' as
// before; it gets history from its first etcd write on. Snapshots carry
// the era.
//
// Out of the legacy era, every version of every key is kept, deletes as
// tombstones, until a compaction command (CompactCommand) drops those before its revision:
// each key keeps its versions after it and its latest at or before it,
// unless that is a delete made before it. As in etcd 3.7, a delete made
// at the compact revision stays, with what follows it, so that a watch
// from that revision starts with it; the next compaction drops it. Ranges read at any revision from the compact
// revision to the current one; before it they fail with
// rpctypes.ErrGRPCCompacted, after the current one with ErrGRPCFutureRev.
// Memory and snapshots grow with the history kept: whoever runs the group
// must propose compactions (etcd's server compacts on a timer; the
// machine leaves that policy to the server: tenure kv's leader compacts
// every 5 minutes at the revision of 5 minutes before). Compaction walks
// every key on the goroutine that applies commands.
//
// # Leases
//
// A lease is granted (LeaseGrantCommand) with an ID its proposer chooses,
// never 0, so that every replica grants the same one, and a TTL in
// seconds, at most MaxLeaseTTL, stored as given (etcd's minimum TTL is the
// server's to apply before proposing). A put with a lease attaches the key
// to it; a put without one, or a delete, detaches it. Revoking a lease
// (LeaseRevokeCommand) deletes its keys in one revision; a lease's expiry
// is a command the leader proposes (LeaseExpireCommand) with the same
// effect, and no error if the lease is gone already. The machine knows no
// time: when a lease lapses, and keep-alives, are the server's
// (ReadView.Leases lists the leases and their TTLs).
//
// # Reads beside the node
//
// ReadView returns the state at the current revision, taken in constant
// time (a copy-on-write clone of the trees) and read by any goroutine
// while the machine applies: Range answers an etcd Range serializably,
// Events lists the changes of a key range since a revision (a watch
// catching up from history), Leases and Lease the leases. An Observer
// (SetObserver) is told of each revision's events, with the previous
// versions, as Apply makes them, in order, so that a watch hub can stream
// them.
//
// # Encoding
//
// Client's commands, queries and results are compact binary messages: a
// type byte, then fields in a fixed order, integers as unsigned varints,
// strings and values prefixed by their length as a varint, booleans as
// one byte 0 or 1:
//
//	put     0x01 key value              result 0x21 revision
//	delete  0x02 key                    result 0x22 existed revision
//	cas     0x03 key expect value       result 0x23 swapped revision
//	get     0x11 key                    result 0x31 found [value create mod]
//	list    0x12 prefix after limit maxBytes keysOnly
//	                                    result 0x32 count {key value create mod} more
//	error result 0x2F code message
//
// etcd's requests and responses are a type byte and etcd's own protobuf
// message (go.etcd.io/etcd/api/v3/etcdserverpb):
//
//	0x04 PutRequest            result 0x24 PutResponse
//	0x05 DeleteRangeRequest    result 0x25 DeleteRangeResponse
//	0x06 TxnRequest            result 0x26 TxnResponse
//	0x07 CompactionRequest     result 0x27 CompactionResponse
//	0x08 LeaseGrantRequest     result 0x28 LeaseGrantResponse
//	0x09 LeaseRevokeRequest    result 0x29 LeaseRevokeResponse
//	0x0A LeaseRevokeRequest (expiry)  result 0x29 LeaseRevokeResponse
//	0x13 RangeRequest (query)  result 0x33 RangeResponse
//
// A response's header holds only the revision (after the command, or the
// current one for a read at a past revision); the server fills in the
// rest. Error codes: 1 malformed, 2 invalid key, 3 invalid argument, and
// from 4 etcd's errors (compacted, future revision, lease not found, lease
// exists, lease TTL too large, duplicate key, too many operations, empty
// key, key not found, value provided, lease provided, invalid sort
// option), which DecodeResult returns as rpctypes' ErrGRPC values. A Txn
// is checked as etcd's server checks it (at most MaxTxnOps comparisons or
// ops a branch, no key put twice or put and deleted), then its
// comparisons and its ops' revisions, leases and keys against the state
// before it; one that fails changes nothing.
//
// Client's messages have exactly one encoding: decoders refuse unknown
// type bytes, truncation, trailing bytes, padded varints and booleans
// other than 0 or 1. A command that does not decode is applied as a
// no-op whose result is an error; Apply never panics. New operations get
// new type bytes; a replica that does not know one answers with an error
// result, so every replica of a group must run a build that knows every
// command its clients send.
//
// Snapshots are "TKVS", a format version (2), the revision, the compact
// revision, the legacy era flag, each key with its versions (newest
// first) in key order, the
// leases, then a CRC-32C of all that (the format is spelled out in
// snapshot.go). Restore also reads version 1, which builds before the
// history wrote: each key then has Version 1 and no lease, and the state
// is compacted at the snapshot's revision (its history is gone), in the
// legacy era. Restore
// refuses other versions (ErrSnapshotVersion) and anything that fails the
// checksum or the ordering and revision checks (ErrCorruptSnapshot),
// leaving the state as it was. Both directions stream: Snapshot writes
// through a small buffer as it walks the keys, and Restore reads as it
// builds the new state.
//
// # Capture
//
// Machine implements rsm.Capturer. The keys (each with its chain of
// older versions) and the leases live in B-trees
// (github.com/google/btree) with copy-on-write clones: Capture takes one
// in constant time and returns a view of that moment (the ReadView),
// whose WriteTo writes the snapshot while the machine goes on applying
// commands. The view shares the trees with the machine; each node the
// machine changes afterwards is copied once. A view so keeps alive at
// most the trees' nodes (about 140 bytes a key) and the versions
// compaction drops after its capture; dropping it frees them.
//
// # Cold start
//
// Machine is an rsm.Borrower (Apply keeps nothing of its command) and an
// rsm.Preparer: a cold start lends it the commands of a snapshot's log
// segments where they were read, and the goroutines that decode them call
// Prepare, which decodes a command and copies the value a put or a swap
// stores; ApplyPrepared then only updates the state, in log order. A put's
// reply is its revision whatever the state, so ApplyPrepared records a put
// and replies at once; the puts go to the tree in runs sorted by key, by a
// goroutine of their own while the next run fills (a run is at most
// 32 MiB of values, or a sixteenth of the keys), and a delete, a swap or
// any other call puts them all there first (in the legacy era a run's
// puts replace the versions they find, as put does then). In key order a put finds its
// way through the tree in the cache: a cold start after sustained writes
// to a million keys took a quarter less time (measured when it was introduced:
// docs/BENCHMARKS.md in git history).
//
// # Errors
//
// Client returns ErrNotFound for a missing key, ErrInvalidKey and
// ErrInvalidArgument for requests it refuses before sending, and the
// Submitter's errors wrapped once with the operation and key: with an
// *rsm.Node, rsm.ErrUnknownOutcome means a write may or may not have been
// applied (read the key to settle it), rsm.ErrApplicationResultUnavailable
// that it was applied but its revision is lost.
//
// # What it does not guarantee
//
// The whole state lives in memory, history included, and a snapshot
// writes all of it again each time the log written since the last such
// base reaches three times its size, or 1.5 times once the group is quiet
// (docs/rsm.md); a node that starts applies every command written since:
// it is meant for configuration, locks, metadata and Kubernetes-sized
// object stores (thousands to about a million keys), not bulk data. Puts,
// deletes and gets cost O(log n); a range costs O(log n) plus the keys
// (live or deleted but not compacted) it walks; Events walks the keys of
// its range and their versions since its revision; a compaction walks
// every key. History grows until a compaction. Watches (the Observer's
// events, caught up with Events), lease keep-alives and expiry timers,
// etcd's minimum lease TTL, cluster and maintenance calls are the
// server's: rsm/kv/etcdserver serves them. Exactly-once
// writes are the rsm node's guarantee and carry its limits (see rsm).
package kv
