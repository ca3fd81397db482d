package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func runShards(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "shards", "shards --store URL (--shards N | --shard-ids a,b,c) [--mode member|shard] [--id ID] [--http ADDR]\n\n"+
		"Runs one member of a shard group and prints the shards it leads each time they change.")
	storeURL := fs.String("store", "", "store URL, e.g. file://./data or s3://bucket/prefix (required)")
	prefix := fs.String("prefix", lease.DefaultPrefix, "key prefix shared by the group's members")
	count := fs.Int("shards", 0, "number of shards, named shard-0000 … (or use --shard-ids)")
	ids := fs.String("shard-ids", "", "comma-separated shard IDs")
	mode := fs.String("mode", "member", "member: one lease per member and an assignment record (cost grows with members); shard: one lease per shard")
	host, _ := os.Hostname()
	id := fs.String("id", host, "this member's OwnerID")
	leaseDur := fs.Duration("lease", lease.DefaultLeaseDuration, "LeaseDuration")
	renew := fs.Duration("renew", lease.DefaultRenewPeriod, "RenewPeriod")
	httpAddr := fs.String("http", "", "serve /healthz (the coordinator's status as JSON) here")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *storeURL == "" || (*count == 0) == (*ids == "") || *count < 0 {
		fmt.Fprintln(e.stderr, "tenure shards: --store and exactly one of --shards N or --shard-ids are required")
		fs.Usage()
		return errUsage
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
	ef := &electFlags{logFormat: ptr("text"), logLevel: logLevel}
	log, err := ef.logger(e)
	if err != nil {
		return err
	}
	cfg := lease.Config{
		Prefix: *prefix, ShardIDs: shardIDs, OwnerID: *id, Mode: m,
		LeaseDuration: *leaseDur, RenewPeriod: *renew, Logger: log,
		OnChange: func(held []string) {
			fmt.Fprintf(e.stdout, "%s leads %d shards: %s\n", time.Now().Format(time.TimeOnly), len(held), shardList(held))
		},
	}
	// Validate before touching the store, so a bad flag costs nothing.
	check := cfg
	check.Store = store.New(memstore.New())
	if err := check.Validate(); err != nil {
		return err
	}
	st, err := store.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.Store = st
	c, err := lease.New(cfg)
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", *httpAddr, err)
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(c.Status())
		})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving /healthz", "addr", ln.Addr().String())
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), *leaseDur)
	defer cancel()
	if err := c.Stop(sctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(e.stdout, "stopped: released every shard")
	return nil
}

func ptr[T any](v T) *T { return &v }

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
