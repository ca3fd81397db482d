// Package lease runs many shard leases in one process over one store: each
// logical shard has exactly one leader at a time, with its own term as
// fencing token, and shards can be added and removed while running.
//
// # Usage
//
//	c, err := lease.New(lease.Config{
//		Store:    st, // a *store.Store: S3, GCS, Azure, DynamoDB, etcd, a directory
//		Mode:     lease.MemberLeases,
//		ShardIDs: []string{"orders-0", "orders-1", "orders-2"},
//		OwnerID:  "worker-7",
//		OnStartedLeading: func(ctx context.Context, shard string, term uint64) {
//			process(ctx, shard, term) // until ctx is cancelled
//		},
//	})
//	err = c.Start(ctx)
//	defer c.Stop(context.Background())
//	if c.IsLeader("orders-1") { ... }
//
// # Modes
//
// ShardLeases runs one election (package election) per shard: one lease
// record per shard, renewed by its leader every RenewPeriod. It is simple
// and every shard fails over independently, but store requests grow with
// the number of shards: 1,000 shards renewed every 5 s are 720,000 writes
// an hour.
//
// MemberLeases keeps one record per member, renewed every RenewPeriod, and
// one assignment record mapping shards to members, changed by compare-and-
// swap only when membership or the set of shards changes. Each round a
// member renews its record and lists the prefix once, which returns the
// version of every member record and of the assignment; it reads the
// assignment only when its version changed. Store requests therefore grow
// with members, not shards (measured: 1,000 shards on 3 members cost 1.5x
// three single elections). While membership or the assignment changes, or
// while it waits for a handoff, a member also lists every tenth of
// RenewPeriod (renewals keep their period), so that a join or a handoff
// completes in seconds; a stable group lists only when it renews. Shards
// are spread so that no member holds more than ceil(shards/members) while
// others are live: a member that joins receives its share, and one that
// leaves or dies has its shards taken. The work of a round over every
// shard is done only when the assignment changes, and a shard costs no
// goroutine unless OnStartedLeading or OnStoppedLeading is set: 100,000
// shards are practical (see docs/BENCHMARKS.md).
//
// Logging: one INFO line per change of the shards a member leads, with
// counts ("shards changed": started, stopped, held, waiting); each shard's
// start and stop is logged at DEBUG.
//
// # Safety in MemberLeases mode
//
// A member acts on a shard only while the assignment names its session for
// the shard, its own record was renewed, and the assignment was confirmed
// unchanged, both within two thirds of LeaseDuration (the renew deadline)
// measured from the start of the confirming calls. A member whose record
// has not changed for its lease, on an observer's own monotonic clock, is
// dead. Its lease is the larger of the observer's LeaseDuration and the
// leaseMillis the member wrote in its record: members may run different
// settings during a rolling change, and the holder's lease always wins (a
// record that does not say, or cannot be read, never shortens the wait; a
// member whose record was never read is not judged). Before a dead
// member's shards move without waiting, the observer replaces its record
// by compare-and-swap with a tombstone (eviction), so that the dead
// member's own renewal and the eviction cannot both succeed. A shard taken
// from a live member (a rebalance) waits until that member has released it,
// or has left or been evicted, or that member's lease has passed since the
// new owner saw the assignment. A member releases every shard an
// assignment takes from it with one number in its record: the epoch of the
// last assignment it has applied (every run that assignment does not give
// it has stopped and returned), whatever the number of shards. Terms grow by
// one whenever a shard changes hands, and a term that ended is never
// resumed. Member and assignment records are read with a bound of 16 MiB
// (store.GetLimited): a larger object at such a key is refused unread and
// reported in Status.LastError.
//
// Every record a member writes says what it is: "kind":
// "tenure.lease.member" (MemberKind) or "tenure.lease.assignment"
// (AssignmentKind). Records of the previous version have no kind and are
// known by their fields: ownerID for a member record; epoch, shards or
// updatedBy for the assignment. Any other object where one belongs (an
// election lock, a replicated state machine group's leader_state.json, a
// record of a kind this version does not know, another program's JSON) is
// refused with ErrForeignRecord, logged at ERROR naming its key and what it
// is, and reported in Status.LastError: another kind of record where the
// assignment belongs stops every member from acting on any shard, and
// nobody writes over it; one among the member records is no member (it
// gets no shard) and is never evicted or deleted. Members of the previous
// version ignore the kind field, so a group can be upgraded one member at a
// time (they read an assignment with a kind through encoding/json, more
// slowly, instead of their one-pass decoder).
//
// # Metrics
//
// With Config.Registerer set, a Coordinator exports these series, each
// labelled prefix (Prefix) and owner (OwnerID):
//
//	tenure_lease_shards_held          gauge: shards led now (Held at scrape time)
//	tenure_lease_shards               gauge: shards known
//	tenure_lease_acquisitions_total   counter: shards this member started to lead
//	tenure_lease_losses_total         counter: shards it stopped leading (released or lost)
//	tenure_lease_members              gauge: live members seen (MemberLeases mode only)
//	tenure_lease_assignment_epoch     gauge: epoch of the assignment applied (MemberLeases only)
//
// Coordinators may share a Registerer, as Electors do (see the election
// package). There is no per-shard series: the shard count would be the
// series count. The ShardLeases mode's elections export no election
// series, and the store's requests are counted by whoever opened the
// store (store.NewMetrics).
//
// # What is not guaranteed
//
// As for elections: safety assumes that members' monotonic clocks run at
// rates within a third of the lease of each other, and that the
// application stops acting when a shard's context is cancelled; a process
// paused past its deadline may act once before it notices, so pass the
// term to the systems a shard leader writes to. Two processes with one
// OwnerID never act on one shard at once, but the later one stays idle
// (MemberLeases) and reports ErrDuplicateOwner.
package lease
