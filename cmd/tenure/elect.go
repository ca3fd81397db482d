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
	"github.com/tenure-io/tenure/store/driver"
)

// electMetrics are the Prometheus metrics of one election member.
type electMetrics struct {
	reg         *prometheus.Registry
	transitions *prometheus.CounterVec
	store       *storeMetrics
	renew       prometheus.Histogram
}

func newElectMetrics(e func() *election.Elector) *electMetrics {
	m := &electMetrics{reg: prometheus.NewRegistry(), store: newStoreMetrics()}
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_election_transitions_total", Help: "Leadership transitions of this member, by kind (started, stopped).",
	}, []string{"kind"})
	m.renew = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tenure_election_renew_duration_seconds", Help: "Latency of successful compare-and-swap writes of the lock (renewals and acquisitions).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	isLeader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenure_election_is_leader", Help: "1 while this member leads, computed against its renew deadline at scrape time.",
	}, func() float64 {
		if el := e(); el != nil && el.IsLeader() {
			return 1
		}
		return 0
	})
	term := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenure_election_term", Help: "This member's term while it leads, else the highest term it has seen.",
	}, func() float64 {
		if el := e(); el != nil {
			return float64(el.Term())
		}
		return 0
	})
	problem := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenure_election_record_problem", Help: "1 while the lock record cannot be taken over (its term cannot be read, or is at its maximum): repair it with tenure lock repair.",
	}, func() float64 {
		if el := e(); el != nil && el.Status().RecordProblem != "" {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(m.store.collectors()...)
	m.reg.MustRegister(m.transitions, m.renew, isLeader, term, problem,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe is the store observer feeding the request metrics.
func (m *electMetrics) observe(lockKey string) func(store.Call) {
	return func(c store.Call) {
		m.store.observe(c)
		if c.Op == "put" && c.Cond == driver.IfMatch && c.Key == lockKey && c.Err == nil {
			m.renew.Observe(c.Duration.Seconds())
		}
	}
}

func runElect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "elect", "elect --lock URL [--id ID] [--http ADDR] [--peer --addr HOST:PORT --tls-cert F --tls-key F ...]")
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
	_, lockKey, err := store.SplitKeyURL(*ef.lock)
	if err != nil && *ef.lock != "" {
		return err
	}
	metrics := newElectMetrics(func() *election.Elector { return el })
	cfg, st, err := ef.config(ctx, e, metrics.observe(lockKey))
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.OnStartedLeading = func(ctx context.Context) {
		metrics.transitions.WithLabelValues("started").Inc()
		<-ctx.Done()
	}
	cfg.OnStoppedLeading = func() { metrics.transitions.WithLabelValues("stopped").Inc() }
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
	cfg.Logger.Info("taking part in the election", "lock", *ef.lock, "id", cfg.ServerID, "peer", cfg.PeerMode)
	err = el.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	cfg.Logger.Info("stopped")
	return nil
}
