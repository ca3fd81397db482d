package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-io/tenure/internal/bench"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/rsm"
)

// benchmarks are tenure bench's subcommands.
var benchmarks = []struct {
	name, synopsis string
	run            func(context.Context, *env, []string) error
}{
	{"election", "bench election [--store URL] [--nodes N] [--rounds R] [--config store,addr,tls] [--timing default|fast] [--window D] [--json]\n" +
		"      crash failover against the lease expiry, graceful handover, store requests per hour, for store-only members and\n" +
		"      members given an address; members are OS processes",
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
	{"etcd", etcdBenchSynopsis + "\n" +
		"      `tenure etcd serve` nodes as child processes driven with Kubernetes-shaped traffic through the etcd client: writes/s,\n" +
		"      latency of each kind of request, conflicts, watch lag, store requests per write, RSS",
		runBenchEtcd},
}

func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == bench.KVNodeCommand { // bench kv's child, not listed
		serveArgs, stop, err := bench.StartKVNode(args[1:], e.stdout)
		if err != nil {
			return err
		}
		defer stop()
		return runKVServe(ctx, e, serveArgs)
	}
	if len(args) > 0 && args[0] == bench.EtcdNodeCommand { // bench etcd's child, not listed
		serveArgs, stop, err := bench.StartKVNode(args[1:], e.stdout)
		if err != nil {
			return err
		}
		defer stop()
		return runEtcdServe(ctx, e, serveArgs)
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

func runBenchElection(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench election", "bench election [--store URL] [--nodes N] [--rounds R] [--config store,addr,tls] [--timing default|fast] [--window D] [--json]\n\n"+
		"For each member configuration (--config: store, the default settings; addr, --advertise and nothing else;\n"+
		"tls, --advertise with certificates), runs N members of one election as `tenure elect` processes and\n"+
		"measures, over R rounds each:\n"+
		"  crash     SIGKILL the leader; the gap until another member leads, against the limit: the\n"+
		"            earliest moment the lease, as the followers saw it, lets one of them take over;\n"+
		"  handover  SIGTERM the leader (it releases the lock); the gap from the moment it stops\n"+
		"            leading until another member leads;\n"+
		"and, over --window of stable leadership, each member's store requests per hour.")
	storeURL := fs.String("store", "", "store the members share (default: a new temporary directory, file://); the lock is a new key under it")
	nodes := fs.Int("nodes", 3, "members in the group")
	rounds := fs.Int("rounds", 5, "crash rounds, and as many handover rounds")
	configs := fs.String("config", "store,addr", "member configurations to run one after the other: store (no flags), addr (--advertise only), tls (--advertise and certificates made for the run)")
	peer := fs.Bool("peer", false, "deprecated: the same as --config tls")
	timingName := fs.String("timing", "default", "election timings: default (the library's defaults) or fast (the defaults divided by 20)")
	window := fs.Duration("window", 0, "how long to count store requests during stable leadership (default 5m with default timing, 30s with fast)")
	poll := fs.Duration("poll", 2*time.Millisecond, "how often each member's /status is read while a transition is timed: the resolution of the gaps")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("verbose", false, "copy the members' logs to stderr")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
	}
	timing, ok := bench.TimingNamed(*timingName)
	if *window == 0 {
		*window = timing.Window
	}
	var modes []string
	if *peer {
		*configs = "tls"
	}
	for _, c := range strings.Split(*configs, ",") {
		if !bench.IsMemberConfig(c) || slices.Contains(modes, c) {
			fmt.Fprintf(e.stderr, "tenure bench election: --config %q: want a list of store, addr and tls, each once\n", *configs)
			return errUsage
		}
		modes = append(modes, c)
	}
	switch {
	case !ok:
		fmt.Fprintf(e.stderr, "tenure bench election: --timing %q: want default or fast\n", *timingName)
		return errUsage
	case *nodes < 2 || *nodes > bench.MaxElectionNodes:
		fmt.Fprintf(e.stderr, "tenure bench election: --nodes must be between 2 (a leader and a follower) and %d, got %d\n", bench.MaxElectionNodes, *nodes)
		return errUsage
	case *rounds < 1:
		fmt.Fprintf(e.stderr, "tenure bench election: --rounds must be at least 1, got %d\n", *rounds)
		return errUsage
	case *window < timing.Infrequent:
		fmt.Fprintf(e.stderr, "tenure bench election: --window %v is shorter than the InfrequentInterval (%v) of --timing %s: followers' reads would not be counted\n",
			*window, timing.Infrequent, timing.Name)
		return errUsage
	case *poll <= 0 || *poll > 100*time.Millisecond:
		fmt.Fprintf(e.stderr, "tenure bench election: --poll must be positive and at most 100ms, got %v\n", *poll)
		return errUsage
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to run the members: %w", err)
	}
	results, err := bench.Election(ctx, bench.ElectionConfig{Store: *storeURL, Exe: exe, Nodes: *nodes, Rounds: *rounds,
		Configs: modes, Timing: timing, Window: *window, Poll: *poll, Verbose: *verbose, Stderr: e.stderr})
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndentedJSON(e, results)
	}
	return bench.PrintElection(e.stdout, results)
}

func runBenchShards(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench shards", "bench shards --store URL [--shards N] [--members M] [--mode member|shard|both] [--lease D] [--renew D] [--window D] [--json]")
	storeURL := fs.String("store", "", "store URL (required), e.g. s3://bucket/prefix?endpoint=… or etcd://host:2379/prefix")
	shards := fs.Int("shards", 1000, "number of shards")
	members := fs.Int("members", 3, "members at the start (one more joins, one dies)")
	mode := fs.String("mode", "both", "member, shard or both")
	leaseDur := fs.Duration("lease", lease.DefaultLeaseDuration, "LeaseDuration")
	renew := fs.Duration("renew", lease.DefaultRenewPeriod, "RenewPeriod")
	window := fs.Duration("window", 2*time.Minute, "stable window over which requests, CPU and memory are measured")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile, taken at the end of the run (four members, one dead), to this file")
	logLevel := fs.String("log-level", "", "log the members to stderr at this level (debug, info, warn, error); none by default")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *storeURL == "" || *shards < 1 || *members < 2 {
		fmt.Fprintln(e.stderr, "tenure bench shards: --store is required; --shards ≥ 1; --members ≥ 2")
		fs.Usage()
		return errUsage
	}
	cfg := bench.ShardsConfig{Store: *storeURL, Shards: *shards, Members: *members, Lease: *leaseDur, Renew: *renew,
		Window: *window, MemProfile: *memProfile, Log: slog.New(slog.DiscardHandler)}
	switch *mode {
	case "member":
		cfg.Modes = []lease.Mode{lease.MemberLeases}
	case "shard":
		cfg.Modes = []lease.Mode{lease.ShardLeases}
	case "both":
		cfg.Modes = []lease.Mode{lease.MemberLeases, lease.ShardLeases}
	default:
		return fmt.Errorf("--mode %q: want member, shard or both", *mode)
	}
	if *logLevel != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(*logLevel)); err != nil {
			return fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
		}
		cfg.Log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: l}))
	}
	if !*asJSON {
		cfg.Progress = e.stderr
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	results, err := bench.Shards(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndentedJSON(e, results)
	}
	return bench.PrintShards(e.stdout, results)
}

func runBenchRSM(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench rsm", "bench rsm --store URL [--latency 0,20ms,60ms] [--batch 1,10,100] [--pipeline 1,4,8] [--clients N] [--duration D] [--nodes 1|3] [--json]\n\n"+
		"Runs one replicated-state-machine group in this process for each batch size and pipeline depth,\n"+
		"under each injected store latency (added before every store call), with client goroutines\n"+
		"submitting commands to a counter on the leader. Before the groups of each latency it times the\n"+
		"store's own sequential create-if-absent puts under the same latency, the reference a log write costs.")
	storeURL := fs.String("store", "", "store URL (required), e.g. mem://, file:///var/tmp/tenure-bench or s3://bucket/prefix?endpoint=…")
	latencies := fs.String("latency", "0,20ms,60ms", "round-trip latencies to inject, comma-separated")
	batches := fs.String("batch", "1,10,100", "batch sizes (BatchMinCount: commands per log entry), comma-separated")
	pipelines := fs.String("pipeline", "1,4,8", "pipeline depths (PipelineDepth: log writes in flight), comma-separated")
	clients := fs.Int("clients", 0, "client goroutines (default 2 × batch × pipeline, so that batches fill)")
	duration := fs.Duration("duration", 10*time.Second, "how long the clients submit commands, per case")
	refDur := fs.Duration("ref-duration", 3*time.Second, "how long the store's own puts are timed, per latency (at least 20 puts, at most 5000)")
	nodes := fs.Int("nodes", 1, "nodes in the group (commands are submitted on the leader)")
	flush := fs.Duration("flush", time.Second, "FlushInterval: long, so that a batch is cut when it holds --batch commands")
	snapshot := fs.Int("snapshot", 0, "SnapshotThreshold in log entries (default the library's, 100)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("verbose", false, "log the nodes at info level (default: warnings)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	usage := func(format string, args ...any) error {
		fmt.Fprintf(e.stderr, "tenure bench rsm: "+format+"\n", args...)
		fs.Usage()
		return errUsage
	}
	if len(pos) != 0 || *storeURL == "" {
		return usage("--store is required; no positional arguments")
	}
	cfg := bench.RSMConfig{Store: *storeURL, Clients: *clients, Duration: *duration, RefDuration: *refDur, Nodes: *nodes,
		Flush: *flush, Snapshot: *snapshot, Verbose: *verbose, Stderr: e.stderr}
	if cfg.Latencies, err = parseDurations(*latencies); err != nil {
		return usage("--latency: %v", err)
	}
	if cfg.Batches, err = parseInts(*batches, 1, 100000); err != nil {
		return usage("--batch: %v", err)
	}
	if cfg.Pipelines, err = parseInts(*pipelines, 1, 64); err != nil {
		return usage("--pipeline: %v", err)
	}
	switch {
	case *clients < 0:
		return usage("--clients must not be negative, got %d", *clients)
	case *duration <= 0 || *refDur <= 0:
		return usage("--duration and --ref-duration must be positive")
	case *nodes < 1 || *nodes > 5:
		return usage("--nodes must be between 1 and 5, got %d", *nodes)
	case *flush <= 0 || *flush >= rsm.DefaultRequestTimeout:
		return usage("--flush must be positive and below the request timeout (%v), got %v", rsm.DefaultRequestTimeout, *flush)
	case *snapshot < 0:
		return usage("--snapshot must not be negative, got %d", *snapshot)
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.RSM(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndentedJSON(e, res)
	}
	return res.Print(e.stdout)
}

const kvBenchSynopsis = "bench kv [--store URL] [--sizes 1000,10000,100000] [--1m] [--value-size 1024] [--seq-puts N] [--writers 8] [--duration D] [--etcd=false] [--json]"

func runBenchKV(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench kv", kvBenchSynopsis+"\n\n"+
		"Runs `tenure kv serve` with its default options as a child process and measures it against the size\n"+
		"of its state: for each size it fills the store to that many keys (values of --value-size bytes),\n"+
		"times --seq-puts puts of a lone writer and --writers concurrent writers for --duration (overwriting\n"+
		"random keys), separating puts that ran while a snapshot was being taken; counts the store's bytes\n"+
		"and requests per put and the snapshots' time and size; reads the process's RSS and live heap; then\n"+
		"stops the node and times a fresh one on the same store to its first linearizable read. When an etcd\n"+
		"binary is installed ($TENURE_ETCD_BIN, else the newest etcd-vX.Y.Z in the test-server cache, else its\n"+
		"etcd, PATH or /usr/bin/etcd), it runs one etcd on the same disk and times the same puts through the\n"+
		"official client, at the same sizes; the output names its version and binary.")
	storeURL := fs.String("store", "", "store URL (default: file:// in a new directory under --dir, removed afterwards); the bench uses a group of its own and deletes it")
	dir := fs.String("dir", "", "directory for the temporary store and etcd's data, on the disk to measure (default the system's temporary directory)")
	sizes := fs.String("sizes", "1000,10000,100000", "state sizes in keys, ascending, comma-separated")
	million := fs.Bool("1m", false, "add a state of 1,000,000 keys (needs several GB of memory and a long time)")
	valueSize := fs.Int("value-size", 1024, "bytes per value")
	seqPuts := fs.Int("seq-puts", 300, "puts of the lone sequential writer, per size")
	writers := fs.Int("writers", 8, "concurrent writers")
	duration := fs.Duration("duration", 5*time.Second, "how long the concurrent writers run, per size")
	fillWriters := fs.Int("fill-writers", 64, "concurrent writers that fill the store to each size (not measured)")
	etcd := fs.Bool("etcd", true, "compare with etcd when it is installed")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("verbose", false, "copy the node's log to stderr")
	kvFlags := fs.String("kv-flags", "", "extra flags for the node's `tenure kv serve`, space-separated (default none: its defaults are measured), e.g. \"--pipeline 1\"")
	keep := fs.Bool("keep", false, "leave the store (and its temporary directory) and the group as the last size left them, and print the command that starts a node on them: cold starts can then be measured again")
	profile := fs.String("profile", "", "write the node's CPU profile of each measured phase and its heap profile after them into this directory (kv-SIZE-seq.cpu.pprof, kv-SIZE-conc.cpu.pprof, kv-SIZE.heap.pprof), and the cold-started node's CPU profile to its first read (kv-SIZE-cold.cpu.pprof); read them with go tool pprof")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	usage := func(format string, args ...any) error {
		fmt.Fprintf(e.stderr, "tenure bench kv: "+format+"\n", args...)
		fs.Usage()
		return errUsage
	}
	if len(pos) != 0 {
		return usage("no positional arguments")
	}
	cfg := bench.KVConfig{Store: *storeURL, Dir: *dir, ValueSize: *valueSize, SeqPuts: *seqPuts, Writers: *writers,
		Duration: *duration, FillWriters: *fillWriters, Etcd: *etcd, Verbose: *verbose, Profile: *profile,
		KVFlags: strings.Fields(*kvFlags), Keep: *keep, PipelineDepth: kvPipelineDepth, Stderr: e.stderr}
	if cfg.Sizes, err = parseInts(*sizes, 1, 10_000_000); err != nil {
		return usage("--sizes: %v", err)
	}
	if *million {
		cfg.Sizes = append(cfg.Sizes, 1_000_000)
	}
	switch {
	case !slices.IsSorted(cfg.Sizes) || len(slices.Compact(slices.Clone(cfg.Sizes))) != len(cfg.Sizes):
		return usage("--sizes must ascend without repeats, got %v", cfg.Sizes)
	case *valueSize < 1 || *valueSize > 200<<10:
		return usage("--value-size must be between 1 and %d bytes (the HTTP API's default limit is %d), got %d", 200<<10, 256<<10, *valueSize)
	case *seqPuts < 1:
		return usage("--seq-puts must be at least 1, got %d", *seqPuts)
	case *writers < 1 || *writers > bench.KVMaxWriters:
		return usage("--writers must be between 1 and %d (below the node's MaxConcurrentRequests), got %d", bench.KVMaxWriters, *writers)
	case *fillWriters < 1 || *fillWriters > bench.KVMaxWriters:
		return usage("--fill-writers must be between 1 and %d (below the node's MaxConcurrentRequests), got %d", bench.KVMaxWriters, *fillWriters)
	case *duration <= 0:
		return usage("--duration must be positive")
	}
	if cfg.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding this program to run the node: %w", err)
	}
	res, err := bench.KV(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndentedJSON(e, res)
	}
	return res.Print(e.stdout)
}

const etcdBenchSynopsis = "bench etcd --store URL [--latency 20ms] [--nodes 1,3] [--writers 100] [--listers 4] [--watchers 3] [--objects 3000] [--duration D] [--json] [-- ETCD-SERVE-FLAGS]"

func runBenchEtcd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench etcd", etcdBenchSynopsis+"\n\n"+
		"Runs a group of `tenure etcd serve` nodes (each group size of --nodes in turn) with their default options as\n"+
		"child processes on the store, --latency added before each of their store calls, and drives them with the\n"+
		"requests kube-apiserver's etcd3 store makes, through the etcd client's Kubernetes interface: objects of 1-4 KiB\n"+
		"under /registry/<resource>/<namespace>/<name>; writers making creates, optimistic updates and deletes\n"+
		"(Txn If mod_revision = R Then Put or DeleteRange Else Get), retrying a conflict with the object the Txn\n"+
		"returned; listers reading a resource in pages of 500 at one revision, then counting it; watchers on each\n"+
		"resource's prefix with progress notifications, which must see every committed write once, in order.\n"+
		"Clients are spread over the nodes. Writes/s counts the write Txns that succeeded. Before the groups it\n"+
		"times the store's own create-if-absent puts under the same latency, the reference a log write costs.\n"+
		"Flags after -- are given to every node's tenure etcd serve.")
	storeURL := fs.String("store", "", "store URL (required), e.g. s3://bucket/prefix?endpoint=… or file:///var/tmp/tenure-bench; each group size runs in a group of its own, deleted afterwards")
	latency := fs.Duration("latency", 20*time.Millisecond, "latency added before every store call of the nodes (and of the reference puts)")
	nodes := fs.String("nodes", "1,3", "group sizes to run, comma-separated")
	writers := fs.Int("writers", 100, "writer clients")
	listers := fs.Int("listers", 4, "lister clients")
	watchers := fs.Int("watchers", 3, "watches, one resource prefix each")
	objects := fs.Int("objects", 3000, "objects in the working set, spread over pods, leases and configmaps")
	duration := fs.Duration("duration", 20*time.Second, "how long the clients run, per group size")
	refDur := fs.Duration("ref-duration", 3*time.Second, "how long the store's own puts are timed (at least 20 puts)")
	listEvery := fs.Duration("list-interval", time.Second, "each lister starts a list this often (at once if the last one took longer)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("verbose", false, "copy the nodes' logs to stderr")
	profile := fs.String("profile", "", "write each node's CPU profile over the measured phase to this directory (etcd-nN-node-I.cpu.pprof)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	usage := func(format string, args ...any) error {
		fmt.Fprintf(e.stderr, "tenure bench etcd: "+format+"\n", args...)
		fs.Usage()
		return errUsage
	}
	cfg := bench.EtcdConfig{Store: *storeURL, Latency: *latency, Writers: *writers, Listers: *listers, Watchers: *watchers,
		Objects: *objects, Duration: *duration, RefDuration: *refDur, ListInterval: *listEvery, Verbose: *verbose, Profile: *profile, Stderr: e.stderr,
		ServeFlags: pos}
	if cfg.Nodes, err = parseInts(*nodes, 1, 5); err != nil {
		return usage("--nodes: %v", err)
	}
	switch {
	case *storeURL == "":
		return usage("--store is required")
	case *latency < 0:
		return usage("--latency must not be negative, got %v", *latency)
	case *writers < 1 || *listers < 0 || *watchers < 0:
		return usage("--writers must be at least 1, --listers and --watchers at least 0")
	case *objects < 1:
		return usage("--objects must be at least 1, got %d", *objects)
	case *duration <= 0 || *refDur <= 0 || *listEvery <= 0:
		return usage("--duration, --ref-duration and --list-interval must be positive")
	}
	cfg.Options = fmt.Sprintf("tenure etcd serve defaults: FlushInterval 20ms, BatchMinCount %d, PipelineDepth %d, SnapshotThreshold %d, MaxConcurrentRequests %d",
		rsm.DefaultBatchMinCount, kvPipelineDepth(*storeURL), rsm.DefaultSnapshotThreshold, kvMaxConcurrentRequests)
	if cfg.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding this program to run the nodes: %w", err)
	}
	res, err := bench.Etcd(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndentedJSON(e, res)
	}
	return res.Print(e.stdout)
}

// printIndentedJSON prints a benchmark's result as indented JSON.
func printIndentedJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// startCPUProfile writes a CPU profile of this process to the file path
// until stop; with path "", it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("%v is negative", d)
		}
		out = append(out, d)
	}
	return out, nil
}

func parseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < lo || n > hi {
			return nil, fmt.Errorf("%d is not between %d and %d", n, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}
