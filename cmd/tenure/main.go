// Command tenure runs leader elections, shard leases and a replicated state
// machine on shared storage, and inspects the stores they live on.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"

	"github.com/tenure-io/tenure/store"

	_ "github.com/tenure-io/tenure/store/all" // every store driver, for URLs
)

// command is one subcommand: its name, a line of help, and its body. run
// receives the arguments after the command's name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command writes to, so tests can capture it.
type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader // nil: os.Stdin
}

// errUsage means the arguments were wrong; the usage was already printed.
var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		{"bench", "measure failover, handover and store cost: tenure bench election|shards|rsm|kv", runBench},
		{"demo", "three members elect a leader on a local directory: failover and handover, measured", runDemo},
		{"etcd", "serve etcd's v3 API from a group on shared storage: tenure etcd serve", runEtcd},
		{"elect", "take part in an election: peer endpoint, /livez /readyz /status /metrics; SIGTERM releases", runElect},
		{"lock", "repair a lock whose term cannot be read: tenure lock repair --term-floor N LOCK_URL", runLock},
		{"kv", "a replicated key-value store on shared storage: tenure kv serve|get|put|del|cas|list|status", runKV},
		{"run", "run a command only while this member leads: tenure run --lock URL -- CMD ARGS", runRun},
		{"shards", "run a member of a shard group and show which shards it leads", runShards},
		{"status", "show the leader, term and age of a lock: tenure status LOCK_URL", runStatus},
		{"store", "inspect and probe a store: tenure store probe|get|list URL", runStore},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status: 0 on success,
// 1 on failure, 2 on a usage error.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			return run(ctx, e, []string{args[1], "--help"})
		}
		usage(e.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		}
		if errors.As(err, new(loggedError)) {
			return 1 // the command logged it, in its log format
		}
		var ee exitError
		if errors.As(err, &ee) {
			fmt.Fprintf(e.stderr, "tenure %s: %v\n", c.name, err)
			return ee.code
		}
		fmt.Fprintf(e.stderr, "tenure %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(e.stderr, "tenure: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "tenure: coordination on shared storage (leader election, shard leases, replicated state).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: tenure <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Store URLs:")
	for _, s := range store.Schemes() {
		ex, ok := schemeHelp[s]
		if !ok {
			ex = [2]string{s + "://...", ""}
		}
		fmt.Fprintf(w, "  %-50s %s\n", ex[0], ex[1])
	}
	fmt.Fprintln(w, "A lock URL is a store URL followed by the lock's key: file://./data/leader.json, or")
	fmt.Fprintln(w, "file://./data//jobs/leader.json for a key with \"/\" in it.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'tenure <command> --help' for a command's flags.")
}

// schemeHelp is the example and description of each store URL scheme the
// top help lists (every registered scheme is listed).
var schemeHelp = map[string][2]string{
	"file":     {"file:///var/lib/tenure  or  file://./data", "a local directory (the embedded default)"},
	"s3":       {"s3://bucket/prefix?endpoint=URL&region=R", "S3 or an S3-compatible server (MinIO, R2, ...)"},
	"gs":       {"gs://bucket/prefix", "Google Cloud Storage"},
	"azblob":   {"azblob://container/prefix?account=A", "Azure Blob Storage"},
	"dynamodb": {"dynamodb://table/namespace?region=R", "DynamoDB (items up to 400 KB)"},
	"etcd":     {"etcd://host:2379/prefix", "etcd 3.4+ (followers watch instead of polling)"},
	"route53":  {"route53://ZONEID/name", "Route 53 TXT records (small values; not for kv)"},
	"mem":      {"mem://  or  mem://name", "in memory, inside one process (not for elect, run, shards or kv serve)"},
}

// newFlags returns a FlagSet that prints its usage to e.stderr and returns
// errors instead of exiting.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: tenure %s\n", synopsis)
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
		if len(flags) > 0 {
			sort.Strings(flags)
			fmt.Fprintln(e.stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args, allowing flags after positional arguments, and maps
// flag errors to errUsage. A flag it refuses is reported in one line
// (flagError), without the usage; --help prints the usage.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var failed flagError
	restore := checkFlagValues(fs, &failed)
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() {
		restore()
		fs.Usage = usage
		fs.SetOutput(out)
	}()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			restore()
			fs.Usage = usage
			fs.SetOutput(out)
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, err
			}
			msg := err.Error()
			if failed.name != "" {
				msg = failed.Error()
			}
			fmt.Fprintf(out, "tenure %s: %s (see tenure %s --help)\n", fs.Name(), msg, fs.Name())
			return nil, errUsage
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			// "--" ends the flags: everything after it is positional.
			return append(positional, rest...), nil
		}
		args = rest
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// version is set at link time (-ldflags "-X main.version=v1.2.3") or read
// from the build information the go tool records.
var version = ""

// versionString is the module version (set by go install MODULE@VERSION),
// else the VCS revision the binary was built from, and the Go version.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return cmp.Or(version, "unknown (no build information)")
	}
	v := version
	if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = " with local changes"
			}
		}
	}
	if v == "" {
		v = "(devel)"
		if rev != "" {
			v = fmt.Sprintf("(devel) %.12s %s%s", rev, at, dirty)
		}
	}
	return fmt.Sprintf("%s, %s", v, bi.GoVersion)
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "version [--json]")
	asJSON := fs.Bool("json", false, "print the version as JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e, map[string]string{"version": versionString()})
	}
	fmt.Fprintf(e.stdout, "tenure %s\n", versionString())
	return nil
}
