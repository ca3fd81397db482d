package main

import (
	"context"
	"errors"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/opsserver"
)

// electMetrics are the Prometheus metrics of one election member: the
// election package's (through Config.Registerer) and the store's.
type electMetrics struct {
	reg   *prometheus.Registry
	store *opsserver.StoreMetrics
}

func newElectMetrics() *electMetrics {
	m := &electMetrics{reg: prometheus.NewRegistry(), store: opsserver.NewStoreMetrics()}
	m.reg.MustRegister(m.store.Collectors()...)
	m.reg.MustRegister(opsserver.ProcessCollectors()...)
	return m
}

func runElect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "elect", "elect --lock URL [--id ID] [--advertise HOST:PORT [--tls-cert F --tls-key F ...] | --no-peer] [--http ADDR]\n\n"+
		"Takes part in an election. --http serves /livez (200 while the process runs), /readyz (200 while\n"+
		"this member leads or follows a known leader, else 503 with the reason; /healthz is an alias),\n"+
		"/status (JSON) and /metrics (Prometheus). A store that cannot be reached at start is retried\n"+
		"(not ready meanwhile); a permanent store error (missing bucket, refused credentials, bad URL)\n"+
		"exits. SIGINT or SIGTERM releases the lock and exits.")
	ef := addElectFlags(fs)
	httpAddr := fs.String("http", "127.0.0.1:9464", "serve /livez, /readyz, /status and /metrics here; empty to disable")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
	}
	cfg, storeURL, err := ef.config(e)
	if err != nil {
		return err
	}
	warnDeprecated(fs, cfg.Logger)
	if err := ef.checkPeerListen(&cfg); err != nil {
		return err
	}
	metrics := newElectMetrics()
	ops := opsserver.NewState("elect", cfg.ServerID)
	defer context.AfterFunc(ctx, func() { ops.SetStopping() })()
	if *httpAddr != "" {
		mux := opsserver.Mux(ops.Status, metrics.reg)
		stop, err := serveOps(*httpAddr, mux, cfg.Logger)
		if err != nil && !flagGiven(fs, "http") && errors.Is(err, syscall.EADDRINUSE) {
			// The default port, taken: most likely by another member on
			// this host. A second member needs nothing but its own --id.
			cfg.Logger.Warn("the default --http address is taken, by another member on this host perhaps; serving on a free port (set --http to choose one)", "default", *httpAddr)
			stop, err = serveOps("127.0.0.1:0", mux, cfg.Logger)
		}
		if err != nil {
			return err
		}
		defer stop()
	}
	st, err := openStore(ctx, cfg.Logger, ops, storeURL, metrics.store.Observe)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	cfg.Store, cfg.SkipProbe, cfg.Registerer = st, true, metrics.reg
	cfg.OnNewLeader = func(id, addr string, term uint64) {
		cfg.Logger.Info("leader", "leaderID", id, "leaderAddr", addr, "term", term)
	}
	member, err := election.New(ctx, cfg)
	if err != nil {
		return err
	}
	ops.Running(electionView(member))
	cfg.Logger.Info("taking part in the election", "lock", *ef.lock, "id", cfg.ServerID, "addr", cfg.ServerAddr, "peer", cfg.ServerAddr != "" && !cfg.PeerDisabled)
	err = member.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	cfg.Logger.Info("stopped")
	return nil
}
