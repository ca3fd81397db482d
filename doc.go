// Package tenure is coordination on shared storage: leader election, shard
// leases and a quorum-less replicated state machine on any store with
// conditional writes.
//
// This package holds no code; it is the map of the module:
//
//   - store: the portable store every component uses (Get, conditional Put
//     and Delete, List), its error classes, the URL registry (store.Open),
//     PutResolved for ambiguous writes, and Probe.
//   - store/driver: the interface a backend implements.
//   - store/memstore, store/filestore, store/s3store, store/gcsstore,
//     store/azurestore, store/dynamostore, store/etcdstore,
//     store/route53store: the drivers.
//   - store/all: registers every driver for store.Open.
//   - store/drivertest: the conformance suite every driver passes.
//   - store/faultstore: operation counts (cost), and injected latency,
//     errors, throttling, ambiguous success and partitions (tests).
//   - election: leader election (the S3lect protocol, made safe).
//   - lease: many shard leases in one process.
//   - rsm: the replicated state machine (after S2C); rsm/kv, the bundled
//     key-value machine and its HTTP API; rsm/kv/kvserver and
//     rsm/kv/kvclient, that API's server and client; rsm/rsmtest, the
//     multi-node test harness and the linearizability checker.
//   - cmd/tenure: the command-line tool; internal/bench and internal/demo,
//     what tenure bench and tenure demo run; internal/opsserver, the
//     probes and /status of its long-running commands; internal/supervise,
//     the command tenure run keeps while it leads.
package tenure
