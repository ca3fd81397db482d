package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

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
	m.reg.MustRegister(m.transitions, m.renew, isLeader, term, problem)
	m.reg.MustRegister(processCollectors()...)
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
	_, lockKey, _ := store.SplitKeyURL(*ef.lock)
	var el atomic.Pointer[election.Elector]
	metrics := newElectMetrics(el.Load)
	ops := newOpsState("elect", cfg.ServerID)
	defer context.AfterFunc(ctx, func() { ops.stopping.Store(true) })()
	if *httpAddr != "" {
		stop, err := serveOps(*httpAddr, opsMux(ops.status, metrics.reg), cfg.Logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	st, err := openStore(ctx, cfg.Logger, ops, storeURL, metrics.observe(lockKey))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	cfg.Store, cfg.SkipProbe = st, true
	cfg.OnStartedLeading = func(ctx context.Context) {
		metrics.transitions.WithLabelValues("started").Inc()
		<-ctx.Done()
	}
	cfg.OnStoppedLeading = func() { metrics.transitions.WithLabelValues("stopped").Inc() }
	cfg.OnNewLeader = func(id, addr string, term uint64) {
		cfg.Logger.Info("leader", "leaderID", id, "leaderAddr", addr, "term", term)
	}
	member, err := election.New(ctx, cfg)
	if err != nil {
		return err
	}
	el.Store(member)
	ops.running(electionView(member))
	cfg.Logger.Info("taking part in the election", "lock", *ef.lock, "id", cfg.ServerID, "addr", cfg.ServerAddr, "peer", cfg.ServerAddr != "" && !cfg.PeerDisabled)
	err = member.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	cfg.Logger.Info("stopped")
	return nil
}
