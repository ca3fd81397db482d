package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/store"
)

func runStore(ctx context.Context, e *env, args []string) error {
	sub := map[string]func(context.Context, *env, []string) error{
		"probe": runStoreProbe,
		"get":   runStoreGet,
		"list":  runStoreList,
	}
	if len(args) == 0 || sub[args[0]] == nil {
		if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(e.stderr, "tenure store: unknown subcommand %q\n\n", args[0])
		}
		fmt.Fprintln(e.stderr, `Usage:
  tenure store probe URL [--json] [--rounds N]   check that URL enforces conditional writes; measure latency
  tenure store get URL KEY [--json]              print the value and version of KEY
  tenure store list URL [PREFIX] [--limit N] [--json]
                                                 list keys under PREFIX with their versions and sizes`)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return flag.ErrHelp
		}
		return errUsage
	}
	return sub[args[0]](ctx, e, args[1:])
}

func runStoreProbe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "store probe", "store probe URL [--json] [--rounds N] [--timeout D]")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	rounds := fs.Int("rounds", 5, "rounds of create, refused create, swap, refused swap, get, delete")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	if *rounds < 1 {
		fmt.Fprintf(e.stderr, "tenure store probe: --rounds must be at least 1, got %d\n", *rounds)
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	s, err := store.Open(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	res, perr := store.Probe(ctx, s, *rounds)
	if *asJSON {
		out := struct {
			URL string `json:"url"`
			OK  bool   `json:"ok"`
			store.ProbeResult
			Error string `json:"error,omitempty"`
		}{URL: pos[0], OK: perr == nil && res.OK(), ProbeResult: res}
		if perr != nil {
			out.Error = perr.Error()
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return perr
	}
	if perr != nil && !errors.Is(perr, store.ErrConditionsIgnored) {
		return perr
	}
	yes := func(b bool) string {
		if b {
			return "enforced"
		}
		return "IGNORED"
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "store\t%s\n", pos[0])
	fmt.Fprintf(w, "create-if-absent\t%s\n", yes(res.CreateIfAbsent))
	fmt.Fprintf(w, "compare-and-swap (If-Match)\t%s\n", yes(res.IfMatch))
	switch {
	case res.DeleteUnsupported != "":
		fmt.Fprintf(w, "delete if match\trefused: the server ignores the condition, so tenure sends none (tenure makes no conditional delete)\n")
	default:
		fmt.Fprintf(w, "delete if match\t%s\n", yes(res.DeleteIfMatch))
	}
	if perr == nil {
		fmt.Fprintf(w, "get\t%s\n", res.Get)
		fmt.Fprintf(w, "create put\t%s\n", res.CreatePut)
		fmt.Fprintf(w, "swap put\t%s\n", res.CASPut)
		fmt.Fprintf(w, "refused put\t%s\n", res.RefusedPut)
		fmt.Fprintf(w, "delete\t%s\n", res.DeleteMatch)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	if res.DeleteUnsupported != "" {
		fmt.Fprintf(e.stdout, "conditional deletes fail with store.ErrUnsupported here: %s\n", res.DeleteUnsupported)
	}
	fmt.Fprintln(e.stdout, "ok: this store enforces conditional writes; tenure can run on it")
	return nil
}

func runStoreGet(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "store get", "store get URL KEY [--json]\n\nPrints KEY's value, exactly as stored, to stdout and its version to stderr;\nwith --json, one JSON object on stdout: key, version, size and value (base64).")
	asJSON := fs.Bool("json", false, "print the key, version, size and value (base64) as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errUsage
	}
	s, err := store.Open(ctx, pos[0], store.ReadOnly())
	if err != nil {
		return err
	}
	defer s.Close()
	data, version, err := s.Get(ctx, pos[1])
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("the key %q is absent from %s: %w", pos[1], pos[0], err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e, struct {
			Key     string `json:"key"`
			Version string `json:"version"`
			Size    int    `json:"size"`
			Value   []byte `json:"value"`
		}{pos[1], version, len(data), data})
	}
	fmt.Fprintf(e.stderr, "version %s, %d bytes\n", version, len(data))
	_, err = e.stdout.Write(data)
	return err
}

func runStoreList(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "store list", "store list URL [PREFIX] [--limit N] [--json]")
	limit := fs.Int("limit", 1000, "list at most this many keys")
	asJSON := fs.Bool("json", false, "print the keys as JSON: items with key, size and version")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 || *limit < 1 {
		fs.Usage()
		return errUsage
	}
	prefix := ""
	if len(pos) == 2 {
		prefix = pos[1]
	}
	s, err := store.Open(ctx, pos[0], store.ReadOnly())
	if err != nil {
		return err
	}
	defer s.Close()
	items, err := s.List(ctx, prefix, "", *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		type item struct {
			Key     string `json:"key"`
			Size    int64  `json:"size"`
			Version string `json:"version"`
		}
		out := struct {
			Items []item `json:"items"`
		}{Items: []item{}}
		for _, it := range items {
			out.Items = append(out.Items, item{it.Key, it.Size, it.Version})
		}
		return printJSON(e, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSIZE\tVERSION")
	for _, it := range items {
		fmt.Fprintf(w, "%s\t%s\t%s\n", strconv.Quote(it.Key), strconv.FormatInt(it.Size, 10), it.Version)
	}
	return w.Flush()
}

// printJSON prints v as indented JSON on stdout.
func printJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
