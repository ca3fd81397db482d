// Package election elects one leader among the members of a group through
// a lock record in a tenure store (S3 and compatible object stores, GCS,
// Azure Blob, DynamoDB, etcd, a local directory). It implements the S3lect
// protocol, with the names and defaults of its configuration, and makes it
// safe.
//
// # Usage
//
//	import _ "github.com/tenure-io/tenure/store/s3store" // the driver for s3:// URLs
//
//	var e *election.Elector
//	e, err := election.New(ctx, election.Config{
//		StoreURL:     "s3://my-bucket/tenure?region=eu-west-1",
//		LockfilePath: "leader/scheduler.json",
//		ServerID:     "scheduler-1",
//		OnStartedLeading: func(ctx context.Context) {
//			runScheduler(ctx, e.Term()) // stop when ctx is cancelled
//		},
//	})
//	if err != nil { ... }
//	err = e.Run(ctx) // until ctx ends; then steps down and releases
//
// # Protocol
//
// The lock record is JSON (see Record), a superset of S3lect's lockfile.
// A member takes the lock by create-if-absent, or by compare-and-swap on
// the version it saw; each acquisition increments Term, the fencing token.
// The leader renews every FrequentInterval by compare-and-swap on its own
// last version. A follower judges the leader dead when the record's version
// has not changed for LeaderTimeout on the follower's own monotonic clock,
// measured from when it first saw that version: no member ever compares
// its clock with a timestamp another wrote (LastUpdated is for people).
// The leader fences itself: it stops acting when RenewDeadline has passed
// since the start of its last successful renewal, whatever the reason, and
// RenewDeadline is below LeaderTimeout by a margin for clock-rate drift. A
// store outage that ends before that deadline changes nothing: with the
// defaults, any outage shorter than 4.5 s, and one of up to 10 s that
// begins just after a renewal.
//
// Writes whose outcome is unknown (a timeout, a 5xx, a lost answer) are
// settled by reading the record back and looking for the write's nonce
// (store.PutResolved). A leader that stops releases the lock, after its
// OnStartedLeading has returned, so a follower can take it at once.
//
// Followers poll every FrequentInterval during transitions and every
// InfrequentInterval while the leader is seen renewing. In PeerMode they
// instead hold a long-poll to the leader's HTTPS endpoint (PeerHealthPath),
// which answers with each renewal and with the release as it happens, and
// fall back to the store and the frequent interval on any failure. The
// leader answers only with the record it last wrote successfully, and only
// within its deadline; otherwise 503.
//
// # Errors
//
// New returns a *ValidationError (matching ErrInvalidConfig) that names
// every field it refuses. Run returns store.ErrConditionsIgnored if the
// store accepts writes whose condition does not hold, a *PanicError if the
// loop panicked (after stepping down), and nil when its context ends.
//
// # What is not guaranteed
//
// Safety assumes that the rates of the members' monotonic clocks differ by
// less than the margin between RenewDeadline and LeaderTimeout (a tenth of
// LeaderTimeout at least; real clocks drift by parts per million), and that
// the application stops acting when the leadership context is cancelled.
// A process paused for longer than RenewDeadline (GC, SIGSTOP, a VM freeze)
// may resume and act before it notices that its deadline has passed: pass
// the Term to the systems the leader writes to, and have them refuse lower
// terms. Store-polling followers notice a release only at their next poll;
// use PeerMode for fast handovers.
package election
