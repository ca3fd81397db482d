package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/internal/grpcslog"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv/kvserver"
	"github.com/tenure-io/tenure/store"
)

// nodeFlags are the flags of a command that runs a node of a kv group
// (kv serve, etcd serve): the store, the group, the peer port and its
// TLS, the rsm options, /metrics, the collector and the log.
type nodeFlags struct {
	fs                                *flag.FlagSet
	storeURL, group, peer, advertise  *string
	id                                *string
	flush, reqTimeout, heartbeat      *time.Duration
	leadDelay                         *time.Duration
	batchMin, pipeline, snapThreshold *int
	missed, gcPercent, maxConcurrent  *int
	tlsDir, tlsCert, tlsKey, tlsCA    *string
	peerPlain                         *bool
	metricsAddr, logLevel, logFormat  *string
}

// nodeFlagNames are the flags' names for the fields kvserver's errors
// name.
var nodeFlagNames = map[string]string{
	"PlaintextLoopback": "--peer-plaintext", "ServerTLS": "--tls-dir, --tls-cert/--tls-key/--tls-ca", "MetricsAddr": "--metrics-http",
}

func addNodeFlags(fs *flag.FlagSet, group string) *nodeFlags {
	return &nodeFlags{
		fs:            fs,
		storeURL:      fs.String("store", "", "store URL, e.g. file:///var/lib/tenure or s3://bucket/prefix (required)"),
		group:         fs.String("group", group, "the group's name: its objects live under this prefix in the store"),
		peer:          fs.String("peer-listen", "", "host:port the node's gRPC server listens on for the group's other nodes (required)"),
		advertise:     fs.String("advertise", "", "host:port the other nodes dial (default --peer-listen, with the port chosen if its port is 0)"),
		id:            fs.String("id", "", "node ID, unique in the group and stable across restarts (default HOSTNAME-ADVERTISE)"),
		flush:         fs.Duration("flush-interval", 20*time.Millisecond, "FlushInterval: a partial batch is committed this long after its first request (the library's default is S2C's 2s; the CLI's is 20ms, for latency)"),
		batchMin:      fs.Int("batch-min", rsm.DefaultBatchMinCount, "BatchMinCount: a batch is committed at once when it holds this many requests"),
		pipeline:      fs.Int("pipeline", 0, fmt.Sprintf("PipelineDepth: batches in flight to the store at once (default %d on file://, %d on other stores)", kvFilePipelineDepth, rsm.DefaultPipelineDepth)),
		maxConcurrent: fs.Int("max-concurrent-requests", kvMaxConcurrentRequests, fmt.Sprintf("MaxConcurrentRequests: the commands the leader holds at once, and as many reads; a node sends at most as many of its commands at once, and the others wait at the node (the library's default is S2C's %d; the CLI's is %d, so that the many clients of an etcd or Kubernetes workload share each log write)", rsm.DefaultMaxConcurrentRequests, kvMaxConcurrentRequests)),
		snapThreshold: fs.Int("snapshot-threshold", rsm.DefaultSnapshotThreshold, "SnapshotThreshold: snapshot and truncate the log after this many entries"),
		reqTimeout:    fs.Duration("request-timeout", rsm.DefaultRequestTimeout, "RequestTimeout: bound on one command or read"),
		heartbeat:     fs.Duration("heartbeat", rsm.DefaultHeartbeatInterval, "HeartbeatInterval: the leader synchronizes followers at least this often"),
		missed:        fs.Int("max-missed-heartbeats", rsm.DefaultMaxMissedHeartbeats, "MaxMissedHeartbeats: a follower checks the store after this many silent intervals"),
		leadDelay:     fs.Duration("leadership-delay", rsm.DefaultLeadershipDelay, "LeadershipDelay: pause per rank before a follower attempts leadership"),
		tlsDir:        fs.String("tls-dir", "", "directory holding ca.pem, node.pem and node-key.pem for the peer RPCs (mutual TLS)"),
		tlsCert:       fs.String("tls-cert", "", "certificate for the peer RPCs, as server and as client (PEM; with --tls-key and --tls-ca)"),
		tlsKey:        fs.String("tls-key", "", "key of --tls-cert (PEM)"),
		tlsCA:         fs.String("tls-ca", "", "CA that signs every node's certificate (PEM)"),
		peerPlain:     fs.Bool("peer-plaintext", false, "serve and call the peer RPCs in clear and unauthenticated: only with loopback --peer-listen and --advertise, and never with --token-file or --http-client-ca (default: peers authenticate with keys published in the store)"),
		metricsAddr:   fs.String("metrics-http", "", "also serve Prometheus /metrics on this address, plain HTTP and without token or client certificate"),
		gcPercent:     fs.Int("gc-percent", 0, "the Go collector's GOGC for this process: between collections the heap grows this many percent above the live state (Go's default is 100); -1 turns the collector off; 0 (the default): 10% above the live heap (25% from 512 MiB of it) and at least 16 MiB, set as the state grows (the state's values hold no pointers, so a small state is collected often at little cost). Without this flag, a GOGC environment variable wins"),
		logLevel:      fs.String("log-level", "info", "log level: debug, info, warn or error"),
		logFormat:     fs.String("log-format", "text", "log format: text or json (json: every line on stdout and stderr is JSON, gRPC's included)"),
	}
}

// kvMaxConcurrentRequests is kv serve's and etcd serve's
// MaxConcurrentRequests. With the library's 100, a leader on file:// (one
// log write in flight) writes at most 100 commands a write however many
// clients wait, and the fixed costs of a write (its sync, its
// confirmation read, its apply) are shared by no more, so each command
// costs more CPU than with 1,000 (docs/BENCHMARKS.md, etcd's benchmark
// tool). A held command is at most a message (MaxMessageSize).
const kvMaxConcurrentRequests = 1000

// nodeSetup is what nodeFlags.setup makes of the flags.
type nodeSetup struct {
	log *slog.Logger
	// fail returns err as the command's error: in JSON, logged first.
	fail   func(error) error
	opts   rsm.Options
	host   rsm.HostConfig // ID, Addr, Listener and the peer TLS
	tuneGC bool
}

// required checks the flags every node needs, naming the command.
func (f *nodeFlags) required(e *env, command string, pos []string) error {
	if len(pos) != 0 || *f.storeURL == "" || *f.peer == "" {
		fmt.Fprintf(e.stderr, "tenure %s: --store and --peer-listen are required\n", command)
		f.fs.Usage()
		return errUsage
	}
	return nil
}

// logger makes the command's logger, for gRPC's logs too, and its fail.
func (f *nodeFlags) logger(e *env, command string) (*slog.Logger, func(error) error, error) {
	log, err := (&electFlags{logFormat: f.logFormat, logLevel: f.logLevel}).logger(e)
	if err != nil {
		return nil, nil, err
	}
	grpcslog.SetLogger(log)
	warnDeprecated(f.fs, log)
	fail := func(err error) error {
		if *f.logFormat == "json" && err != nil {
			log.Error("tenure "+command+": exiting", "err", err)
			return loggedError{err}
		}
		return err
	}
	return log, fail, nil
}

// setup checks the flags, sets the collector's policy, and listens on the
// peer port (before the store is touched, so a busy port costs
// nothing). maxMessage is the group's MaxMessageSize. The caller closes
// the returned host's Listener.
func (f *nodeFlags) setup(ctx context.Context, log *slog.Logger, fail func(error) error, maxMessage int) (*nodeSetup, error) {
	if err := refuseMemStore("--store", *f.storeURL); err != nil {
		return nil, fail(err)
	}
	if u, err := url.Parse(*f.storeURL); err != nil || !slices.Contains(store.Schemes(), u.Scheme) {
		// Open refuses the URL before any I/O, with the message.
		if _, err := store.Open(ctx, *f.storeURL); err != nil {
			return nil, fail(err)
		}
	}
	if *f.gcPercent < -1 {
		return nil, fail(fmt.Errorf("--gc-percent must be -1 (no collection) or more (got %d)", *f.gcPercent))
	}
	ns := &nodeSetup{log: log, fail: fail}
	if v, ok := kvGC(flagGiven(f.fs, "gc-percent"), *f.gcPercent, os.LookupEnv); ok && v != 0 {
		debug.SetGCPercent(v)
	} else {
		ns.tuneGC = ok
	}
	if *f.pipeline == 0 {
		*f.pipeline = kvPipelineDepth(*f.storeURL)
	}
	ns.opts = rsm.Options{
		MaxMessageSize: maxMessage,
		FlushInterval:  *f.flush, BatchMinCount: *f.batchMin, PipelineDepth: *f.pipeline,
		SnapshotThreshold: *f.snapThreshold, RequestTimeout: *f.reqTimeout,
		HeartbeatInterval: *f.heartbeat, MaxMissedHeartbeats: *f.missed, LeadershipDelay: *f.leadDelay,
		MaxConcurrentRequests: *f.maxConcurrent,
	}
	if err := ns.opts.Validate(); err != nil {
		return nil, fail(err)
	}
	serverTLS, clientTLS, err := kvTLS(*f.tlsDir, *f.tlsCert, *f.tlsKey, *f.tlsCA)
	if err != nil {
		return nil, fail(err)
	}
	peerLn, err := net.Listen("tcp", *f.peer)
	if err != nil {
		return nil, fail(fmt.Errorf("--peer-listen %s: %w", *f.peer, err))
	}
	addr, err := advertiseAddr(*f.advertise, *f.peer, peerLn.Addr())
	if err != nil {
		peerLn.Close()
		return nil, fail(err)
	}
	id := *f.id
	if id == "" {
		host, _ := os.Hostname()
		id = strings.ReplaceAll(host+"-"+addr, "/", "_")
	}
	ns.host = rsm.HostConfig{ID: id, Addr: addr, Listener: peerLn, ServerTLS: serverTLS, ClientTLS: clientTLS, PlaintextLoopback: *f.peerPlain}
	return ns, nil
}

// names merges nodeFlagNames with a command's own.
func (f *nodeFlags) names(own map[string]string) map[string]string {
	out := make(map[string]string, len(nodeFlagNames)+len(own))
	for k, v := range nodeFlagNames {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// run runs the node (kvserver.Run with c) and reports, on stdout or in
// JSON in the log, when it serves ("tenure NAME: node ID of group G: API
// on URL, peers dial ADDR") and when it left the group.
func (ns *nodeSetup) run(ctx context.Context, e *env, f *nodeFlags, name, api string, c kvserver.NodeConfig) error {
	id, addr, group := ns.host.ID, ns.host.Addr, c.Group
	served := false
	c.OnServing = func(apiURL string) {
		served = true
		if *f.logFormat == "json" {
			ns.log.Info("serving", "node", id, "group", group, "api", apiURL, "peers", addr)
		} else {
			fmt.Fprintf(e.stdout, "tenure %s: node %s of group %q: %s on %s, peers dial %s\n", name, id, group, api, apiURL, addr)
		}
	}
	if err := kvserver.Run(ctx, c); err != nil {
		return ns.fail(err)
	}
	if !served {
		return nil // stopped before it joined
	}
	if *f.logFormat == "json" {
		ns.log.Info("left the group", "node", id, "group", group)
	} else {
		fmt.Fprintf(e.stdout, "tenure %s: node %s left group %q\n", name, id, group)
	}
	return nil
}
