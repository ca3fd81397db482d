package main

import (
	"context"
	"flag"
	"fmt"
)

// benchmarks are tenure bench's subcommands.
var benchmarks = []struct {
	name, synopsis string
	run            func(context.Context, *env, []string) error
}{
	{"election", "bench election [--store URL] [--nodes N] [--rounds R] [--peer] [--timing default|fast] [--window D] [--json]\n" +
		"      crash failover against the lease expiry, graceful handover, store requests per hour; members are OS processes",
		runBenchElection},
	{"shards", "bench shards --store URL [--shards N] [--members M] [--mode member|shard|both] [--window D] [--json]\n" +
		"      shard groups in one process: settle time, store requests per hour, CPU, memory, rebalance on join and death",
		runBenchShards},
	{"rsm", "bench rsm --store URL [--latency 0,20ms,60ms] [--batch 1,10,100] [--pipeline 1,4,8] [--clients N] [--duration D] [--nodes 1|3] [--json]\n" +
		"      replicated state machine in one process: commands/s and latency against the store's own conditional puts, store requests per command",
		runBenchRSM},
	{"kv", kvBenchSynopsis + "\n" +
		"      `tenure kv serve` as a child process against the size of its state: put latency during snapshots, store bytes per put, memory, cold start; etcd alongside",
		runBenchKV},
}

func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == kvNodeCommand { // bench kv's child, not listed
		return runBenchKVNode(ctx, e, args[1:])
	}
	for _, b := range benchmarks {
		if len(args) > 0 && args[0] == b.name {
			return b.run(ctx, e, args[1:])
		}
	}
	help := len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help")
	if len(args) > 0 && !help {
		fmt.Fprintf(e.stderr, "tenure bench: unknown benchmark %q\n\n", args[0])
	}
	fmt.Fprintln(e.stderr, "Usage:")
	for _, b := range benchmarks {
		fmt.Fprintf(e.stderr, "  tenure %s\n", b.synopsis)
	}
	fmt.Fprintln(e.stderr, "\nRun 'tenure bench NAME --help' for a benchmark's flags.")
	if help {
		return flag.ErrHelp
	}
	return errUsage
}
