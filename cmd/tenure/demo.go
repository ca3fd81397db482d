package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tenure-io/tenure/internal/demo"
)

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", "demo [--store URL] [--verbose] [--kv=false] [--kv-writes N] [--etcd=false]")
	storeURL := fs.String("store", "", "store to run on (default: a new temporary directory, file://)")
	verbose := fs.Bool("verbose", false, "print the members' logs")
	withKV := fs.Bool("kv", true, "then run the replicated key-value part: a leader killed mid-write, a cold restart")
	withEtcd := fs.Bool("etcd", true, "then run the etcd part: the etcd Go client through the stop of a group's leader, its writes and watch going on")
	kvWrites := fs.Int("kv-writes", 100, "keys the key-value part writes before the leader is killed (half as many after)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
	}
	if *kvWrites < 2 {
		fmt.Fprintf(e.stderr, "tenure demo: --kv-writes must be at least 2, got %d\n", *kvWrites)
		return errUsage
	}
	cfg := demo.Config{Store: *storeURL, KV: *withKV, KVWrites: *kvWrites, Etcd: *withEtcd, Out: e.stdout}
	if *verbose {
		cfg.Log = slog.New(slog.NewTextHandler(e.stderr, nil))
	}
	return demo.Run(ctx, cfg)
}
