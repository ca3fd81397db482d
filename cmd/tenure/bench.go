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
}

func runBench(ctx context.Context, e *env, args []string) error {
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
