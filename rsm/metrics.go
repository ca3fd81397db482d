package rsm

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are S2C's metric families in Prometheus form, labelled by group.
// The comment on each names S2C's metric.
type metrics struct {
	leaderUpdate   *prometheus.HistogramVec // update.leader.latency
	leaderCheck    *prometheus.HistogramVec // check.leader.latency
	leaderAttempt  *prometheus.HistogramVec // attempt.leader.latency
	catchUp        *prometheus.HistogramVec // catchup.leader.latency
	join           *prometheus.HistogramVec // s2c.node.join.latency
	activeClients  prometheus.Gauge         // active.s2c.clients.count, s2c.group.server.active.clients
	synchronizers  *prometheus.GaugeVec     // s2c.synchronizers.count
	logAppend      *prometheus.HistogramVec // s2c.log.append.latency
	logTruncate    *prometheus.HistogramVec // s2c.log.truncate.latency
	logReads       *prometheus.CounterVec   // s2c.log.read.count
	logCacheMiss   *prometheus.CounterVec   // s2c.log.cache.miss
	logAppendFail  *prometheus.CounterVec   // s2c.log.append{outcome}
	handle         *prometheus.HistogramVec // state.request.handle.latency
	application    *prometheus.HistogramVec // state.request.application.latency
	committed      *prometheus.CounterVec   // state.request.committed.batches.count
	handledBatches *prometheus.CounterVec   // state.request.handled.batches.count
	handled        *prometheus.CounterVec   // handled.state.requests{outcome}
	follows        *prometheus.CounterVec   // handled.follow.requests
	syncs          *prometheus.CounterVec   // handled.synch.requests
	concurrent     *prometheus.GaugeVec     // concurrent.state.request.handling
	submit         *prometheus.HistogramVec // state.request.submit.latency
	snapshotUpload *prometheus.HistogramVec // snapshot.upload.latency
	snapshotLoad   *prometheus.HistogramVec // snapshot.download.latency
	ioErrors       prometheus.Counter       // s2c.server.io.errors.count
	handshake      prometheus.Histogram     // s2c.server.handshake.latency
	badHandshakes  prometheus.Counter       // s2c.server.invalid.handshakes.count
	unknownGroup   prometheus.Counter       // s2c.clients.with.unknown.group.count
	serverReady    prometheus.Gauge         // s2c.server.ready
	backpressure   prometheus.Histogram     // responses.enqueue.backpressure
	corrupt        *prometheus.CounterVec   // corrupt objects seen, by key kind
	confirmReads   *prometheus.CounterVec   // leader_state reads confirming a round
	refused        *prometheus.GaugeVec     // 1 while the node refuses to lead or serve, by object kind
	role           *prometheus.GaugeVec     // 0 joining, 1 follower, 2 leader
	term           *prometheus.GaugeVec
	applyIndex     *prometheus.GaugeVec
	snapBase       *prometheus.GaugeVec // the stored snapshot's base, as this node last loaded or wrote it
	snapSegs       *prometheus.GaugeVec // and its segments
}

func newMetrics(reg prometheus.Registerer, node string) (*metrics, error) {
	g := []string{"group"}
	// The node label keeps several hosts in one process apart on one registry.
	cl := prometheus.Labels{"node": node}
	h := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tenure", Subsystem: "rsm", Name: name, Help: help, ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, append(g, labels...))
	}
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "rsm", Name: name, Help: help, ConstLabels: cl}, append(g, labels...))
	}
	gv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Subsystem: "rsm", Name: name, Help: help, ConstLabels: cl}, g)
	}
	m := &metrics{
		leaderUpdate:   h("leader_update_seconds", "Writes of leader_state.json (leadership and membership changes)."),
		leaderCheck:    h("leader_check_seconds", "Reads of leader_state.json that confirm a round or check the leader."),
		leaderAttempt:  h("leader_attempt_seconds", "Leadership attempts, from the write of leader_state.json to serving."),
		catchUp:        h("catchup_seconds", "Catch-ups from the store's snapshot and log."),
		join:           h("join_seconds", "From JOINING to JOINED."),
		activeClients:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tenure", Subsystem: "rsm", Name: "active_clients", Help: "Connected request streams from other nodes.", ConstLabels: cl}),
		synchronizers:  gv("synchronizers", "Follower synchronizers running on this leader."),
		logAppend:      h("log_append_seconds", "Create-if-absent writes of log entries."),
		logTruncate:    h("log_truncate_seconds", "Log truncations after a snapshot."),
		logReads:       c("log_reads_total", "Log entries read from the store."),
		logCacheMiss:   c("log_cache_misses_total", "Entries a synchronizer had to read from the store."),
		logAppendFail:  c("log_append_failures_total", "Log writes that did not land as ours.", "outcome"),
		handle:         h("request_handle_seconds", "Leader-side handling of a state request.", "type"),
		application:    h("request_application_seconds", "Time in the user's state machines per batch.", "type"),
		committed:      c("committed_batches_total", "Batches committed to the log."),
		handledBatches: c("handled_batches_total", "Batches handled.", "type"),
		handled:        c("handled_requests_total", "State requests handled by the leader.", "type", "outcome"),
		follows:        c("follow_requests_total", "Follow requests handled.", "outcome"),
		syncs:          c("synchronize_requests_total", "Synchronize requests handled.", "outcome"),
		concurrent:     gv("concurrent_requests", "State requests being handled by this leader."),
		submit:         h("request_submit_seconds", "End-to-end latency of Command and Read on this node.", "type"),
		snapshotUpload: h("snapshot_upload_seconds", "Snapshot writes."),
		snapshotLoad:   h("snapshot_download_seconds", "Snapshot reads and restores."),
		ioErrors:       prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "rsm", Name: "server_io_errors_total", Help: "RPC stream errors on the server.", ConstLabels: cl}),
		handshake: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "tenure", Subsystem: "rsm", Name: "handshake_seconds", Help: "Handshakes with other nodes.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		badHandshakes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "rsm", Name: "invalid_handshakes_total", Help: "Handshakes refused.", ConstLabels: cl}),
		unknownGroup:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "rsm", Name: "unknown_group_requests_total", Help: "Requests naming a group this host does not serve.", ConstLabels: cl}),
		serverReady:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tenure", Subsystem: "rsm", Name: "server_ready", Help: "1 while the RPC server serves.", ConstLabels: cl}),
		backpressure: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "tenure", Subsystem: "rsm", Name: "backpressure_seconds", Help: "Time a request stream waited for room.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		corrupt:      c("corrupt_objects_total", "Objects in the store that failed their checksum, did not decode, or that the store reported damaged.", "object"),
		confirmReads: c("confirm_reads_total", "Reads of leader_state.json that confirmed a round."),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tenure", Subsystem: "rsm", Name: "refused", ConstLabels: cl,
			Help: "1 while the node refuses to lead or serve because an object in the store is corrupt or missing, or leader_state.json shows another process using this node's ID (Status.Problem names it)."}, []string{"group", "object"}),
		role:       gv("role", "0 joining, 1 follower, 2 leader."),
		term:       gv("term", "The term this node knows."),
		applyIndex: gv("apply_index", "Last log index applied."),
		snapBase: gv("snapshot_base_bytes",
			"Bytes of the base (the whole state at an index) of the snapshot this node last loaded or wrote; a cold start reads it."),
		snapSegs: gv("snapshot_segment_bytes",
			"Bytes of the log segments of the snapshot this node last loaded or wrote, applied after its base; a cold start reads and applies them, and a new base is written once they reach three times the base (1.5 times in a quiet group)."),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.leaderUpdate, m.leaderCheck, m.leaderAttempt, m.catchUp, m.join, m.activeClients,
		m.synchronizers, m.logAppend, m.logTruncate, m.logReads, m.logCacheMiss, m.logAppendFail, m.handle, m.application,
		m.committed, m.handledBatches, m.handled, m.follows, m.syncs, m.concurrent, m.submit, m.snapshotUpload, m.snapshotLoad,
		m.ioErrors, m.handshake, m.badHandshakes, m.unknownGroup, m.serverReady, m.backpressure, m.corrupt, m.confirmReads, m.refused,
		m.role, m.term, m.applyIndex, m.snapBase, m.snapSegs} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("rsm: register metrics of node %q: %w", node, err)
		}
	}
	return m, nil
}
