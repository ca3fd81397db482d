package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
)

// tenure bench rsm measures the replicated state machine against the store
// it runs on, in one process and one run. For each injected round-trip
// latency it first times the store's own sequential create-if-absent puts
// (the reference: one log write costs one of them), then runs one group on
// that store for each batch size and pipeline depth, with client goroutines
// issuing commands to a counter on the leader for --duration. The store is
// wrapped in a faultstore, which adds the latency before every call and
// counts every call; the group's own metrics give the committed batches and
// the confirmation reads.

// rsmStoreRef is the store's own conditional-put latency and rate.
type rsmStoreRef struct {
	Latency   time.Duration `json:"latencyNanos"`
	Ops       int           `json:"ops"`
	P50       time.Duration `json:"p50Nanos"`
	P99       time.Duration `json:"p99Nanos"`
	OpsPerSec float64       `json:"opsPerSecond"`
}

// rsmCase is one run of the group: one latency, batch size and depth.
type rsmCase struct {
	Latency  time.Duration `json:"latencyNanos"`
	Batch    int           `json:"batch"`
	Pipeline int           `json:"pipeline"`
	Clients  int           `json:"clients"`
	Window   time.Duration `json:"windowNanos"`
	// Commands were acknowledged within the window; their latencies give
	// P50 and P99.
	Commands       int64         `json:"commands"`
	CommandsPerSec float64       `json:"commandsPerSecond"`
	P50            time.Duration `json:"p50Nanos"`
	P99            time.Duration `json:"p99Nanos"`
	// Acked counts every acknowledged command, including those of the
	// drain after the window (each client finishes the command it has in
	// flight). The store requests below cover the window and the drain,
	// so they divide by Acked and by Batches exactly.
	Acked  int64 `json:"acked"`
	Failed int64 `json:"failed"`
	// Applied is the leader's counter after the drain: one per applied
	// command, the warm-up's included.
	Applied uint64 `json:"applied"`
	// Batches are committed batches and Rounds confirmation reads of
	// leader_state.json, from the group's metrics.
	Batches          int64   `json:"batches"`
	Rounds           int64   `json:"confirmRounds"`
	CommandsPerBatch float64 `json:"commandsPerBatch"`
	BatchesPerRound  float64 `json:"batchesPerRound"`
	// LogPuts are create-if-absent puts of log entries and
	// LeaderStateGets reads of leader_state.json, counted by the wrapper.
	LogPuts         int64              `json:"logPuts"`
	LeaderStateGets int64              `json:"leaderStateGets"`
	Requests        map[string]int64   `json:"requests"`           // by faultstore op
	PerCommand      map[string]float64 `json:"requestsPerCommand"` // PUT, GET, LIST, DELETE
	// AppendMean is the mean time of a log write (the create, with its
	// retries), ConfirmMean of a confirmation read, from the metrics.
	AppendMean  time.Duration `json:"appendMeanNanos"`
	ConfirmMean time.Duration `json:"confirmMeanNanos"`
	// LatencyRatio is P50 over the store's create-if-absent p50 at the same
	// latency; RateRatio is CommandsPerSec over its sequential put rate.
	LatencyRatio float64 `json:"p50OverStorePutP50"`
	RateRatio    float64 `json:"rateOverStorePutRate"`
	CPUPerSec    float64 `json:"cpuSecondsPerSecond"`
}

// rsmSpeedup compares the deepest pipeline with one batch at a time.
type rsmSpeedup struct {
	Latency  time.Duration `json:"latencyNanos"`
	Batch    int           `json:"batch"`
	Pipeline int           `json:"pipeline"`
	Base     float64       `json:"p1CommandsPerSecond"`
	Rate     float64       `json:"commandsPerSecond"`
	Ratio    float64       `json:"ratio"`
}

// RSMResult is what the replicated-state-machine benchmark measured.
type RSMResult struct {
	Store      string        `json:"store"`
	Nodes      int           `json:"nodes"`
	Duration   time.Duration `json:"durationNanos"`
	Flush      time.Duration `json:"flushIntervalNanos"`
	Snapshot   int           `json:"snapshotThreshold"`
	Clients    string        `json:"clients"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	// LoadBefore and LoadAfter are /proc/loadavg at the start and the
	// end (Linux): other work on the machine shows in the tails.
	LoadBefore string        `json:"loadavgBefore,omitempty"`
	LoadAfter  string        `json:"loadavgAfter,omitempty"`
	Refs       []rsmStoreRef `json:"storePuts"`
	Cases      []rsmCase     `json:"cases"`
	Speedups   []rsmSpeedup  `json:"speedups"`
}

// RSMConfig is a run of the replicated-state-machine benchmark.
type RSMConfig struct {
	Store     string          // the store URL
	Latencies []time.Duration // round-trip latencies to inject, added before every store call
	Batches   []int           // batch sizes (BatchMinCount)
	Pipelines []int           // pipeline depths (PipelineDepth)
	Clients   int             // client goroutines; 0: 2 × batch × pipeline
	Duration  time.Duration   // how long the clients submit commands, per case
	// RefDuration is how long the store's own puts are timed, per latency.
	RefDuration time.Duration
	Nodes       int           // nodes in the group, 1 to 5
	Flush       time.Duration // FlushInterval
	Snapshot    int           // SnapshotThreshold; 0: the library's
	Verbose     bool          // log the nodes at info level, not only warnings
	Stderr      io.Writer     // progress and the nodes' log
}

// rsmRun is a run of RSM: its configuration, its log and its progress.
type rsmRun struct {
	RSMConfig
	log      *slog.Logger
	progress func(format string, args ...any)
}

// RSM runs the replicated-state-machine benchmark, in this process: for
// each latency, the store's own puts, then one group for each batch size
// and pipeline depth.
func RSM(ctx context.Context, c RSMConfig) (*RSMResult, error) {
	level := slog.LevelWarn
	if c.Verbose {
		level = slog.LevelInfo
	}
	stderr := &syncWriter{w: c.Stderr}
	cfg := rsmRun{RSMConfig: c, log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		progress: func(format string, args ...any) { fmt.Fprintf(stderr, "tenure bench rsm: "+format+"\n", args...) }}
	return benchRSM(ctx, cfg)
}

// rsmTally counts the calls that the exactness checks need, by key.
type rsmTally struct {
	logPuts, lsGets atomic.Int64
}

func (t *rsmTally) observe(c faultstore.Call) {
	switch {
	case c.Op == faultstore.OpPutCreate && strings.Contains(c.Key, "/log/"):
		t.logPuts.Add(1)
	case c.Op == faultstore.OpGet && strings.HasSuffix(c.Key, "/leader_state.json"):
		t.lsGets.Add(1)
	}
}

func benchRSM(ctx context.Context, cfg rsmRun) (*RSMResult, error) {
	base, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	// The fault store owns the driver; closing st closes both.
	fst := faultstore.New(base.Driver())
	st := store.New(fst)
	defer st.Close()
	var tally rsmTally
	fst.SetObserver(tally.observe)

	// Refuse a store that ignores conditions, as rsm.NewHost would; the
	// hosts then skip their own probe.
	if res, err := store.Probe(ctx, st, 1); err != nil {
		return nil, fmt.Errorf("store probe: %w", err)
	} else if !res.OK() {
		return nil, fmt.Errorf("the store does not honour conditional writes")
	}

	run := "bench-rsm-" + strings.ToLower(rand.Text()[:8])
	res := &RSMResult{Store: cfg.Store, Nodes: cfg.Nodes, Duration: cfg.Duration, Flush: cfg.Flush,
		Snapshot: cfg.Snapshot, Clients: "2 × batch × pipeline", GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if cfg.Clients > 0 {
		res.Clients = strconv.Itoa(cfg.Clients)
	}
	if res.Snapshot == 0 {
		res.Snapshot = rsm.DefaultSnapshotThreshold
	}
	res.LoadBefore = loadAvg()
	defer func() { res.LoadAfter = loadAvg() }()
	for li, lat := range cfg.Latencies {
		latency := faultstore.Fixed(lat)
		fst.SetLatency(faultstore.AllOps, latency)
		ref, err := benchStorePuts(ctx, st, fmt.Sprintf("%s-ref%d", run, li), cfg.RefDuration)
		// The scratch keys go without the injected latency.
		fst.SetLatency(faultstore.AllOps, nil)
		cleanupPrefix(st, fmt.Sprintf("%s-ref%d/", run, li))
		if err != nil {
			return nil, fmt.Errorf("store puts at latency %v: %w", lat, err)
		}
		ref.Latency = lat
		res.Refs = append(res.Refs, ref)
		cfg.progress("latency %v: store create-if-absent put p50 %v, p99 %v, %.1f/s sequential (%d puts)",
			lat, roundDur(ref.P50), roundDur(ref.P99), ref.OpsPerSec, ref.Ops)
		for _, b := range cfg.Batches {
			for _, p := range cfg.Pipelines {
				group := fmt.Sprintf("%s-l%d-b%d-p%d", run, li, b, p)
				fst.SetLatency(faultstore.AllOps, latency)
				c, err := benchRSMCase(ctx, cfg, st, fst, &tally, group, b, p)
				fst.SetLatency(faultstore.AllOps, nil)
				cleanupPrefix(st, group+"/")
				if err != nil {
					return nil, fmt.Errorf("latency %v, batch %d, pipeline %d: %w", lat, b, p, err)
				}
				c.Latency = lat
				if ref.P50 > 0 {
					c.LatencyRatio = float64(c.P50) / float64(ref.P50)
				}
				if ref.OpsPerSec > 0 {
					c.RateRatio = c.CommandsPerSec / ref.OpsPerSec
				}
				res.Cases = append(res.Cases, c)
				cfg.progress("latency %v, batch %d, pipeline %d, %d clients: %.0f commands/s, p50 %v, p99 %v, %.1f commands/batch, %.2f puts/command",
					lat, b, p, c.Clients, c.CommandsPerSec, roundDur(c.P50), roundDur(c.P99), c.CommandsPerBatch, c.PerCommand["PUT"])
			}
		}
	}
	res.Speedups = rsmSpeedups(res.Cases)
	return res, nil
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// rsmSpeedups compares, for each latency and batch size, the deepest
// pipeline measured with depth 1.
func rsmSpeedups(cases []rsmCase) []rsmSpeedup {
	var out []rsmSpeedup
	for _, c := range cases {
		if c.Pipeline != 1 {
			continue
		}
		var deepest *rsmCase
		for i := range cases {
			d := &cases[i]
			if d.Latency == c.Latency && d.Batch == c.Batch && d.Pipeline > 1 && (deepest == nil || d.Pipeline > deepest.Pipeline) {
				deepest = d
			}
		}
		if deepest == nil || c.CommandsPerSec == 0 {
			continue
		}
		out = append(out, rsmSpeedup{Latency: c.Latency, Batch: c.Batch, Pipeline: deepest.Pipeline, Base: c.CommandsPerSec,
			Rate: deepest.CommandsPerSec, Ratio: deepest.CommandsPerSec / c.CommandsPerSec})
	}
	return out
}

// maxRefPuts bounds the reference puts on a fast store, whose keys the
// bench then has to delete.
const maxRefPuts = 5000

// benchStorePuts times sequential create-if-absent puts of small objects
// under prefix for d (at least 20 of them, at most maxRefPuts).
func benchStorePuts(ctx context.Context, st *store.Store, prefix string, d time.Duration) (rsmStoreRef, error) {
	var ref rsmStoreRef
	data := make([]byte, 64)
	var ds []time.Duration
	start := time.Now()
	for i := 0; i < 20 || (time.Since(start) < d && i < maxRefPuts); i++ {
		if err := ctx.Err(); err != nil {
			return ref, err
		}
		t := time.Now()
		if _, err := st.Put(ctx, fmt.Sprintf("%s/put-%06d", prefix, i), data, store.IfAbsent()); err != nil {
			return ref, err
		}
		ds = append(ds, time.Since(t))
	}
	elapsed := time.Since(start)
	slices.Sort(ds)
	ref.Ops, ref.P50, ref.P99 = len(ds), percentile(ds, 0.50), percentile(ds, 0.99)
	ref.OpsPerSec = float64(len(ds)) / elapsed.Seconds()
	return ref, nil
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// cleanupPrefix deletes every key under prefix, best effort: the bench
// leaves the store as it found it (but for the directories file:// keeps).
func cleanupPrefix(st *store.Store, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		items, err := st.List(ctx, prefix, "", 1000)
		if err != nil || len(items) == 0 {
			return
		}
		for _, it := range items {
			if err := st.Delete(ctx, it.Key, store.Cond{}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return
			}
		}
	}
}

// benchCounter is the state machine: every command adds one and returns
// the new count, 8 bytes.
type benchCounter struct {
	mu sync.Mutex
	n  uint64
}

func (c *benchCounter) Apply([]byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return binary.BigEndian.AppendUint64(nil, c.n)
}

func (c *benchCounter) Query([]byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, c.value()), nil
}

func (c *benchCounter) value() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *benchCounter) Snapshot(w io.Writer) error {
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, c.value()))
	return err
}

func (c *benchCounter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var n uint64
	switch len(b) {
	case 0: // the empty machine's state, before its first snapshot
	case 8:
		n = binary.BigEndian.Uint64(b)
	default:
		return fmt.Errorf("counter: a snapshot of %d bytes, want 8", len(b))
	}
	c.mu.Lock()
	c.n = n
	c.mu.Unlock()
	return nil
}

// rsmGroup is one group on cfg.Nodes hosts sharing one store.
type rsmGroup struct {
	hosts    []*rsm.Host
	nodes    []*rsm.Node
	machines []*benchCounter
	regs     []*prometheus.Registry
	leader   int
}

func (g *rsmGroup) close() {
	for _, h := range g.hosts {
		_ = h.Close()
	}
}

func startRSMGroup(ctx context.Context, cfg rsmRun, st *store.Store, group string, opts rsm.Options) (*rsmGroup, error) {
	g := &rsmGroup{leader: -1}
	for i := range cfg.Nodes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			g.close()
			return nil, err
		}
		id := "n" + strconv.Itoa(i+1)
		reg := prometheus.NewRegistry()
		h, err := rsm.NewHost(ctx, st, rsm.HostConfig{ID: id, Addr: lis.Addr().String(), Listener: lis,
			Logger: cfg.log.With("node", id), Registerer: reg, SkipProbe: true})
		if err != nil {
			lis.Close()
			g.close()
			return nil, err
		}
		g.hosts, g.regs = append(g.hosts, h), append(g.regs, reg)
		m := &benchCounter{}
		n, err := h.Join(ctx, group, map[string]rsm.StateMachine{"counter": m}, opts)
		if err != nil {
			g.close()
			return nil, err
		}
		g.nodes, g.machines = append(g.nodes, n), append(g.machines, m)
	}
	// Wait for one leader whose followers have all registered, so that
	// no membership write falls in the measurement.
	deadline := time.Now().Add(time.Minute)
	for {
		leaders, followers := -1, 0
		for i, n := range g.nodes {
			s := n.Status()
			switch {
			case s.State == rsm.Joined.String() && s.Role == rsm.Leader.String():
				if leaders < 0 && len(s.Followers) == cfg.Nodes-1 {
					leaders = i
				}
			case s.State == rsm.Joined.String() && s.Role == rsm.Follower.String():
				followers++
			}
		}
		if leaders >= 0 && followers == cfg.Nodes-1 {
			g.leader = leaders
			return g, nil
		}
		if time.Now().After(deadline) {
			g.close()
			return nil, errors.New("no leader with every follower registered within a minute")
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			g.close()
			return nil, err
		}
	}
}

// rsmMetrics are the sums of the group's metrics over its hosts.
type rsmMetrics struct {
	batches, rounds                                float64
	appendSum, appendCount, confirmSum, confirmCnt float64
}

func gatherRSMMetrics(regs []*prometheus.Registry) (rsmMetrics, error) {
	var m rsmMetrics
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			return m, err
		}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				switch mf.GetName() {
				case "tenure_rsm_committed_batches_total":
					m.batches += s.GetCounter().GetValue()
				case "tenure_rsm_confirm_reads_total":
					m.rounds += s.GetCounter().GetValue()
				case "tenure_rsm_log_append_seconds":
					m.appendSum += s.GetHistogram().GetSampleSum()
					m.appendCount += float64(s.GetHistogram().GetSampleCount())
				case "tenure_rsm_leader_check_seconds":
					m.confirmSum += s.GetHistogram().GetSampleSum()
					m.confirmCnt += float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return m, nil
}

func meanDur(sum, count float64) time.Duration {
	if count == 0 {
		return 0
	}
	return time.Duration(sum / count * float64(time.Second))
}

func benchRSMCase(ctx context.Context, cfg rsmRun, st *store.Store, fst *faultstore.Store, tally *rsmTally, group string, batch, pipeline int) (rsmCase, error) {
	c := rsmCase{Batch: batch, Pipeline: pipeline, Clients: cfg.Clients}
	if c.Clients == 0 {
		c.Clients = 2 * batch * pipeline
	}
	opts := rsm.Options{
		FlushInterval:         cfg.Flush,
		BatchMinCount:         batch,
		PipelineDepth:         pipeline,
		MaxConcurrentRequests: c.Clients + 16,
		SnapshotThreshold:     cfg.Snapshot,
	}
	g, err := startRSMGroup(ctx, cfg, st, group, opts)
	if err != nil {
		return c, err
	}
	defer g.close()
	leader, machine := g.nodes[g.leader], g.machines[g.leader]
	cmd := binary.BigEndian.AppendUint64(nil, 1)
	// One command before the measurement: the group works end to end.
	if _, err := leader.Command(ctx, "counter", cmd); err != nil {
		return c, fmt.Errorf("first command: %w", err)
	}

	m0, err := gatherRSMMetrics(g.regs)
	if err != nil {
		return c, err
	}
	counts0 := fst.Counts()
	logPuts0, lsGets0 := tally.logPuts.Load(), tally.lsGets.Load()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)

	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var stop atomic.Bool
	var acked, failed atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	lats := make([][]time.Duration, c.Clients)
	var wg sync.WaitGroup
	for i := range c.Clients {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				t := time.Now()
				_, err := leader.Command(ctx, "counter", cmd)
				end := time.Now()
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					if errors.Is(err, rsm.ErrClosed) || sleepCtx(ctx, 10*time.Millisecond) != nil {
						return
					}
					continue
				}
				acked.Add(1)
				if end.Before(deadline) {
					lats[i] = append(lats[i], end.Sub(t))
				}
			}
		})
	}
	serr := sleepCtx(ctx, time.Until(deadline))
	stop.Store(true)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	wg.Wait()
	if serr != nil {
		return c, serr
	}
	c.Window = cfg.Duration
	counts := fst.Counts().Sub(counts0)
	c.LogPuts, c.LeaderStateGets = tally.logPuts.Load()-logPuts0, tally.lsGets.Load()-lsGets0
	m1, err := gatherRSMMetrics(g.regs)
	if err != nil {
		return c, err
	}
	c.Applied = machine.value()

	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	c.Commands = int64(len(all))
	c.CommandsPerSec = float64(c.Commands) / cfg.Duration.Seconds()
	c.P50, c.P99 = percentile(all, 0.50), percentile(all, 0.99)
	c.Acked, c.Failed = acked.Load(), failed.Load()
	if c.Failed > 0 {
		cfg.progress("%s: %d commands failed; the first: %v", group, c.Failed, firstErr)
	}
	c.Batches, c.Rounds = int64(m1.batches-m0.batches), int64(m1.rounds-m0.rounds)
	if c.Acked > 0 && c.Batches == 0 {
		return c, errors.New("the group's metrics show no committed batch (tenure_rsm_committed_batches_total)")
	}
	if c.Batches > 0 {
		c.CommandsPerBatch = float64(c.Acked) / float64(c.Batches)
	}
	if c.Rounds > 0 {
		c.BatchesPerRound = float64(c.Batches) / float64(c.Rounds)
	}
	c.AppendMean = meanDur(m1.appendSum-m0.appendSum, m1.appendCount-m0.appendCount)
	c.ConfirmMean = meanDur(m1.confirmSum-m0.confirmSum, m1.confirmCnt-m0.confirmCnt)
	c.Requests = map[string]int64{}
	for _, op := range []faultstore.Op{faultstore.OpGet, faultstore.OpPutCreate, faultstore.OpPutCAS, faultstore.OpDelete, faultstore.OpList} {
		c.Requests[op.String()] = counts.OpTotal(op)
	}
	c.PerCommand = map[string]float64{}
	if c.Acked > 0 {
		per := func(ops faultstore.Op) float64 { return float64(counts.OpTotal(ops)) / float64(c.Acked) }
		c.PerCommand["PUT"] = per(faultstore.OpPutCreate | faultstore.OpPutCAS)
		c.PerCommand["GET"] = per(faultstore.OpGet)
		c.PerCommand["LIST"] = per(faultstore.OpList)
		c.PerCommand["DELETE"] = per(faultstore.OpDelete)
	}
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime)) +
		time.Duration(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))
	c.CPUPerSec = cpu.Seconds() / cfg.Duration.Seconds()
	return c, nil
}

// Print prints the result as tables.
func (r *RSMResult) Print(w io.Writer) error {
	fmt.Fprintf(w, "tenure bench rsm: %d node(s) in this process, commands submitted on the leader; GOMAXPROCS %d\n", r.Nodes, r.GOMAXPROCS)
	fmt.Fprintf(w, "store     %s (injected latency added before every call)\n", r.Store)
	fmt.Fprintf(w, "machine   a counter (8-byte command, 8-byte result); FlushInterval %v, SnapshotThreshold %d\n", r.Flush, r.Snapshot)
	fmt.Fprintf(w, "clients   %s goroutines, each submitting one command after another for %v per case\n", r.Clients, r.Duration)
	if r.LoadBefore != "" {
		fmt.Fprintf(w, "load      %s at the start, %s at the end (1, 5, 15 min)\n", r.LoadBefore, r.LoadAfter)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "the store's own sequential create-if-absent puts (64 bytes):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "latency\tputs\tp50\tp99\tputs/s\t\n")
	for _, ref := range r.Refs {
		fmt.Fprintf(tw, "%v\t%d\t%v\t%v\t%.1f\t\n", ref.Latency, ref.Ops, roundDur(ref.P50), roundDur(ref.P99), ref.OpsPerSec)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nthe group:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "latency\tbatch\tpipe\tclients\tcmds/s\tp50\tp99\tcmds/batch\tbatches/round\tPUT/cmd\tGET/cmd\tLIST/cmd\tDEL/cmd\tlog PUT/batch\tls GET/round\tappend\tconfirm\tp50/put p50\trate/put rate\tCPU s/s\tfailed\t\n")
	for _, c := range r.Cases {
		perBatch, perRound := 0.0, 0.0
		if c.Batches > 0 {
			perBatch = float64(c.LogPuts) / float64(c.Batches)
		}
		if c.Rounds > 0 {
			perRound = float64(c.LeaderStateGets) / float64(c.Rounds)
		}
		fmt.Fprintf(tw, "%v\t%d\t%d\t%d\t%.0f\t%v\t%v\t%.1f\t%.2f\t%.3f\t%.3f\t%.4f\t%.3f\t%.3f\t%.3f\t%v\t%v\t%.2f\t%.2f\t%.2f\t%d\t\n",
			c.Latency, c.Batch, c.Pipeline, c.Clients, c.CommandsPerSec, roundDur(c.P50), roundDur(c.P99),
			c.CommandsPerBatch, c.BatchesPerRound, c.PerCommand["PUT"], c.PerCommand["GET"], c.PerCommand["LIST"], c.PerCommand["DELETE"],
			perBatch, perRound, roundDur(c.AppendMean), roundDur(c.ConfirmMean), c.LatencyRatio, c.RateRatio, c.CPUPerSec, c.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Speedups) > 0 {
		fmt.Fprintln(w, "\npipelining: the deepest pipeline against one batch at a time, same latency and batch size:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "latency\tbatch\tP=1 cmds/s\tpipeline\tcmds/s\tratio\t\n")
		for _, s := range r.Speedups {
			fmt.Fprintf(tw, "%v\t%d\t%.0f\t%d\t%.0f\t%.2fx\t\n", s.Latency, s.Batch, s.Base, s.Pipeline, s.Rate, s.Ratio)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\ncmds/s and p50/p99: commands acknowledged within the window. Store requests per command, commands per")
	fmt.Fprintln(w, "batch and the per-batch and per-round counts cover the window and the drain after it (each client's last")
	fmt.Fprintln(w, "command). log PUT/batch: create-if-absent puts under log/ per committed batch (1 = one write per batch).")
	fmt.Fprintln(w, "ls GET/round: reads of leader_state.json per confirmation round. append, confirm: mean log write and")
	fmt.Fprintln(w, "confirmation read, from the group's metrics. p50/put p50 and rate/put rate: against the store's own puts above.")
	return nil
}
