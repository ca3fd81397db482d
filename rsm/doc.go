// Package rsm is a quorum-less replicated state machine on a store with
// conditional writes, after S2C ("Shared Storage Consensus"): the log,
// snapshots and leader state live in the store, so one live node is enough
// to make progress and a group can be cold-started from the store alone.
//
// # Usage
//
//	host, err := rsm.NewHost(ctx, st, rsm.HostConfig{ID: "node-1", Addr: "10.0.0.1:7400",
//		ServerTLS: serverTLS, ClientTLS: clientTLS})
//	node, err := host.Join(ctx, "orders", map[string]rsm.StateMachine{"kv": kv.New()}, rsm.Options{})
//	res, err := node.Command(ctx, "kv", cmd) // applied exactly once, on every replica
//	ans, err := node.Read(ctx, "kv", query)  // linearizable
//	out, err := node.CallLeader(ctx, "timers", req) // a HandleCall handler, run on the leader, not logged
//	defer host.Close()
//
// Any node accepts requests and forwards them to the leader over gRPC. The
// leader batches commands: a batch is cut as soon as the write pipeline
// (PipelineDepth) has room, so a lone command is written at once and what
// arrives during a write goes into the next one, and at the latest after
// FlushInterval or at BatchMinCount requests, never past what one message
// to a follower carries. A batch waits briefly for the clients the leader
// is answering (bounded by their measured turnaround and by a write's
// duration), so clients that send again when answered share one write
// instead of taking turns. It commits each batch with one create-if-absent of the next log
// object; it acknowledges a batch only after a read of leader_state.json,
// issued after the batch landed, still shows its term. One such read
// confirms every write and read batch waiting in a round.
//
// Layout in the store, under {group}/: leader_state.json (JSON), log/{index}
// (one batch per object, write-once), snapshot (a small manifest) and
// snap/ (the immutable objects it references: a base of the whole state in
// parts, and log segments since it), and peers/{id} (each node's peer
// key). Store bytes per command do not grow with the state. docs/rsm.md
// has the protocol and its safety argument.
//
// # Peers
//
// Every RPC between nodes is authenticated (docs/security.md). Without
// ServerTLS and ClientTLS, each Host makes an ephemeral key, each node
// publishes its fingerprint in {group}/peers/{id} before its first RPC,
// and peers accept only keys published there; with them, mutual TLS with
// the configured CA. A follower applies replicated entries only from the
// leader leader_state.json names, proving the key that record names, and
// a leader is deposed only by what the store says. PlaintextLoopback
// turns authentication off, for loopback addresses only. Nodes of
// versions without peer authentication cannot talk to these: a rolling
// upgrade from one fails closed, with ErrPeerUnauthenticated or a failed
// TLS handshake; restart every node instead.
//
// # Errors
//
// ErrUnknownOutcome: a command may or may not have been applied (its
// deadline passed while its fate was open, or its session expired after an
// attempt whose answer was lost; then it wraps ErrSessionExpired).
// ErrApplicationResultUnavailable: it was applied, once, but its result was
// replaced by a later command of the same node (which happens only beyond
// 1,024 of its commands awaiting their answers at once, or under a leader
// of the previous version). *SettingsMismatchError
// (matching ErrSettingsMismatch): this node's options disagree with a
// setting the group recorded (MaxDedupClients, the machines' names); the
// node stops, and Node.Done and Node.Err report it. *NotLeaderError,
// ErrBusy, ErrTooLarge, ErrUnknownMachine, ErrClosed and *CorruptError
// (matching ErrCorrupt) are as named. Every object is read within the
// size tenure writes at its key (docs/rsm.md, "Bounded reads"); a larger
// one is refused as corrupt, read no further. A node that meets a corrupt object,
// or finds missing one the group depends on, neither leads nor serves:
// Status().Problem names the object, and its requests fail at once with
// that *CorruptError until the object is back. An object of another kind
// where one of the group's belongs (an election lock or a shard-lease
// record at leader_state.json, a JSON record where a log entry or snapshot
// belongs) is such a *CorruptError, also matching ErrForeignRecord, and
// names what it is: leader_state.json says "kind":
// "tenure.rsm.leader_state", or, written by the previous version without
// a kind, has fields only a leader state has (followers, commitIndex,
// checksum); the binary objects carry a magic number and a kind byte. It is
// never taken over or written over. *DuplicateIDError
// (matching ErrDuplicateID): another live process runs with this node's ID
// and took leadership under it, or follows under it (the leader refuses
// the second follower while the first answers); the node reports it the
// same way and neither takes leadership back nor follows while that
// process lives.
//
// # Sessions and settings
//
// Each node registers a client session through the log on its first
// command; commands carry (session, sequence number), and the group
// applies each at most once. The session table holds MaxDedupClients
// sessions, least recently used evicted; an evicted session's commands are
// refused, never applied. MaxDedupClients and the machines' names are
// recorded in the log when the group is created and cannot be changed yet.
//
// # Testing
//
// TestSimulation (sim_test.go) runs the protocol in a deterministic
// simulation: the pure cores (replica, window, groupStore.readLog) over a
// simulated store and network with delays, lost answers, late writes,
// partitions, crashes and restarts, in virtual time, every choice drawn
// from one seed. It checks agreement, durability, exactly-once, rule 1,
// rule 11 and linearizable reads; TestSimulationCatchesMutations checks
// that it catches the historical bugs when they are put back. CI runs 2000
// seeds (150 under -race);
// `-sim.seeds=N` or TENURE_SIM_SEEDS=N runs more, `-sim.seed=S -v`
// replays one seed with its trace. docs/rsm.md describes it.
//
// # What it does not guarantee
//
// Exactly-once holds per node incarnation (a command retried after its
// node restarted is a new command, and may apply twice) and at-least-once
// only while the node's session stays in the table. Node IDs must
// be unique: two processes with one ID are detected only when one takes
// leadership, not while both follow. Liveness needs the store: without it nothing commits and no
// read is answered. Safety never depends on clocks; failover speed does
// (HeartbeatInterval × MaxMissedHeartbeats, then half of it more and
// LeadershipDelay per rank; a leader the store does not answer for
// HeartbeatInterval × MaxMissedHeartbeats steps down: docs/rsm.md,
// "Availability"). A node that the store shows cut off from a leader the
// others reach does not take over; an idle group writes nothing to the
// store, so such a node cannot tell idle peers from dead ones, and after
// two faults (the leader and its followers dead while it is cut off) it
// waits for one of them to return (docs/rsm.md, "Availability", Limits).
package rsm
