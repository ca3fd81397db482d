// Package etcdstore is the tenure store driver for etcd v3 (3.4 or later),
// registered as the URL scheme "etcd". Import it for its side effect:
//
//	import _ "github.com/tenure-io/tenure/store/etcdstore"
//
//	s, err := store.Open(ctx, "etcd://127.0.0.1:2379/tenure")
//	s, err = store.Open(ctx, "etcd://etcd-1:2379,etcd-2:2379,etcd-3:2379/tenure/prod?ca=/etc/tenure/etcd-ca.pem")
//
// The driver also implements driver.Watcher, so that leaders and followers
// are told of changes instead of polling:
//
//	w, ok := s.Driver().(driver.Watcher)
//
// # URL
//
// etcd://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX?PARAMS. Each endpoint is a
// client URL of the cluster; a lone endpoint may leave out its port (2379).
// List several endpoints with their ports; an IPv6 literal such as
// [::1]:2379 can only stand alone (Go's URL parser refuses it in a list).
// The client spreads requests over the endpoints and moves on from one that
// fails.
//
// Every key is stored as the etcd key PREFIX/key, where PREFIX is the URL's
// path with its leading slash, as etcdctl shows keys: etcd://h:2379/tenure
// stores "leader" at "/tenure/leader". A "/" is added to a PREFIX that lacks
// one; etcd://h:2379 with no path at all uses the whole key space, which is
// only wise on a cluster of tenure's own. Parameters:
//
//   - ca: a PEM file of the CAs that signed the servers' certificates.
//     Implies TLS.
//   - cert, key: PEM files of a client certificate and its key, for
//     servers started with --client-cert-auth. Imply TLS.
//   - server_name: the name to check the servers' certificates against,
//     instead of each endpoint's host. Implies TLS.
//   - tls: true to use TLS with the system's CAs; false (the default unless
//     one of the above is set) for plain text.
//   - dial_timeout: how long Open waits for a server to answer, as a Go
//     duration. Default 5s.
//
// Unknown or repeated parameters are an error. Credentials for etcd's own
// authentication never go in the URL, except the user name: the user is
// USER, else $TENURE_ETCD_USERNAME, and the password is
// $TENURE_ETCD_PASSWORD (required with a user).
//
// Open makes one request (after authenticating, with credentials), a count
// of the keys under PREFIX, within dial_timeout. It fails with an error matching store.ErrTransient if no
// server answers (the message says why if it can tell: refused, silent),
// and with store.ErrPermanent if the URL is malformed, TLS fails (wrong CA,
// missing client certificate, a TLS server reached without TLS), or the
// credentials are refused or may not read PREFIX.
//
// New takes a client of your own (anything with the methods of Client) for
// other settings. Build it from NewClientConfig, which turns off the
// client's retries: see Retries below.
//
// # Server settings
//
// etcd refuses a request larger than --max-request-bytes, 1.5 MiB by
// default; a write carries the value, the full key three times (in the
// comparison and both branches) and a few dozen bytes more.
// Raise the limit on every member if tenure's records (snapshots of a
// replicated state machine, in particular) may be larger:
//
//	etcd --max-request-bytes=8388608 ...   # 8 MiB
//
// A value over the limit fails with store.ErrInvalidArgument, saying so.
// etcd keeps every revision until it is compacted, and tenure rewrites its
// records often: run etcd with --auto-compaction-retention (such as 1h, or
// --auto-compaction-mode=revision with a count) so that the database stays
// within --quota-backend-bytes (2 GiB by default). A database over its quota
// refuses every write (store.ErrPermanent, naming the NOSPACE alarm) until
// an operator compacts, defragments and disarms the alarm.
//
// # Permissions
//
// With authentication enabled, the user needs a role that may read and
// write the prefix (Watch needs read):
//
//	etcdctl role add tenure
//	etcdctl role grant-permission tenure readwrite /tenure/ --prefix=true
//	etcdctl user add tenure
//	etcdctl user grant-role tenure tenure
//
// A user that may only read opens the store but its writes fail with
// store.ErrPermanent.
//
// # Requests and versions
//
// A version is the key's mod revision, in decimal: the revision of the
// cluster at the key's last write. Every write makes a new revision, so
// versions never repeat, even for identical bytes or a key deleted and
// created again. Callers treat versions as opaque.
//
// Get is a linearizable read. Put is one transaction: If(create revision =
// 0) for IfAbsent or If(mod revision = version) for IfMatch, Then(put),
// Else(read the key's revision, for the error message); a failed
// comparison is store.ErrPreconditionFailed. Delete with IfMatch is the
// same with Then(delete); an unconditional Delete succeeds whether or not
// the key exists. List is one range read of at most limit keys in byte
// order, starting after the key after; it reads the values too, to report
// their sizes, so size its pages with the values in mind. Every request
// asks for a member with a leader: a member cut off from its cluster
// refuses at once (etcdserver: no leader) instead of holding the request
// until it times out.
//
// # Retries
//
// clientv3 retries calls in an interceptor. It treats transactions as
// non-repeatable and repeats them only when no connection was available,
// after refreshing an expired authentication token (the server refused the
// request before applying it), or when a call fails with DEADLINE_EXCEEDED
// or CANCELLED while the caller's context is still live. The last case can
// hide a landed write: if something between the client and etcd (a proxy,
// a load balancer) answers that way after etcd applied a transaction, the
// repeat fails its comparison against the first attempt's own write and
// reports a precondition failure. The tests reproduce this with the
// client's default settings. Clients from NewClientConfig (and so from
// Open) set MaxUnaryRetries to 1, which sends every request once; the
// driver itself repeats only reads (Get, List: twice more, after 25 and
// 50 ms) on transient errors, and never a write.
//
// A write that fails with a transient error (a timeout, a broken
// connection, no leader) may or may not have been applied. store.PutResolved
// settles such outcomes by reading the key back.
//
// # Errors
//
// Errors map to store errors as follows. etcdserver: too many requests:
// ErrThrottled. No leader, leader changed, request timed out, server
// stopped, unhealthy cluster, an expired auth token, gRPC UNAVAILABLE and
// DEADLINE_EXCEEDED: ErrTransient. Authentication failed, permission
// denied, user name empty, database space exceeded, corrupt cluster:
// ErrPermanent. Request too large, and gRPC's own size limit
// (RESOURCE_EXHAUSTED): ErrInvalidArgument. errors.As still reaches the
// client's error types, such as rpctypes.EtcdError.
//
// # Watch
//
// Watch(ctx, key, version) sends an event for each change of the key after
// version, in revision order: Data and Version (the new mod revision) for a
// write; Deleted, no Data, and the revision of the deletion as Version for
// a delete (a version to resume a watch from, never to use with IfMatch).
// With a version, changes made before Watch was called are sent too,
// so that a caller that read a version with Get misses nothing; with an
// empty version the watch starts whenever the server sets it up.
//
// The channel closes when ctx ends, when the store is closed, when the
// starting revision has been compacted away, when the member loses its
// leader, or on any other error. The caller then reads the key with Get and
// may watch again from the version it read. While no server can be
// reached a watch may stay silent without closing, so it does not replace
// the caller's own timers. Watches share the client's connections; each is
// ended on the server when it ends.
//
// # What is not guaranteed
//
// The driver is as safe as etcd's transactions, which are serializable and
// decided by the cluster's Raft log: a majority of members must be up for
// any write to succeed. Versions are revisions of one cluster: restoring
// etcd from a backup (or moving to a new cluster) rolls revisions back, and
// a version recorded before the restore may then match a different write;
// restart tenure's components after a restore. A List page is a consistent
// snapshot, but pages read one after another are not. A watch is a
// notification, not a lease: it can end at any time, and events older than
// the last compaction cannot be replayed.
package etcdstore
