// Package robustness runs etcd's own robustness checker
// (go.etcd.io/etcd/tests/v3/robustness) against three tenure etcd serve
// processes on MinIO: etcd's traffic, with its watches and compactions,
// runs while the group's leader is killed, paused and cut off from its
// store; then the group's history, read back from the store's log, and
// the clients' reports go through etcd's linearizability, watch and
// serializable checks. It is its own module so that etcd's test
// framework stays out of tenure's go.mod.
package robustness
