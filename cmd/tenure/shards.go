package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func runShards(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "shards", "shards --store URL (--shards N | --shard-ids a,b,c) [--mode member|shard] [--id ID] [--http ADDR] [--json]\n\n"+
		"Runs one member of a shard group and prints the shards it leads each time they change.\n"+
		"--http serves /livez, /readyz (200 while this member's lease is live in the group, else 503\n"+
		"with the reason; /healthz is an alias), /status (JSON) and /metrics (Prometheus). A store that\n"+
		"cannot be reached at start is retried (not ready meanwhile); a permanent store error exits.\n"+
		"SIGINT or SIGTERM releases every shard and exits.")
	storeURL := fs.String("store", "", "store URL, e.g. file://./data or s3://bucket/prefix (required)")
	prefix := fs.String("prefix", lease.DefaultPrefix, "key prefix shared by the group's members")
	count := fs.Int("shards", 0, "number of shards, named shard-0000 … (or use --shard-ids)")
	ids := fs.String("shard-ids", "", "comma-separated shard IDs")
	mode := fs.String("mode", "member", "member: one lease per member and an assignment record (cost grows with members); shard: one lease per shard")
	host, _ := os.Hostname()
	id := fs.String("id", host, "this member's OwnerID")
	leaseDur := fs.Duration("lease", lease.DefaultLeaseDuration, "LeaseDuration")
	renew := fs.Duration("renew", lease.DefaultRenewPeriod, "RenewPeriod")
	httpAddr := fs.String("http", "", "serve /livez, /readyz (200 while this member holds its place in the group), /status and /metrics here")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	asJSON := fs.Bool("json", false, "print each change of the shards this member leads as a JSON line: time and held")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *count < 0 {
		return fmt.Errorf("--shards %d: must be at least 1", *count)
	}
	if len(pos) != 0 || *storeURL == "" || (*count == 0) == (*ids == "") {
		fmt.Fprintln(e.stderr, "tenure shards: --store and exactly one of --shards N or --shard-ids are required")
		fs.Usage()
		return errUsage
	}
	if err := refuseMemStore("--store", *storeURL); err != nil {
		return err
	}
	var shardIDs []string
	if *ids != "" {
		for _, s := range strings.Split(*ids, ",") {
			shardIDs = append(shardIDs, strings.TrimSpace(s))
		}
	} else {
		for i := 0; i < *count; i++ {
			shardIDs = append(shardIDs, fmt.Sprintf("shard-%04d", i))
		}
	}
	var m lease.Mode
	switch *mode {
	case "member":
		m = lease.MemberLeases
	case "shard":
		m = lease.ShardLeases
	default:
		return fmt.Errorf("--mode %q: want member or shard", *mode)
	}
	ef := &electFlags{logFormat: logFormat, logLevel: logLevel}
	log, err := ef.logger(e)
	if err != nil {
		return err
	}
	log = slog.New(newShardLogHandler(log.Handler(), shardWarnInterval))
	// The set printed is the coordinator's when it prints: a change
	// notification may carry a set that a concurrent change has already
	// superseded.
	var coord atomic.Pointer[lease.Coordinator]
	printer := &heldPrinter{interval: time.Second, print: func(held []string) {
		if c := coord.Load(); c != nil {
			held = c.Held()
		}
		if held == nil {
			held = []string{}
		}
		if *asJSON {
			_ = json.NewEncoder(e.stdout).Encode(shardsChange{Time: time.Now(), Held: held})
			return
		}
		fmt.Fprintf(e.stdout, "%s leads %d shards: %s\n", time.Now().Format(time.TimeOnly), len(held), shardList(held))
	}}
	cfg := lease.Config{
		Prefix: *prefix, ShardIDs: shardIDs, OwnerID: *id, Mode: m,
		LeaseDuration: *leaseDur, RenewPeriod: *renew, Logger: log,
		OnChange: printer.change,
	}
	// Validate before touching the store, so a bad flag costs nothing.
	check := cfg
	check.Store = store.New(memstore.New())
	if err := check.Validate(); err != nil {
		return err
	}
	ops := opsserver.NewState("shards", *id)
	defer context.AfterFunc(ctx, func() { ops.SetStopping() })()
	sm := opsserver.NewStoreMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sm.Collectors()...)
	reg.MustRegister(opsserver.ProcessCollectors()...)
	if *httpAddr != "" {
		stop, err := serveOps(*httpAddr, opsserver.Mux(ops.Status, reg), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	var st *store.Store
	err = opsserver.ConnectStore(ctx, log, ops, func(ctx context.Context) error {
		var err error
		st, err = opsserver.OpenProbed(ctx, *storeURL, store.WithLogger(log), store.WithObserver(func(c store.Call) {
			sm.Observe(c)
			ops.Health().Observe(c)
		}))
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	cfg.Store, cfg.Registerer = st, reg
	c, err := lease.New(cfg)
	if err != nil {
		return err
	}
	coord.Store(c)
	if err := c.Start(ctx); err != nil {
		return err
	}
	ops.Running(shardsView(c))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), *leaseDur)
	defer cancel()
	err = c.Stop(sctx)
	printer.flush()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(shardsChange{Time: time.Now(), Held: []string{}, Stopped: true})
	}
	fmt.Fprintln(e.stdout, "stopped: released every shard")
	return nil
}

// shardsChange is a line of tenure shards --json.
type shardsChange struct {
	Time    time.Time `json:"time"`
	Held    []string  `json:"held"`
	Stopped bool      `json:"stopped,omitempty"` // released every shard and exited
}

func ptr[T any](v T) *T { return &v }

// shardWarnInterval: each per-shard warning is logged at most this often.
const shardWarnInterval = 10 * time.Second

// shardsView is the readiness of a shard group member: in member mode,
// ready once it sees its own lease among the live members; in shard mode, once running (each shard's election
// keeps its own view). Either way, its store must answer.
func shardsView(c *lease.Coordinator) func(opsserver.Status) opsserver.Status {
	return func(s opsserver.Status) opsserver.Status {
		ls := c.Status()
		s.Shards = &ls
		s.Role = "member"
		if ls.Mode == lease.MemberLeases.String() && !slices.Contains(ls.Members, ls.OwnerID) {
			s.Ready, s.Reason = false, "this member's lease is not live in the group"
		}
		return s
	}
}

// shardList prints up to ten shard IDs.
func shardList(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	if len(ids) <= 10 {
		return strings.Join(ids, " ")
	}
	return strings.Join(ids[:10], " ") + fmt.Sprintf(" … (%d more)", len(ids)-10)
}
