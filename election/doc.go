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
// has not changed for the holder's lease on the follower's own monotonic
// clock, measured from when it first saw that version: no member ever
// compares its clock with a timestamp another wrote (LastUpdated is for
// people). The holder's lease is the LeaseMillis it wrote (its own
// LeaderTimeout) or the follower's LeaderTimeout, whichever is longer, so
// members may run different settings, during a rolling change say: the
// holder's lease always wins.
// The leader fences itself: it stops acting when RenewDeadline has passed
// since the start of its last successful renewal, whatever the reason, and
// RenewDeadline is below LeaderTimeout by a margin for clock-rate drift.
//
// Outage tolerance: the leader renews FrequentInterval after the start of
// its last successful renewal (no jitter: it is the lock's only writer).
// A renewal that fails is retried until the deadline, sooner as the
// deadline nears (a quarter of the time left, at least 10 ms apart), and
// an attempt that hangs is abandoned after RenewDeadline/8. A store outage
// in which calls fail, starting o after the start of the last successful
// renewal, is therefore ridden out with no gap in leadership if it ends
// before o reaches RenewDeadline, less one store round trip: with the
// defaults any outage shorter than RenewDeadline - FrequentInterval (5 s)
// wherever it starts, and one of almost 10 s that begins just after a
// renewal. An outage that lasts past that moment ends the term there, at
// the deadline, before any follower may take over. Calls that hang rather
// than fail shorten the bound by the hung attempts (RenewDeadline/8 each).
//
// Writes whose outcome is unknown (a timeout, a 5xx, a lost answer) are
// settled by reading the record back and looking for the write's nonce
// (store.PutResolved). A leader that stops releases the lock, after every
// OnStartedLeading call (of the current term and of any that ended before)
// has returned, so a follower can take it at once.
//
// Followers that poll the store read every FrequentInterval during
// transitions and every InfrequentInterval while the leader is seen
// renewing, but never less than four times per holder's lease (every
// 3.75 s, with jitter, at the defaults), and they read once more at the
// moment the version they hold would expire. A leader that stops renewing
// (a crash, a paused process, a lost connection to the store) is thus
// replaced within the lease and one poll after its last renewal (19.5 s at
// the defaults; about 14 s after the crash, typically), and a release is
// taken within one poll (4.5 s; about 1.4 s typically with two
// followers). A stable group of three costs about 2,700 store requests an
// hour. In peer mode they
// instead hold a long-poll to the leader's HTTPS endpoint (PeerHealthPath),
// which answers with each renewal and with the release as it happens, and
// fall back to the store and the frequent interval on any failure. The
// leader answers only with the record it last wrote successfully, and only
// within its deadline; otherwise 503.
//
// # Peer mode
//
// Peer mode is on whenever ServerAddr is set (PeerDisabled turns it off),
// and needs nothing else: each member makes an ephemeral ECDSA key and
// self-signed certificate when Run starts, and the leader writes the key's
// fingerprint in the lock record (Record.PeerKey, see PeerKeyOf). A
// follower accepts only a server that proves it holds the key named by the
// record it read from the store, with no CA and no host name: whoever can
// write the lock can already lead, so the store is the root of trust, and
// every process, hence every leadership, has a new key. A follower asks
// only leaders whose record names a key (older members and S3lect write
// none; they are followed through the store), unless PeerClientTLS or
// PeerMode say how to check them. Configured certificates (PeerServerTLS,
// PeerClientTLS, client certificates) take precedence; the key of a single
// configured server certificate is written in the record too. A member
// that cannot listen on PeerListenAddr logs a warning and runs store-only,
// unless PeerMode is set, when Run fails. The peer endpoint serves the lock
// record, which anyone who can reach it may read; require client
// certificates to restrict it.
//
// # Preferred leader
//
// A member may carry a Priority. A live follower whose priority is higher
// than the leader's (and than that of any member that has already asked)
// asks the leader to hand over by writing a copy of the leader's record
// with HandoverTo set: this costs nothing while nobody asks. The leader's
// next renewal fails on it; the leader reads the record, ends its term
// (the leadership context is cancelled) and, once OnStartedLeading has
// returned, releases the lock naming the asking member, which reads every
// FrequentInterval/10 while it waits and takes it at once; the others
// wait a FrequentInterval before taking a lock handed to another member.
// The handover thus completes within about FrequentInterval of the
// request. Equal priorities never hand over, so leadership does not flap.
// A leader whose work does not return never releases: the lock lapses
// after the lease, as after a crash. The request does not extend the
// leader's lease for the asking member, so a dead leader is replaced as
// fast as without it.
//
// # Terms, and records that cannot be taken over
//
// The term handed to the application never decreases for one lock,
// whatever the store holds. A member therefore never takes over a record
// whose term it cannot read (bytes that do not decode, or a record without
// a term, as S3lect writes it) nor one whose term is the largest a uint64
// holds (the next would wrap to 0). It reports such a record instead: an
// ERROR log once per record version, Status.RecordProblem, RecordProblem
// (an error matching ErrUnreadableRecord or ErrTermExhausted) and, with a
// Registerer, the tenure_election_record_problem metric; and it keeps
// reading the store. The lock then stays with nobody (or with a live holder that does
// not count terms) until an operator repairs it:
//
//	tenure lock repair --term-floor N LOCK_URL
//
// or Repair from Go, with N at least as high as every term the lock ever
// handed out (the highest token the fenced systems have seen). The next
// leader gets N+1. Repair waits until the record has stayed unchanged for
// the lease, so it refuses to replace a record something still renews.
// A lock whose term reached the maximum cannot be used again: use another
// key. Never delete the record: a member that has seen the lock's terms
// continues from the highest it saw, but one started later begins again at
// 1. If it was deleted, Repair the absent key with a floor.
//
// # Records of another kind
//
// Every record a member writes carries "kind": "tenure.lock" (RecordKind).
// DecodeRecord, and so every member, Repair and tenure status, refuses
// with ErrForeignRecord, naming the key and what it found, a record whose
// kind is anything else (another tenure record, or a kind this version
// does not know), and a record without a kind that has a field only
// another tenure record has: a replicated state machine group's
// leader_state.json (followers, commitIndex, checksum, incarnation; it
// also has a leaderID and a term), a shard-lease member record (ownerID)
// or assignment record (epoch, shards, updatedBy). Such a record is
// reported as RecordProblem is, never taken over, asked for or written
// over, and Repair refuses to replace it: give the lock a key of its own.
// A record without a kind and without those fields is a lock: S3lect's
// lockfile, or a lock written by the previous version. Members of the
// previous version ignore the kind field (unknown fields are ignored), so
// a group can be upgraded one member at a time; they do not refuse other
// kinds of record, though.
//
// S3lect members write records without a term, so they cannot share a lock
// with tenure members: once one writes the lock, tenure members follow
// that leader but never take the lock over. Switch every member over, stop
// the S3lect ones, then repair the lock once.
//
// # Callbacks and bounds
//
// OnNewLeader runs on a goroutine of its own, in order, and never delays
// the election or Stop. OnStartedLeading must return soon after its context
// is cancelled: no new term starts and the lock is never released while it
// runs. If it has not returned LeaderTimeout after the cancellation, Run
// stops waiting and returns ErrWorkStillRunning without releasing: the lock
// lapses after the lease, as after a crash, and the work is left running.
// Run thus returns, after its context ends, within LeaderTimeout (waiting
// for the work), RenewDeadline (the release) and a second or two (peer
// server, queued OnNewLeader calls), whatever the callbacks do; Stop also
// returns when its own context ends.
//
// # Metrics
//
// With Config.Registerer set, an Elector exports these series, each
// labelled lock (LockfilePath) and id (ServerID):
//
//	tenure_election_is_leader               gauge: 1 while leading (IsLeader at scrape time)
//	tenure_election_term                    gauge: Term at scrape time
//	tenure_election_record_problem          gauge: 1 while RecordProblem is set
//	tenure_election_transitions_total       counter by kind: started, stopped (terms)
//	tenure_election_renewals_total          counter by result: ok, lost, error
//	tenure_election_renew_duration_seconds  histogram: successful renewals and acquisitions
//
// and, for a store it opens itself from a URL, the store package's
// tenure_store_requests_total and tenure_store_request_duration_seconds.
// Any number of Electors may share a Registerer: they share one collector,
// each with its own series; a new Elector with the same lock and ServerID
// (after a Stop, say) takes its predecessor's series over, so that New
// does not fail on them, but New refuses while the predecessor still runs
// (two stores with one lock key and ServerID: one would hide the other). A stopped Elector's series stay (is_leader 0,
// its last term), and the collector keeps a reference to it, until another
// Elector takes them over: a program that makes many Electors with ever new
// ServerIDs or locks should give each a Registerer of its own. New fails
// only if the Registerer holds another collector under one of these names,
// or one whose label names differ (Prometheus requires a name to have one
// set of label names on a registry: a Registerer wrapped with const labels
// needs a registry apart from an unwrapped one).
//
// # Errors
//
// New returns a *ValidationError (matching ErrInvalidConfig) that names
// every field it refuses. Run returns store.ErrConditionsIgnored if the
// store accepts writes whose condition does not hold, a *PanicError if the
// loop panicked (after stepping down), ErrWorkStillRunning as described
// above, and nil when its context ends. Repair returns ErrTermFloorTooLow
// and ErrLockInUse as it documents.
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
// give members a ServerAddr (peer mode) for fast handovers.
package election
