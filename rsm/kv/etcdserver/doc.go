// Package etcdserver serves etcd's v3 gRPC API (go.etcd.io/etcd/api/v3)
// over a node of an rsm group and its kv machine, so that etcdctl and
// the etcd Go client work unchanged against every node of the group, on
// any store, with no quorum of nodes.
//
// # Usage
//
//	m := kv.New()
//	node, err := host.Join(ctx, "etcd", map[string]rsm.StateMachine{kv.MachineName: m}, opts)
//	s, err := etcdserver.New(etcdserver.Config{Node: node, Machine: m, ClientURLs: []string{"https://10.0.0.1:2379"}})
//	defer s.Close()
//	g := grpc.NewServer()
//	s.Register(g)
//	http.Serve(ln, etcdserver.Mux(g, s.HTTP())) // gRPC, /version and /health on one port
//
// # What is served
//
// KV: Range (linearizable through the node's Read, serializable on this
// node's state), Put, DeleteRange, Txn and Compact, as the machine's
// commands through the node: a write is acknowledged once it is in the
// store. Watch: every option (start revision, prev_kv, filters,
// fragment, progress requests and notifications), fed by the machine's
// applied stream. Lease: Grant (the server chooses the ID when the
// client gives 0, and raises a TTL below MinLeaseTTL), Revoke,
// TimeToLive, Leases; expiry and KeepAlive on the leader (below).
// Maintenance: Status, Alarm (none), Defragment (nothing to do), HashKV
// (of the live keys at a revision: comparable between tenure nodes, not
// with etcd's).
// Cluster: MemberList. HTTP: /version and /health.
//
// Response headers carry ClusterID(group), MemberID(group, node ID), the
// current revision (also for a read at a past one) and the group's term
// as raft_term.
//
// # Errors
//
// The machine's refusals are etcd's own status errors (rpctypes), which
// the client recognises. The node's errors map to what an etcd client
// retries or reports (toGRPC documents the table): rsm.ErrUnknownOutcome
// is ErrGRPCTimeout, rsm.ErrNotCommitted ErrGRPCLeaderChanged,
// rsm.ErrClosed ErrGRPCStopped, rsm.ErrBusy
// ErrGRPCRequestTooManyRequests, rsm.ErrCorrupt ErrGRPCCorrupt, and
// rsm.ErrApplicationResultUnavailable codes.Unknown saying the request
// was applied.
//
// # Leases
//
// The machine knows no time: the leader times the leases. On taking
// leadership it gives every lease its full TTL from then (as etcd does
// on promotion); a grant starts the TTL when the leader applies it
// (kv.LeaseObserver), through whichever node it came; a keep-alive
// starts it anew. A follower forwards keep-alives and TimeToLive to the
// leader (rsm.Node.CallLeader, over the group's authenticated peer
// connections) and answers with the leader's answer. A lapsed lease is
// expired by a command the leader proposes, so every replica deletes its
// keys at one revision.
//
// # What it does not do
//
//   - Auth, member changes, Snapshot, MoveLeader, Downgrade and Hash
//     answer Unimplemented.
//   - A watch stream that falls more than a million events behind is
//     ended with Unavailable; the etcd client resumes its watches from
//     the revisions it has seen.
package etcdserver
