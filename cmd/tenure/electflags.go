package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/internal/tlsutil"
	"github.com/tenure-io/tenure/store"
)

// electFlags are the flags every command that takes part in an election
// shares.
type electFlags struct {
	lock, id, addr, listen                  *string
	peer, noPeer                            *bool
	certFile, keyFile, caFile, clientCAFile *string
	clientCertFile, clientKeyFile           *string
	frequent, infrequent, timeout, deadline *time.Duration
	peerTimeout                             *time.Duration
	priority                                *int
	retry                                   *string
	logFormat, logLevel                     *string
}

func addElectFlags(fs *flag.FlagSet) *electFlags {
	host, _ := os.Hostname()
	defer func() {
		deprecatedAlias(fs, "addr", "advertise")
		deprecatedAlias(fs, "listen", "peer-listen")
		deprecatedAlias(fs, "peer", "require-peer")
	}()
	return &electFlags{
		lock: fs.String("lock", "", "the lock: a store URL ending with the lock's key, e.g. s3://bucket/prefix/leader.json; a key with \"/\" in it follows \"//\", e.g. file:///var/lib/tenure//jobs/leader.json (required)"),
		id:   fs.String("id", host, "this member's ServerID"),
		addr: fs.String("advertise", "", "host:port where peers reach this member; turns peer mode on: followers long-poll the leader over HTTPS "+
			"instead of reading the store, and check it by the key its lock record names (no certificates needed)"),
		listen:         fs.String("peer-listen", "", "address the peer server listens on (default: --advertise; :PORT for every interface, e.g. behind NAT)"),
		peer:           fs.Bool("require-peer", false, "fail rather than run store-only when the peer server cannot listen (peer mode is on whenever --advertise is given)"),
		noPeer:         fs.Bool("no-peer", false, "store-only: no peer server, though --advertise is given (it is then only shown to others)"),
		certFile:       fs.String("tls-cert", "", "peer server certificate (PEM; default: an ephemeral key named in the lock record)"),
		keyFile:        fs.String("tls-key", "", "peer server key (PEM)"),
		caFile:         fs.String("tls-ca", "", "CA certificates that sign the peers' server certificates (PEM; default: system roots)"),
		clientCAFile:   fs.String("tls-client-ca", "", "require peer client certificates signed by these CAs (PEM)"),
		clientCertFile: fs.String("tls-client-cert", "", "client certificate to present to peers (PEM)"),
		clientKeyFile:  fs.String("tls-client-key", "", "key of --tls-client-cert (PEM)"),
		frequent:       fs.Duration("frequent", 0, "FrequentInterval: polling during transitions, and the leader's renewal interval (default 5s, or --renew-deadline/2 if less)"),
		infrequent:     fs.Duration("infrequent", 0, "InfrequentInterval: the longest pause between reads while leadership is stable (default 30s)"),
		timeout:        fs.Duration("leader-timeout", election.DefaultLeaderTimeout, "LeaderTimeout: take the lock when it has not changed for this long"),
		deadline:       fs.Duration("renew-deadline", 0, "RenewDeadline: stop leading this long after the last successful renewal began (default 2/3 of --leader-timeout)"),
		peerTimeout:    fs.Duration("peer-timeout", election.DefaultPeerTimeout, "PeerTimeout: bound on each peer request"),
		priority:       fs.Int("priority", 0, "Priority: a live member above the leader's priority asks it to hand over"),
		retry:          fs.String("retry", "0,100ms,1s", "RetrySchedule: pauses before each attempt of a store call, comma-separated"),
		logFormat:      fs.String("log-format", "text", "log format: text or json"),
		logLevel:       fs.String("log-level", "info", "log level: debug, info, warn or error"),
	}
}

func (f *electFlags) logger(e *env) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	switch *f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(e.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", *f.logFormat)
}

// durationText writes durations as Go writes them ("2.249s"), not as
// nanoseconds, which is what the JSON handler would write.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// config builds the election configuration, without its store, and
// returns the URL of the store the lock lives in.
func (f *electFlags) config(e *env) (cfg election.Config, storeURL string, err error) {
	if *f.lock == "" {
		return election.Config{}, "", fmt.Errorf("--lock is required, e.g. --lock file://./data/leader.json")
	}
	storeURL, key, err := store.SplitKeyURL(*f.lock)
	if err != nil {
		return election.Config{}, "", err
	}
	log, err := f.logger(e)
	if err != nil {
		return election.Config{}, "", err
	}
	var retry []time.Duration
	for _, part := range strings.Split(*f.retry, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return election.Config{}, "", fmt.Errorf("--retry %q: %q is not a duration (want e.g. 0,100ms,1s)", *f.retry, part)
		}
		retry = append(retry, d)
	}
	// The peer server listens where --advertise says (a loopback address
	// stays on loopback), unless --peer-listen says otherwise: ":PORT" for
	// every interface, as behind NAT, where the address others dial is
	// not one this host has.
	for _, a := range []struct{ flag, addr string }{{"--advertise", *f.addr}, {"--peer-listen", *f.listen}} {
		if err := checkHostPort(a.flag, a.addr); err != nil {
			return election.Config{}, "", err
		}
	}
	listen := *f.listen
	if listen == "" && *f.addr != "" && !*f.noPeer {
		listen = *f.addr
	}
	if *f.deadline == 0 {
		// The renew deadline follows --leader-timeout: say which flag
		// to change, rather than the rule on the derived deadline.
		var budget time.Duration
		for _, d := range retry {
			budget += d
		}
		if *f.timeout > 0 && *f.timeout*2/3 <= budget {
			return election.Config{}, "", fmt.Errorf("--leader-timeout %v: too short for --retry %s: the renew deadline, 2/3 of it unless --renew-deadline is given, must exceed the retry pauses (%v); give more than %v, or a shorter --retry",
				*f.timeout, *f.retry, budget, budget*3/2)
		}
	}
	cfg = election.Config{
		RetrySchedule: retry,
		LockfilePath:  key, ServerID: *f.id, ServerAddr: *f.addr, PeerListenAddr: listen,
		FrequentInterval: *f.frequent, InfrequentInterval: *f.infrequent,
		LeaderTimeout: *f.timeout, RenewDeadline: *f.deadline, PeerTimeout: *f.peerTimeout,
		PeerMode: *f.peer, PeerDisabled: *f.noPeer, Priority: *f.priority, Logger: log,
	}
	if *f.certFile != "" || *f.keyFile != "" {
		if cfg.PeerServerTLS, err = tlsutil.LoadServer(*f.certFile, *f.keyFile, *f.clientCAFile); err != nil {
			return election.Config{}, "", err
		}
	}
	if *f.caFile != "" || *f.clientCertFile != "" {
		if cfg.PeerClientTLS, err = tlsutil.LoadClient(*f.caFile, *f.clientCertFile, *f.clientKeyFile); err != nil {
			return election.Config{}, "", err
		}
	}
	// Validate before touching the store, so a bad flag costs nothing.
	probe := cfg
	probe.StoreURL = storeURL
	if err := probe.Validate(); err != nil {
		var ve *election.ValidationError
		if errors.As(err, &ve) {
			return election.Config{}, "", errors.New(strings.Join(flagProblems(ve.Problems), "; "))
		}
		return election.Config{}, "", err
	}
	if err := refuseMemStore("--lock", *f.lock); err != nil {
		return election.Config{}, "", err
	}
	return cfg, storeURL, nil
}

// checkPeerListen tries the peer server's address before the member
// starts, so that a failure is told in the command's flags: with
// --require-peer the command fails; otherwise the member runs store-only,
// as with --no-peer, and a warning says so. (The port is free again by the
// time the member listens; should another process take it meanwhile, the
// member reports that as it starts.)
func (f *electFlags) checkPeerListen(cfg *election.Config) error {
	if cfg.ServerAddr == "" || cfg.PeerDisabled {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.PeerListenAddr)
	if err == nil {
		return ln.Close()
	}
	which := "--advertise"
	if *f.listen != "" {
		which = "--peer-listen"
	}
	const hint = "give --peer-listen :PORT to listen on every interface, or --no-peer if --advertise is only shown to others"
	if cfg.PeerMode {
		return fmt.Errorf("%s %s: the peer server cannot listen there (%v), and --require-peer forbids running store-only; %s", which, cfg.PeerListenAddr, err, hint)
	}
	cfg.Logger.Warn("the peer server cannot listen; running store-only, as with --no-peer", "flag", which, "addr", cfg.PeerListenAddr, "err", err, "hint", hint)
	cfg.PeerDisabled = true
	return nil
}

// electFlagNames are the flags that set the Config fields Validate names.
var electFlagNames = strings.NewReplacer(
	"InfrequentInterval", "--infrequent", "FrequentInterval", "--frequent",
	"LeaderTimeout", "--leader-timeout", "RenewDeadline", "--renew-deadline",
	"PeerTimeout", "--peer-timeout", "RetrySchedule", "--retry",
	"PeerDisabled", "--no-peer", "PeerMode", "--require-peer",
	"ServerAddr", "--advertise", "ServerID", "--id", "LockfilePath", "the key of --lock",
	"Priority", "--priority",
)

// flagProblems words the election's configuration problems in the
// command's flags.
func flagProblems(problems []string) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = electFlagNames.Replace(p)
	}
	return out
}

// checkHostPort refuses an address that is not host:port with a port
// from 0 to 65535 (peers dial it in a URL, where a service name is no
// port).
func checkHostPort(flagName, addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("%s %q: want host:port, with a port from 0 to 65535", flagName, addr)
	}
	return nil
}

// refuseMemStore refuses a mem:// store to a command that runs one member
// in a process of its own: each process has its own memory, so members
// started as separate processes would each see a lock of their own, and
// every one of them would lead.
func refuseMemStore(flagName, storeURL string) error {
	if u, err := url.Parse(storeURL); err == nil && u.Scheme == "mem" {
		return fmt.Errorf("%s %s: a mem:// store lives inside one process, so members in other processes would each lead on a store of their own; use file:///dir for members on one machine, or a store they share", flagName, storeURL)
	}
	return nil
}

// openStore opens the store at storeURL for an election member and checks
// it, retrying while it does not answer (o reports it not ready
// meanwhile); a permanent error is returned at once. Its calls feed o's
// store health and observer. The caller closes the returned store; the
// member need not probe it again (election.Config.SkipProbe).
func openStore(ctx context.Context, log *slog.Logger, o *opsserver.State, storeURL string, observer func(store.Call)) (*store.Store, error) {
	opts := []store.Option{store.WithLogger(log), store.WithObserver(func(c store.Call) {
		o.Health().Observe(c)
		if observer != nil {
			observer(c)
		}
	})}
	var st *store.Store
	err := opsserver.ConnectStore(ctx, log, o, func(ctx context.Context) error {
		var err error
		st, err = opsserver.OpenProbed(ctx, storeURL, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
