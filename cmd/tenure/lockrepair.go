package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
)

func runLock(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "repair" {
		if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(e.stderr, "tenure lock: unknown subcommand %q\n\n", args[0])
		}
		fmt.Fprintln(e.stderr, `Usage:
  tenure lock repair --term-floor N [--leader-timeout D] LOCK_URL   make a lock whose term cannot be read usable again`)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return flag.ErrHelp
		}
		return errUsage
	}
	return runLockRepair(ctx, e, args[1:])
}

func runLockRepair(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "lock repair", `lock repair --term-floor N [--leader-timeout D] [--json] LOCK_URL

Replaces the lock record with a released one of term N, so that the next
leader gets term N+1. Use it when members report that the record cannot be
taken over (its term cannot be read, e.g. corrupt bytes or a record written
by S3lect). Choose N at least as high as every term the lock ever handed
out. A record that is not released is replaced only after it stayed
unchanged for --leader-timeout (a live member renewing it must be stopped first).`)
	floorFlag := fs.String("term-floor", "", "the term to record; the next leader gets this plus one (required)")
	asJSON := fs.Bool("json", false, "print the outcome as JSON: lock, term and nextTerm")
	lease := fs.Duration("leader-timeout", election.DefaultLeaderTimeout, "how long the record must stay unchanged first: the group's largest LeaderTimeout")
	deprecatedAlias(fs, "lease", "leader-timeout")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	for _, d := range deprecations(fs) {
		fmt.Fprintf(e.stderr, "tenure lock repair: warning: %s\n", d)
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	floor, err := strconv.ParseUint(*floorFlag, 10, 64)
	if err != nil || floor == 0 || floor == math.MaxUint64 {
		fmt.Fprintf(e.stderr, "tenure lock repair: --term-floor must be a whole number from 1 to %d, got %q\n", uint64(math.MaxUint64-1), *floorFlag)
		return errUsage
	}
	if *lease <= 0 {
		fmt.Fprintf(e.stderr, "tenure lock repair: --leader-timeout must be positive, got %v\n", *lease)
		return errUsage
	}
	s, key, err := store.OpenKey(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	if !*asJSON {
		fmt.Fprintf(e.stdout, "repairing %s: waiting up to %v to see that no member renews it\n", pos[0], *lease)
	}
	if err := election.Repair(ctx, s, key, floor, election.RepairOptions{Lease: *lease}); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e, map[string]any{"lock": pos[0], "term": floor, "nextTerm": floor + 1})
	}
	fmt.Fprintf(e.stdout, "repaired %s: released with term %d; the next leader gets term %d\n", pos[0], floor, floor+1)
	return nil
}
