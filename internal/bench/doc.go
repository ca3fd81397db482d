// Package bench holds the benchmarks of tenure bench: election (`tenure
// elect` processes through crashes and handovers against the lease
// expiry, and their store requests), shards (shard groups in one process),
// rsm (a replicated state machine against its store's own conditional
// puts), kv (`tenure kv serve` as a child process against the size of
// its state, with etcd alongside) and etcd (`tenure etcd serve` nodes as
// child processes driven with kube-apiserver's requests). Each takes a config and returns its
// result, which prints as tables or encodes as JSON; the tenure command
// parses their flags, and docs/BENCHMARKS.md keeps their figures.
//
// The benchmarks that run processes run the tenure program they are
// given (ElectionConfig.Exe, KVConfig.Exe, EtcdConfig.Exe); kv's node is
// the hidden `tenure bench kv-node`, and etcd's `tenure bench etcd-node`,
// which StartKVNode prepares.
//
// A benchmark measures and asserts nothing: its figures hold for the
// machine, the store and the load they were taken on.
package bench
