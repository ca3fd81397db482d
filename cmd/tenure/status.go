package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
)

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "status", "status LOCK_URL [--json]\n\nLOCK_URL is a store URL ending with the lock's key, e.g. file://./data/leader.json;\n"+
		"a key with \"/\" in it follows \"//\": file://./data//jobs/leader.json is the key jobs/leader.json in file://./data")
	asJSON := fs.Bool("json", false, "print as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	s, key, err := store.OpenKey(ctx, pos[0], store.ReadOnly())
	if err != nil {
		return err
	}
	defer s.Close()
	data, version, err := s.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		if *asJSON {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"lock": pos[0], "exists": false})
		}
		fmt.Fprintf(e.stdout, "no lock at %s: nobody has led yet\n", pos[0])
		if !strings.Contains(key, "/") {
			if storeURL, _, _ := store.SplitKeyURL(pos[0]); strings.Count(storeURL, "/") > 2 {
				fmt.Fprintf(e.stdout, "(this is the key %q in the store %s; if the lock's key has a \"/\" in it, put \"//\" before the key)\n", key, storeURL)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	rec, derr := election.DecodeRecord(data)
	// A record whose term cannot be read, or cannot grow, is never taken
	// over: say so, with the repair.
	problem := derr
	if problem == nil {
		problem = rec.CheckTerm()
	}
	if errors.Is(derr, election.ErrForeignRecord) {
		problem = fmt.Errorf("%s (version %s) is not a lock: %w; no member takes it over or writes over it, and no repair replaces it: use a key of its own for the lock", pos[0], version, derr)
	} else if problem != nil {
		problem = fmt.Errorf("the lock at %s (version %s) cannot be taken over: %w; no member will lead it until an operator runs: tenure lock repair --term-floor N %s (N at least every term it handed out)",
			pos[0], version, problem, pos[0])
	}
	if *asJSON {
		out := map[string]any{"lock": pos[0], "exists": true, "version": version}
		if derr != nil {
			out["error"] = derr.Error()
		} else {
			out["record"] = rec
		}
		if problem != nil {
			out["problem"] = problem.Error()
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return problem
	}
	if derr != nil {
		return problem
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	state := "held"
	if rec.Released {
		state = "released (any member may take it at once)"
	}
	fmt.Fprintf(w, "lock\t%s\n", pos[0])
	fmt.Fprintf(w, "leader\t%s\n", rec.LeaderID)
	if rec.LeaderAddr != "" {
		fmt.Fprintf(w, "address\t%s\n", rec.LeaderAddr)
	}
	fmt.Fprintf(w, "term\t%d\n", rec.Term)
	fmt.Fprintf(w, "state\t%s\n", state)
	if !rec.LastUpdated.IsZero() {
		fmt.Fprintf(w, "written\t%s by the writer's clock (%s ago by this machine's; for people only)\n",
			rec.LastUpdated.Format(time.RFC3339), time.Since(rec.LastUpdated).Round(time.Second))
	}
	if rec.LeaseMillis > 0 {
		fmt.Fprintf(w, "lease\t%v (followers take the lock when it stays unchanged this long)\n", time.Duration(rec.LeaseMillis)*time.Millisecond)
	}
	fmt.Fprintf(w, "version\t%s\n", version)
	if err := w.Flush(); err != nil {
		return err
	}
	return problem
}
