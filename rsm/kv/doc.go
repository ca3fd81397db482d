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
// Keys are non-empty UTF-8 strings of at most MaxKeySize (4096) bytes;
// values are any bytes (bounded by the group's MaxMessageSize, and by
// HandlerOptions.MaxValueSize over HTTP; MessageSize(n) is the
// MaxMessageSize that carries values of n bytes, up to MaxValueSizeLimit).
// As in etcd, one revision counter counts the machine's successful
// mutations: every put, delete of an existing key and successful
// compare-and-swap increments it, and each key
// records the revision that created it (CreateRevision) and the one that
// last changed it (ModRevision). CAS compares the key's ModRevision; 0
// means the key must not exist. A failed CAS changes nothing.
//
// # Encoding
//
// Commands, queries and results are compact binary messages: a type byte,
// then fields in a fixed order, integers as unsigned varints, strings and
// values prefixed by their length as a varint, booleans as one byte 0 or
// 1:
//
//	put     0x01 key value              result 0x21 revision
//	delete  0x02 key                    result 0x22 existed revision
//	cas     0x03 key expect value       result 0x23 swapped revision
//	get     0x11 key                    result 0x31 found [value create mod]
//	list    0x12 prefix after limit maxBytes keysOnly
//	                                    result 0x32 count {key value create mod} more
//	error result 0x2F code message      (1 malformed, 2 invalid key, 3 invalid argument)
//
// Every message has exactly one encoding: decoders refuse unknown type
// bytes, truncation, trailing bytes, padded varints and booleans other than
// 0 or 1. A command that does not decode is applied as a no-op whose result
// is an error; Apply never panics. New operations get new type bytes; a
// replica that does not know one answers with an error result, so every
// replica of a group must run a build that knows every command its
// clients send.
//
// Snapshots are "TKVS", a format version (1), the revision, the number of
// keys, then each key with its value and revisions in key order, then a
// CRC-32C of all that. Restore refuses other versions (ErrSnapshotVersion)
// and anything that fails the checksum or the ordering and revision checks
// (ErrCorruptSnapshot), leaving the state as it was. Both directions
// stream: Snapshot writes through a small buffer as it walks the keys, and
// Restore reads as it builds the new state.
//
// # Capture
//
// Machine implements rsm.Capturer. The keys live in a B-tree
// (github.com/google/btree) with copy-on-write clones: Capture takes one
// in constant time and returns a view of that moment, whose WriteTo
// writes the snapshot while the machine goes on applying commands. The
// view shares the tree with the machine; each node the machine changes
// afterwards is copied once. A view so keeps alive at most the tree's
// nodes (about 110 bytes a key) and the keys and values replaced or
// deleted since its capture; dropping it frees them.
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
// any other call puts them all there first. In key order a put finds its
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
// The whole state lives in memory, and a snapshot writes all of it again
// each time the log written since the last such base reaches three times
// its size, or 1.5 times once the group is quiet (docs/rsm.md); a node
// that starts applies every put written since: it is meant for configuration, locks and metadata (thousands to
// about a million keys), not bulk data. Puts, deletes and gets cost O(log n); a
// list costs O(log n) plus the keys it returns. There are no watches,
// leases (TTLs), transactions over several keys or reads at past
// revisions. Exactly-once writes are the rsm node's guarantee and carry
// its limits (see rsm).
package kv
