package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
)

// electMetrics are the Prometheus metrics of one election member: the
// election package's (through Config.Registerer) and the store's.
type electMetrics struct {
	reg   *prometheus.Registry
	store *storeMetrics
}

func newElectMetrics() *electMetrics {
	m := &electMetrics{reg: prometheus.NewRegistry(), store: newStoreMetrics()}
	m.reg.MustRegister(m.store.collectors()...)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func runElect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "elect", "elect --lock URL [--id ID] [--addr HOST:PORT [--tls-cert F --tls-key F ...] | --no-peer] [--http ADDR]")
	ef := addElectFlags(fs)
	httpAddr := fs.String("http", "127.0.0.1:9464", "serve /metrics (Prometheus) and /healthz here; empty to disable")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
	}
	var el *election.Elector
	_, _, err = store.SplitKeyURL(*ef.lock)
	if err != nil && *ef.lock != "" {
		return err
	}
	metrics := newElectMetrics()
	cfg, st, err := ef.config(ctx, e, metrics.store.observe)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.Registerer = metrics.reg
	cfg.OnNewLeader = func(id, addr string, term uint64) {
		cfg.Logger.Info("leader", "leaderID", id, "leaderAddr", addr, "term", term)
	}
	el, err = election.New(ctx, cfg)
	if err != nil {
		return err
	}

	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", *httpAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(el.Status())
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		cfg.Logger.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	}
	cfg.Logger.Info("taking part in the election", "lock", *ef.lock, "id", cfg.ServerID, "addr", cfg.ServerAddr, "peer", cfg.ServerAddr != "" && !cfg.PeerDisabled)
	err = el.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	cfg.Logger.Info("stopped")
	return nil
}
