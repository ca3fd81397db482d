package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/internal/etcdlaunch"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
)

// tenure bench kv measures the replicated key-value store as a user runs
// it — `tenure kv serve` with its default options, as a child process —
// against the size of its state, and etcd on the same disk in the same
// run. For each state size it fills the store to that many keys, times a
// lone sequential writer and then concurrent writers (overwriting random
// keys), reads the node's memory, then stops the node and times a fresh
// one on the same store to its first linearizable read. The child counts
// its store calls and bytes (see kvnode.go); snapshots come from
// those counts, so puts can be told apart by whether a snapshot was being
// taken while they ran.

// kvLatency summarizes the puts of one phase.
type kvLatency struct {
	Writers    int           `json:"writers"`
	Puts       int           `json:"puts"` // acknowledged
	Failed     int           `json:"failed"`
	Elapsed    time.Duration `json:"elapsedNanos"`
	PutsPerSec float64       `json:"putsPerSecond"`
	P50        time.Duration `json:"p50Nanos"`
	P99        time.Duration `json:"p99Nanos"`
	Max        time.Duration `json:"maxNanos"`
	// SnapPuts ran, wholly or partly, while a snapshot was being taken
	// (from the capture of the state to the end of its store write);
	// QuietP99 and QuietMax are over the others.
	SnapPuts int           `json:"snapshotPuts"`
	SnapP50  time.Duration `json:"snapshotP50Nanos"`
	SnapMax  time.Duration `json:"snapshotMaxNanos"`
	QuietP99 time.Duration `json:"quietP99Nanos"`
	QuietMax time.Duration `json:"quietMaxNanos"`
	// CPU is the serving process's CPU time (user and system, from
	// /proc/PID/stat, Linux) over the phase.
	CPU time.Duration `json:"cpuNanos"`
	// ClientCPU is the bench process's own CPU time over the phase: the
	// clients' share of the machine (both run on it).
	ClientCPU time.Duration `json:"clientCpuNanos"`
	// DiskWritten is the serving process's write_bytes in /proc/PID/io
	// over the phase (Linux): what reached the disk's page cache, per page.
	DiskWritten int64 `json:"diskWriteBytes"`
}

// kvSnapshots are the snapshots written during a size's measured phases.
type kvSnapshots struct {
	Count     int           `json:"count"`
	LastBytes int64         `json:"lastBytes"` // the latest snapshot's size, at this state size
	WriteMean time.Duration `json:"writeMeanNanos"`
	WriteMax  time.Duration `json:"writeMaxNanos"`
	// TakeMean and TakeMax run from the capture of the state to the end
	// of the write, for snapshots whose capture is known.
	TakeMean time.Duration `json:"takeMeanNanos"`
	TakeMax  time.Duration `json:"takeMaxNanos"`
}

// kvColdStart is a fresh node started on the store a stopped one left.
type kvColdStart struct {
	// Serving: from the process's start to its HTTP API's address on
	// stdout (the node joined). FirstRead: to the first successful
	// linearizable GET of a key.
	Serving   time.Duration    `json:"servingNanos"`
	FirstRead time.Duration    `json:"firstReadNanos"`
	ReadOK    bool             `json:"readOK"`
	BytesRead int64            `json:"bytesRead"` // store bytes read by then
	Requests  map[string]int64 `json:"requests"`
	RSS       int64            `json:"rssBytes"` // just after the read
	HWM       int64            `json:"hwmBytes"` // the fresh node's peak RSS by then
	// ReadBandwidth is the store's sequential read bandwidth in bytes per
	// second, measured right after the read: the bench process reads the
	// group's snapshot objects back through the same store driver, as
	// many at a time as the node's loader. Bound is what the cold start
	// should take at most: BytesRead at that bandwidth, plus a second.
	ReadBandwidth float64       `json:"readBytesPerSecond"`
	BandwidthRead int64         `json:"bandwidthBytesRead"`
	Bound         time.Duration `json:"boundNanos"`
}

// kvTenureSize is the kv store at one state size.
type kvTenureSize struct {
	Keys     int           `json:"keys"`
	FillPuts int           `json:"fillPuts"`
	FillTime time.Duration `json:"fillNanos"`
	Seq      kvLatency     `json:"sequential"`
	Conc     kvLatency     `json:"concurrent"`
	// Store traffic over the sequential and concurrent phases, per
	// acknowledged put.
	MeasuredPuts    int64              `json:"measuredPuts"`
	BytesWritten    int64              `json:"storeBytesWritten"`
	BytesPerPut     float64            `json:"storeBytesPerPut"`
	LogBytesPerPut  float64            `json:"logBytesPerPut"`
	SnapBytesPerPut float64            `json:"snapshotBytesPerPut"`
	BaseBytesPerPut float64            `json:"baseBytesPerPut"` // of SnapBytesPerPut, new bases'
	RequestsPerPut  map[string]float64 `json:"requestsPerPut"`
	DiskBytesPerPut float64            `json:"diskBytesPerPut"`
	CPUPerPut       time.Duration      `json:"cpuPerPutNanos"` // over both phases
	FillBytesPerPut float64            `json:"fillStoreBytesPerPut"`
	Snapshots       kvSnapshots        `json:"snapshots"`
	RSS             int64              `json:"rssBytes"`
	HWM             int64              `json:"hwmBytes"`
	FillHWM         int64              `json:"fillHwmBytes"` // the peak RSS when the fill ended
	HeapLive        uint64             `json:"heapLiveBytes"`
	// Data is the live data: the keys' and values' bytes.
	Data             int64       `json:"dataBytes"`
	Revision         int64       `json:"revision"`   // the highest revision a put returned
	PutsAcknowledged int64       `json:"putsAcked"`  // by this size, every phase and size
	PutsFailed       int64       `json:"putsFailed"` // likewise
	Cold             kvColdStart `json:"coldStart"`
}

// kvEtcdSize is etcd at one state size.
type kvEtcdSize struct {
	Keys            int           `json:"keys"`
	FillTime        time.Duration `json:"fillNanos"`
	Seq             kvLatency     `json:"sequential"`
	Conc            kvLatency     `json:"concurrent"`
	DiskBytesPerPut float64       `json:"diskBytesPerPut"`
	CPUPerPut       time.Duration `json:"cpuPerPutNanos"`
	RSS             int64         `json:"rssBytes"`
	HWM             int64         `json:"hwmBytes"`
	DBSize          int64         `json:"dbSizeBytes"`
}

// kvRatio is tenure over etcd at one size.
type kvRatio struct {
	Keys    int     `json:"keys"`
	SeqP50  float64 `json:"sequentialP50"`
	SeqP99  float64 `json:"sequentialP99"`
	ConcP99 float64 `json:"concurrentP99"`
	Rate    float64 `json:"concurrentPutsPerSecond"`
	RSS     float64 `json:"rss"`
}

// KVResult is what the key-value benchmark measured.
type KVResult struct {
	Store       string         `json:"store"`
	ValueSize   int            `json:"valueSize"`
	SeqPuts     int            `json:"sequentialPuts"`
	Writers     int            `json:"writers"`
	Duration    time.Duration  `json:"durationNanos"`
	FillWriters int            `json:"fillWriters"`
	Options     string         `json:"options"`
	GOMAXPROCS  int            `json:"gomaxprocs"`
	CPUs        int            `json:"cpus"`
	LoadBefore  string         `json:"loadavgBefore,omitempty"`
	LoadAfter   string         `json:"loadavgAfter,omitempty"`
	Tenure      []kvTenureSize `json:"tenure"`
	Etcd        []kvEtcdSize   `json:"etcd,omitempty"`
	EtcdVersion string         `json:"etcdVersion,omitempty"`
	EtcdBin     string         `json:"etcdBin,omitempty"`
	EtcdSkipped string         `json:"etcdSkipped,omitempty"`
	Ratios      []kvRatio      `json:"ratios,omitempty"`
	// Kept is, with --keep, the group left in the store and the command
	// that starts a node on it.
	Kept *kvKept `json:"kept,omitempty"`
}

// kvKept is the state --keep leaves: the last size's, its node's.
type kvKept struct {
	Group   string   `json:"group"`
	Command []string `json:"command"` // tenure's arguments
}

// KVConfig is a run of the key-value benchmark.
type KVConfig struct {
	// Store is the store URL; "": file:// in a new directory under Dir,
	// removed afterwards unless Keep. The bench uses a group of its own
	// and deletes it.
	Store string
	// Dir is the parent of temporary directories (the store's, etcd's
	// data); "": the system's temporary directory.
	Dir         string
	Sizes       []int // state sizes in keys, ascending
	ValueSize   int   // bytes per value
	SeqPuts     int   // puts of the lone sequential writer, per size
	Writers     int   // concurrent writers, 1 to KVMaxWriters
	Duration    time.Duration
	FillWriters int  // concurrent writers that fill the store, 1 to KVMaxWriters
	Etcd        bool // compare with etcd when it is installed
	// Exe is the tenure program the node runs as (`tenure bench kv-node`,
	// which is `tenure kv serve` counting its store calls).
	Exe string
	// PipelineDepth is kv serve's default PipelineDepth on a store, for
	// the result's description of the node's options.
	PipelineDepth func(storeURL string) int
	Verbose       bool     // copy the node's log to Stderr
	Profile       string   // directory for the node's profiles, "" for none
	KVFlags       []string // extra flags of the node's kv serve
	Keep          bool     // leave the store and the group
	Stderr        io.Writer
}

// kvBenchConfig is a run of KV: its configuration and its progress.
type kvBenchConfig struct {
	KVConfig
	stderr   io.Writer
	progress func(format string, args ...any)
}

// KVMaxWriters keeps the writers below the node's bound on requests in
// flight, past which it would refuse them as busy.
const KVMaxWriters = rsm.DefaultMaxConcurrentRequests - 4

// KV runs the key-value benchmark: for each size, a `tenure kv serve`
// node filled to that size, its puts timed, then a cold start; etcd on the
// same disk alongside.
func KV(ctx context.Context, c KVConfig) (*KVResult, error) {
	stderr := &syncWriter{w: c.Stderr}
	cfg := kvBenchConfig{KVConfig: c, stderr: stderr,
		progress: func(format string, args ...any) { fmt.Fprintf(stderr, "tenure bench kv: "+format+"\n", args...) }}
	if cfg.Store == "" {
		tmp, err := os.MkdirTemp(cfg.Dir, "tenure-bench-kv-")
		if err != nil {
			return nil, err
		}
		if !cfg.Keep {
			defer os.RemoveAll(tmp)
		}
		cfg.Store = "file://" + tmp
	}
	return benchKV(ctx, cfg)
}

func benchKV(ctx context.Context, cfg kvBenchConfig) (*KVResult, error) {
	// Open the store here first: a bad URL fails before any process
	// starts, and the bench deletes its group through it at the end.
	st, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	group := "bench-kv-" + strings.ToLower(rand.Text()[:8])
	if !cfg.Keep {
		defer cleanupPrefix(st, group+"/")
	}

	res := &KVResult{Store: cfg.Store, ValueSize: cfg.ValueSize, SeqPuts: cfg.SeqPuts, Writers: cfg.Writers,
		Duration: cfg.Duration, FillWriters: cfg.FillWriters, GOMAXPROCS: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU(),
		Options: fmt.Sprintf("tenure kv serve defaults: FlushInterval 20ms, BatchMinCount %d, PipelineDepth %d, SnapshotThreshold %d",
			rsm.DefaultBatchMinCount, cfg.PipelineDepth(cfg.Store), rsm.DefaultSnapshotThreshold)}
	if len(cfg.KVFlags) > 0 {
		res.Options += "; with " + strings.Join(cfg.KVFlags, " ")
	}
	if cfg.Keep {
		res.Kept = &kvKept{Group: group, Command: kvServeArgs(cfg.Store, group, cfg.KVFlags)}
	}
	res.LoadBefore = loadAvg()
	defer func() { res.LoadAfter = loadAvg() }()

	var etcdSrv *etcdlaunch.Server
	if cfg.Etcd {
		etcdSrv, res.EtcdBin, res.EtcdVersion, res.EtcdSkipped = startBenchEtcd(cfg)
		if etcdSrv != nil {
			defer etcdSrv.Stop()
		} else {
			cfg.progress("etcd: %s", res.EtcdSkipped)
		}
	} else {
		res.EtcdSkipped = "--etcd=false"
	}

	values := kvValues(cfg.ValueSize)
	tb := &kvTenureBench{cfg: cfg, st: st, group: group, values: values,
		client: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: cfg.FillWriters + cfg.Writers + 4}}}
	defer tb.client.CloseIdleConnections()
	if _, err := tb.start(ctx, false); err != nil {
		return nil, err
	}
	// tb.node changes at each cold start: stop the latest.
	defer func() { tb.node.stop() }()

	var eb *kvEtcdBench
	if etcdSrv != nil {
		c, err := etcdSrv.NewClient()
		if err != nil {
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		defer c.Close()
		eb = &kvEtcdBench{cfg: cfg, srv: etcdSrv, c: c, values: values}
	}

	prev := 0
	for _, n := range cfg.Sizes {
		ts, err := tb.size(ctx, prev, n)
		if err != nil {
			return nil, fmt.Errorf("kv store at %d keys: %w", n, err)
		}
		res.Tenure = append(res.Tenure, ts)
		if eb != nil {
			es, err := eb.size(ctx, prev, n)
			if err != nil {
				return nil, fmt.Errorf("etcd at %d keys: %w", n, err)
			}
			res.Etcd = append(res.Etcd, es)
			res.Ratios = append(res.Ratios, kvRatio{Keys: n, SeqP50: durRatio(ts.Seq.P50, es.Seq.P50), SeqP99: durRatio(ts.Seq.P99, es.Seq.P99),
				ConcP99: durRatio(ts.Conc.P99, es.Conc.P99), Rate: floatRatio(ts.Conc.PutsPerSec, es.Conc.PutsPerSec), RSS: floatRatio(float64(ts.RSS), float64(es.RSS))})
		}
		prev = n
	}
	return res, nil
}

// perPut is d over n puts, rounded for a table.
func perPut(d time.Duration, n int) time.Duration {
	return roundDur(d / time.Duration(max(1, n)))
}

func durRatio(a, b time.Duration) float64 { return floatRatio(float64(a), float64(b)) }

func floatRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// kvValues returns a few distinct printable values (the HTTP API returns
// UTF-8 values as text), so that consecutive puts differ.
func kvValues(size int) [][]byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([][]byte, 16)
	for i := range out {
		v := make([]byte, size)
		for j := range v {
			v[j] = letters[mrand.IntN(len(letters))]
		}
		out[i] = v
	}
	return out
}

// KVKey is the key of the i-th of the keys the kv benchmark writes.
func KVKey(i int) string { return fmt.Sprintf("bench/%08d", i) }

// kvPut writes one key and returns the revision the store gave it.
type kvPut func(ctx context.Context, key string, value []byte) (int64, error)

// kvSample is one acknowledged put, in Unix nanoseconds.
type kvSample struct{ start, end int64 }

// kvLoad runs writers that put: keys first..last-1 once each when fill,
// else random keys below last until count puts were made (count > 0) or
// d passed. It returns the acknowledged puts and the failures; a fill
// stops at the first failure.
func kvLoad(ctx context.Context, put kvPut, values [][]byte, writers, first, last int, fill bool, count int, d time.Duration) (samples []kvSample, maxRev int64, failed int, err error) {
	var next atomic.Int64
	next.Store(int64(first))
	var issued atomic.Int64
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var firstErr error
	var nfailed int
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var local []kvSample
			var rev int64
			defer func() {
				mu.Lock()
				samples = append(samples, local...)
				maxRev = max(maxRev, rev)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				var key string
				switch {
				case fill:
					i := next.Add(1) - 1
					if i >= int64(last) {
						return
					}
					key = KVKey(int(i))
				case count > 0:
					if issued.Add(1) > int64(count) {
						return
					}
					key = KVKey(rng.IntN(last))
				default:
					if !time.Now().Before(deadline) {
						return
					}
					key = KVKey(rng.IntN(last))
				}
				start := time.Now()
				r, perr := put(ctx, key, values[rng.IntN(len(values))])
				end := time.Now()
				if perr != nil {
					mu.Lock()
					nfailed++
					if firstErr == nil {
						firstErr = perr
					}
					stop := fill || ctx.Err() != nil
					mu.Unlock()
					if stop {
						return
					}
					_ = sleepCtx(ctx, 10*time.Millisecond)
					continue
				}
				rev = max(rev, r)
				local = append(local, kvSample{start.UnixNano(), end.UnixNano()})
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, nfailed, err
	}
	if fill && firstErr != nil {
		return nil, 0, nfailed, firstErr
	}
	if len(samples) == 0 && firstErr != nil {
		return nil, 0, nfailed, fmt.Errorf("no put succeeded; the first error: %w", firstErr)
	}
	return samples, maxRev, nfailed, nil
}

// kvSummarize computes a phase's latencies, splitting off the puts that
// overlap a snapshot window.
func kvSummarize(samples []kvSample, failed, writers int, elapsed time.Duration, snaps []kvSnapEvent) kvLatency {
	l := kvLatency{Writers: writers, Puts: len(samples), Failed: failed, Elapsed: elapsed}
	if elapsed > 0 {
		l.PutsPerSec = float64(len(samples)) / elapsed.Seconds()
	}
	var all, during, quiet []time.Duration
	for _, s := range samples {
		d := time.Duration(s.end - s.start)
		all = append(all, d)
		overlaps := false
		for _, sn := range snaps {
			if from, to := sn.window(); s.start < to && s.end > from {
				overlaps = true
				break
			}
		}
		if overlaps {
			during = append(during, d)
		} else {
			quiet = append(quiet, d)
		}
	}
	slices.Sort(all)
	slices.Sort(during)
	slices.Sort(quiet)
	l.P50, l.P99 = percentile(all, 0.50), percentile(all, 0.99)
	if len(all) > 0 {
		l.Max = all[len(all)-1]
	}
	l.SnapPuts = len(during)
	if len(during) > 0 {
		l.SnapP50, l.SnapMax = percentile(during, 0.50), during[len(during)-1]
	}
	if len(quiet) > 0 {
		l.QuietP99, l.QuietMax = percentile(quiet, 0.99), quiet[len(quiet)-1]
	}
	return l
}

// ---- the kv node ----

type kvTenureBench struct {
	cfg    kvBenchConfig
	st     *store.Store // the store the node uses, opened by the bench
	group  string
	values [][]byte
	client *http.Client
	node   *kvChild
	acked  int64 // puts acknowledged, every phase
	failed int64
	maxRev int64
}

// kvChild is a running `tenure kv serve`.
type kvChild struct {
	cmd     *exec.Cmd
	api     string // http://host:port of the kv API
	stats   string // http://host:port of the counts
	started time.Time
	serving time.Duration // from started to the API's address on stdout
	exited  chan struct{}
	err     error
	mu      sync.Mutex
	tail    []string
}

var (
	kvAPILine   = regexp.MustCompile(`HTTP API on (http://\S+),`)
	kvStatsLine = regexp.MustCompile(`stats on (http://\S+)`)
)

// kvServeArgs are the arguments of `tenure kv serve` for the bench's node
// on url.
func kvServeArgs(url, group string, kvFlags []string) []string {
	args := []string{"kv", "serve", "--store", url, "--group", group, "--id", "bench-node",
		"--peer-listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}
	return append(args, kvFlags...)
}

// start starts a node; profile: with its CPU profile running from the
// start (--profile), until b.profile stops it.
func (b *kvTenureBench) start(ctx context.Context, profile bool) (*kvChild, error) {
	args := []string{"bench", KVNodeCommand, "--stats", "127.0.0.1:0"}
	if profile && b.cfg.Profile != "" {
		args = append(args, kvNodeProfileNow)
	}
	args = append(args, kvServeArgs(CountURL(b.cfg.Store), b.group, b.cfg.KVFlags)[2:]...)
	var logw io.Writer
	if b.cfg.Verbose {
		logw = b.cfg.stderr
	}
	c, err := startNodeChild(ctx, b.cfg.Exe, args, kvAPILine, b.client, logw)
	if err != nil {
		return nil, err
	}
	b.node = c
	return c, nil
}

// startNodeChild runs exe with args, a node that prints its API's URL in
// a line apiLine matches and its counts' in one kvStatsLine matches, and
// returns once its /readyz answers 200. logw, if not nil, gets a copy of
// its stderr.
func startNodeChild(ctx context.Context, exe string, args []string, apiLine *regexp.Regexp, client *http.Client, logw io.Writer) (*kvChild, error) {
	c := &kvChild{exited: make(chan struct{})}
	c.cmd = exec.Command(exe, args...)
	c.cmd.SysProcAttr = memberProcAttr()
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the node: %w", err)
	}
	lines := make(chan string, 4)
	var readers sync.WaitGroup
	readers.Go(func() { c.read(stdout, lines, nil) })
	readers.Go(func() { c.read(stderr, nil, logw) })
	go func() {
		// Read the output to its end before Wait, as os/exec requires.
		readers.Wait()
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	timer := time.NewTimer(2 * time.Minute)
	defer timer.Stop()
	for c.api == "" || c.stats == "" {
		select {
		case line := <-lines:
			if m := apiLine.FindStringSubmatch(line); m != nil {
				c.api, c.serving = m[1], time.Since(c.started)
			}
			if m := kvStatsLine.FindStringSubmatch(line); m != nil {
				c.stats = m[1]
			}
		case <-c.exited:
			return nil, fmt.Errorf("the node exited at start (%v); its output ends:\n%s", c.err, c.logTail())
		case <-timer.C:
			c.kill()
			return nil, fmt.Errorf("the node did not serve within 2 minutes; its output ends:\n%s", c.logTail())
		case <-ctx.Done():
			c.kill()
			return nil, ctx.Err()
		}
	}
	// The API answers before the node has joined its group (503 until
	// then): serving means ready.
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/readyz", nil)
		if err != nil {
			c.kill()
			return nil, err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.serving = time.Since(c.started)
				break
			}
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("the node exited at start (%v); its output ends:\n%s", c.err, c.logTail())
		case <-timer.C:
			c.kill()
			return nil, fmt.Errorf("the node was not ready within 2 minutes; its output ends:\n%s", c.logTail())
		case <-ctx.Done():
			c.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c, nil
}

func (c *kvChild) read(r io.Reader, lines chan<- string, copyTo io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.tail = append(c.tail, line)
		if len(c.tail) > 40 {
			c.tail = c.tail[len(c.tail)-40:]
		}
		c.mu.Unlock()
		if copyTo != nil {
			fmt.Fprintln(copyTo, line)
		}
		if lines != nil {
			select {
			case lines <- line:
			default:
			}
		}
	}
}

func (c *kvChild) logTail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

func (c *kvChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop asks the node to leave its group and exit (SIGTERM), and kills it
// if it has not within the request timeout and a margin.
func (c *kvChild) stop() {
	if c == nil {
		return
	}
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
	case <-time.After(rsm.DefaultRequestTimeout + 20*time.Second):
		c.kill()
	}
}

func (b *kvTenureBench) stats(ctx context.Context, gc bool) (kvNodeStats, error) {
	var st kvNodeStats
	u := b.node.stats + "/stats"
	if gc {
		u += "?gc=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return st, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return st, fmt.Errorf("the node's counts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("the node's counts: HTTP %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (b *kvTenureBench) put(ctx context.Context, key string, value []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.node.api+"/v1/kv/"+key, bytes.NewReader(value))
	if err != nil {
		return 0, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("PUT %s: HTTP %d: %s", key, resp.StatusCode, bytes.TrimSpace(body))
	}
	var r struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("PUT %s: %w", key, err)
	}
	return r.Revision, nil
}

// get reads key linearizably; ok is true on 200.
func (b *kvTenureBench) get(ctx context.Context, key string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.node.api+"/v1/kv/"+key, nil)
	if err != nil {
		return false, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

func (b *kvTenureBench) load(ctx context.Context, writers, first, last int, fill bool, count int, d time.Duration) ([]kvSample, int, error) {
	samples, rev, failed, err := kvLoad(ctx, b.put, b.values, writers, first, last, fill, count, d)
	b.acked += int64(len(samples))
	b.failed += int64(failed)
	b.maxRev = max(b.maxRev, rev)
	return samples, failed, err
}

func (b *kvTenureBench) size(ctx context.Context, prev, n int) (kvTenureSize, error) {
	cfg := b.cfg
	ts := kvTenureSize{Keys: n, FillPuts: n - prev}
	st0, err := b.stats(ctx, false)
	if err != nil {
		return ts, err
	}
	start := time.Now()
	if _, _, err := b.load(ctx, cfg.FillWriters, prev, n, true, 0, 0); err != nil {
		return ts, fmt.Errorf("filling: %w", err)
	}
	ts.FillTime = time.Since(start)
	st1, err := b.stats(ctx, false)
	if err != nil {
		return ts, err
	}
	ts.FillBytesPerPut = float64(st1.PutBytes-st0.PutBytes) / float64(max(1, ts.FillPuts))
	_, ts.FillHWM = procMem(b.node.cmd.Process.Pid)
	ts.Data = kvDataBytes(n, cfg.ValueSize)
	cfg.progress("kv store: %d keys filled in %v", n, roundDur(ts.FillTime))

	pid := b.node.cmd.Process.Pid
	io0 := procIO(pid)
	if err := b.profile(ctx, true, n, ""); err != nil {
		return ts, err
	}
	start = time.Now()
	seq, seqFailed, err := b.load(ctx, 1, 0, n, false, cfg.SeqPuts, 0)
	if err != nil {
		return ts, fmt.Errorf("sequential puts: %w", err)
	}
	seqElapsed := time.Since(start)
	io1 := procIO(pid)
	if err := b.profile(ctx, false, n, "seq"); err != nil {
		return ts, err
	}
	if err := b.profile(ctx, true, n, ""); err != nil {
		return ts, err
	}
	start = time.Now()
	client0 := procCPU(os.Getpid())
	conc, concFailed, err := b.load(ctx, cfg.Writers, 0, n, false, 0, cfg.Duration)
	if err != nil {
		return ts, fmt.Errorf("concurrent puts: %w", err)
	}
	concElapsed := time.Since(start)
	io2 := procIO(pid)
	clientCPU := procCPU(os.Getpid()) - client0
	if err := b.profile(ctx, false, n, "conc"); err != nil {
		return ts, err
	}
	// Wait for a snapshot in progress to finish, so that its window is
	// known and its bytes are counted with the puts that caused it.
	st2, err := b.settle(ctx)
	if err != nil {
		return ts, err
	}
	ts.RSS, ts.HWM = procMem(pid)
	if err := b.profile(ctx, false, n, "heap"); err != nil {
		return ts, err
	}
	stGC, err := b.stats(ctx, true)
	if err != nil {
		return ts, err
	}
	ts.HeapLive = stGC.HeapLive

	snaps := st2.Snapshots[len(st1.Snapshots):]
	ts.Seq = kvSummarize(seq, seqFailed, 1, seqElapsed, snaps)
	ts.Seq.DiskWritten, ts.Seq.CPU = io1.write-io0.write, io1.cpu-io0.cpu
	ts.Conc = kvSummarize(conc, concFailed, cfg.Writers, concElapsed, snaps)
	ts.Conc.DiskWritten, ts.Conc.CPU, ts.Conc.ClientCPU = io2.write-io1.write, io2.cpu-io1.cpu, clientCPU
	ts.MeasuredPuts = int64(len(seq) + len(conc))
	per := func(v int64) float64 { return float64(v) / float64(max(1, ts.MeasuredPuts)) }
	ts.BytesWritten = st2.PutBytes - st1.PutBytes
	ts.BytesPerPut = per(ts.BytesWritten)
	ts.LogBytesPerPut = per(st2.LogBytes - st1.LogBytes)
	ts.SnapBytesPerPut = per(st2.SnapshotBytes - st1.SnapshotBytes)
	ts.BaseBytesPerPut = per(st2.BaseBytes - st1.BaseBytes)
	ts.DiskBytesPerPut = per(io2.write - io0.write)
	ts.CPUPerPut = time.Duration(per(int64(io2.cpu - io0.cpu)))
	ts.RequestsPerPut = map[string]float64{}
	for op, v := range st2.Requests {
		ts.RequestsPerPut[op] = per(v - st1.Requests[op])
	}
	ts.Snapshots = snapshotSummary(snaps, st2.Snapshots)
	ts.Revision, ts.PutsAcknowledged, ts.PutsFailed = b.maxRev, b.acked, b.failed
	cfg.progress("kv store: %d keys: sequential p50 %v p99 %v max %v; %d writers %.0f puts/s p99 %v max %v; %.0f store bytes/put; snapshot %d bytes, written in %v; RSS %d MiB",
		n, roundDur(ts.Seq.P50), roundDur(ts.Seq.P99), roundDur(ts.Seq.Max), cfg.Writers, ts.Conc.PutsPerSec, roundDur(ts.Conc.P99), roundDur(ts.Conc.Max),
		ts.BytesPerPut, ts.Snapshots.LastBytes, roundDur(ts.Snapshots.WriteMean), ts.RSS>>20)

	ts.Cold, err = b.coldStart(ctx, n)
	if err != nil {
		return ts, fmt.Errorf("cold start: %w", err)
	}
	cfg.progress("kv store: %d keys: cold start to the first read %v (serving after %v), %d store bytes read",
		n, roundDur(ts.Cold.FirstRead), roundDur(ts.Cold.Serving), ts.Cold.BytesRead)
	return ts, nil
}

// profile, with --profile, starts the node's CPU profile (start), or
// stops it and writes it as kv-SIZE-PHASE.cpu.pprof, or (phase "heap")
// writes its heap profile as kv-SIZE.heap.pprof.
func (b *kvTenureBench) profile(ctx context.Context, start bool, n int, phase string) error {
	if b.cfg.Profile == "" {
		return nil
	}
	method, u, file := http.MethodPost, b.node.stats+"/profile/cpu", fmt.Sprintf("kv-%d-%s.cpu.pprof", n, phase)
	switch {
	case start:
		u += "?start=1"
	case phase == "heap":
		method, u, file = http.MethodGet, b.node.stats+"/profile/heap", fmt.Sprintf("kv-%d.heap.pprof", n)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("the node's profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("the node's profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the node's profile: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	if start {
		return nil
	}
	if err := os.MkdirAll(b.cfg.Profile, 0o777); err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	return os.WriteFile(filepath.Join(b.cfg.Profile, file), data, 0o666)
}

// settle waits until no snapshot is being written (the latest one has been
// followed by its truncation, or a few seconds passed) and returns the
// counts then.
func (b *kvTenureBench) settle(ctx context.Context) (kvNodeStats, error) {
	deadline := time.Now().Add(30 * time.Second)
	var last kvNodeStats
	for {
		st, err := b.stats(ctx, false)
		if err != nil {
			return st, err
		}
		// Two reads a moment apart with no new log entry, snapshot or
		// truncation: the node is idle.
		if last.Requests != nil && st.LogPuts == last.LogPuts && st.SnapshotPuts == last.SnapshotPuts &&
			st.Requests["delete"] == last.Requests["delete"] {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, nil
		}
		last = st
		if err := sleepCtx(ctx, 300*time.Millisecond); err != nil {
			return st, err
		}
	}
}

func snapshotSummary(snaps, all []kvSnapEvent) kvSnapshots {
	var s kvSnapshots
	if len(all) > 0 {
		s.LastBytes = all[len(all)-1].Bytes
	}
	s.Count = len(snaps)
	var write, take time.Duration
	var takes int
	for _, sn := range snaps {
		w := time.Duration(sn.End - sn.Start)
		write += w
		s.WriteMax = max(s.WriteMax, w)
		if sn.Captured > 0 {
			t := time.Duration(sn.End - sn.Captured)
			take += t
			takes++
			s.TakeMax = max(s.TakeMax, t)
		}
	}
	if len(snaps) > 0 {
		s.WriteMean = write / time.Duration(len(snaps))
	}
	if takes > 0 {
		s.TakeMean = take / time.Duration(takes)
	}
	return s
}

// coldStart stops the node and starts a fresh one on the same store,
// timing it to its first successful linearizable read.
func (b *kvTenureBench) coldStart(ctx context.Context, n int) (kvColdStart, error) {
	var cs kvColdStart
	b.node.stop()
	if _, err := b.start(ctx, true); err != nil {
		return cs, err
	}
	cs.Serving = b.node.serving
	key := KVKey(n - 1)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := b.get(ctx, key)
		if ok {
			cs.FirstRead, cs.ReadOK = time.Since(b.node.started), true
			break
		}
		if ctx.Err() != nil {
			return cs, ctx.Err()
		}
		if time.Now().After(deadline) {
			return cs, fmt.Errorf("no successful read of %s within 2 minutes (last error: %v)", key, err)
		}
		_ = sleepCtx(ctx, 5*time.Millisecond)
	}
	cs.RSS, cs.HWM = procMem(b.node.cmd.Process.Pid)
	if err := b.profile(ctx, false, n, "cold"); err != nil {
		return cs, err
	}
	st, err := b.stats(ctx, false)
	if err != nil {
		return cs, err
	}
	cs.BytesRead, cs.Requests = st.GetBytes, st.Requests
	read, d, err := readObjects(ctx, b.st, b.group+"/snap/", kvLoaderReads)
	if err != nil {
		return cs, fmt.Errorf("measuring the store's read bandwidth: %w", err)
	}
	cs.BandwidthRead = read
	if d > 0 && read > 0 {
		cs.ReadBandwidth = float64(read) / d.Seconds()
		cs.Bound = time.Duration(float64(cs.BytesRead)/cs.ReadBandwidth*float64(time.Second)) + time.Second
	}
	return cs, nil
}

// kvLoaderReads is how many objects a node reads at once when it loads a
// snapshot (rsm's groupStore.par).
const kvLoaderReads = 8

// kvDataBytes is the live data of n keys (kvKey) with values of
// valueSize bytes: the bytes of the keys and of the values.
func kvDataBytes(n, valueSize int) int64 {
	keys := int64(n) * int64(len(KVKey(0)))
	for p := 100_000_000; p < n; p *= 10 {
		keys += int64(n - p) // kvKey pads to 8 digits: a digit more per decade from 10^8
	}
	return keys + int64(n)*int64(valueSize)
}

// readObjects reads every object under prefix, par at a time, and returns
// the bytes read and how long it took: the store's read bandwidth as a
// snapshot's loader sees it (without versions, each reader into its own
// reused buffer, as the loader reads a base).
func readObjects(ctx context.Context, st *store.Store, prefix string, par int) (int64, time.Duration, error) {
	items, err := st.ListAll(ctx, prefix, 1000)
	if err != nil {
		return 0, 0, err
	}
	var total atomic.Int64
	var next atomic.Int64
	errs := make(chan error, par)
	start := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			var buf []byte
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) {
					return
				}
				data, err := st.Read(ctx, items[i].Key, buf, max(items[i].Size, 1))
				buf = data
				if errors.Is(err, store.ErrNotFound) {
					continue // collected since the list
				}
				if err != nil {
					errs <- err
					return
				}
				total.Add(int64(len(data)))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return total.Load(), d, nil
}

// ---- etcd ----

// startBenchEtcd starts etcd on the disk of cfg.Dir, or says why not. It
// takes the newest etcd at hand (etcdlaunch.FindNewest): $TENURE_ETCD_BIN,
// else the cache's newest etcd-vX.Y.Z, else the etcd the tests use.
func startBenchEtcd(cfg kvBenchConfig) (srv *etcdlaunch.Server, bin, version, skipped string) {
	cache := ""
	if d := os.Getenv("TENURE_CACHE"); d != "" {
		cache = d + "/bin"
	} else if home, err := os.UserHomeDir(); err == nil {
		cache = home + "/.cache/tenure/bin"
	}
	var err error
	bin, err = etcdlaunch.FindNewest(cache)
	if err != nil {
		return nil, "", "", err.Error()
	}
	if version, err = etcdlaunch.Version(bin); err != nil {
		return nil, "", "", err.Error()
	}
	// A bigger backend quota than the default 2 GiB leaves room for the
	// revisions of the largest sizes (nothing compacts them).
	srv, err = etcdlaunch.Launch(bin, version, etcdlaunch.Options{ParentDir: cfg.Dir, ExtraArgs: []string{"--quota-backend-bytes", strconv.Itoa(8 << 30)}})
	if err != nil {
		return nil, "", "", err.Error()
	}
	cfg.progress("etcd %s: %s, data in %s", version, bin, srv.DataDir)
	return srv, bin, version, ""
}

type kvEtcdBench struct {
	cfg    kvBenchConfig
	srv    *etcdlaunch.Server
	c      *clientv3.Client
	values [][]byte
}

func (b *kvEtcdBench) put(ctx context.Context, key string, value []byte) (int64, error) {
	resp, err := b.c.Put(ctx, key, string(value))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (b *kvEtcdBench) size(ctx context.Context, prev, n int) (kvEtcdSize, error) {
	cfg := b.cfg
	es := kvEtcdSize{Keys: n}
	start := time.Now()
	if _, _, _, err := kvLoad(ctx, b.put, b.values, cfg.FillWriters, prev, n, true, 0, 0); err != nil {
		return es, fmt.Errorf("filling: %w", err)
	}
	es.FillTime = time.Since(start)
	pid := b.srv.Proc.PID()
	io0 := procIO(pid)
	start = time.Now()
	seq, _, seqFailed, err := kvLoad(ctx, b.put, b.values, 1, 0, n, false, cfg.SeqPuts, 0)
	if err != nil {
		return es, fmt.Errorf("sequential puts: %w", err)
	}
	es.Seq = kvSummarize(seq, seqFailed, 1, time.Since(start), nil)
	io1 := procIO(pid)
	start = time.Now()
	client0 := procCPU(os.Getpid())
	conc, _, concFailed, err := kvLoad(ctx, b.put, b.values, cfg.Writers, 0, n, false, 0, cfg.Duration)
	if err != nil {
		return es, fmt.Errorf("concurrent puts: %w", err)
	}
	es.Conc = kvSummarize(conc, concFailed, cfg.Writers, time.Since(start), nil)
	io2 := procIO(pid)
	es.Conc.ClientCPU = procCPU(os.Getpid()) - client0
	es.Seq.DiskWritten, es.Conc.DiskWritten = io1.write-io0.write, io2.write-io1.write
	es.DiskBytesPerPut = float64(io2.write-io0.write) / float64(max(1, len(seq)+len(conc)))
	es.Seq.CPU, es.Conc.CPU = io1.cpu-io0.cpu, io2.cpu-io1.cpu
	es.CPUPerPut = (io2.cpu - io0.cpu) / time.Duration(max(1, len(seq)+len(conc)))
	es.RSS, es.HWM = procMem(pid)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if s, err := b.c.Status(sctx, b.srv.ClientURL); err == nil {
		es.DBSize = s.DbSize
	}
	cfg.progress("etcd: %d keys: sequential p50 %v p99 %v; %d writers %.0f puts/s p99 %v; RSS %d MiB",
		n, roundDur(es.Seq.P50), roundDur(es.Seq.P99), cfg.Writers, es.Conc.PutsPerSec, roundDur(es.Conc.P99), es.RSS>>20)
	return es, nil
}

// ---- /proc ----

// procMem returns VmRSS and VmHWM of pid in bytes (Linux; 0 elsewhere).
func procMem(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm
}

type procIOCounts struct {
	read, write int64
	cpu         time.Duration // user and system time, from /proc/PID/stat
}

// procIO returns read_bytes and write_bytes of /proc/PID/io (Linux; zero
// elsewhere or when not readable).
func procIO(pid int) procIOCounts {
	var c procIOCounts
	c.cpu = procCPU(pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return c
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		switch name {
		case "read_bytes":
			c.read = v
		case "write_bytes":
			c.write = v
		}
	}
	return c
}

// procCPU returns the user and system time of pid (Linux; zero
// elsewhere), from fields 14 and 15 of /proc/PID/stat, in clock ticks of
// 10 ms (USER_HZ is 100 on every Linux architecture Go supports).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// ---- output ----

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// Print prints the result as tables.
func (r *KVResult) Print(w io.Writer) error {
	fmt.Fprintf(w, "tenure bench kv: `tenure kv serve` as a child process, one node; GOMAXPROCS %d, %d CPUs\n", r.GOMAXPROCS, r.CPUs)
	fmt.Fprintf(w, "store     %s\n", r.Store)
	fmt.Fprintf(w, "options   %s\n", r.Options)
	fmt.Fprintf(w, "puts      values of %d bytes; %d sequential puts, then %d writers for %v, on random existing keys; fill: %d writers\n",
		r.ValueSize, r.SeqPuts, r.Writers, r.Duration, r.FillWriters)
	if r.LoadBefore != "" {
		fmt.Fprintf(w, "load      %s at the start, %s at the end (1, 5, 15 min)\n", r.LoadBefore, r.LoadAfter)
	}
	if r.EtcdVersion != "" {
		fmt.Fprintf(w, "etcd      %s (%s), same disk, official Go client, default settings (no compaction)\n", r.EtcdVersion, r.EtcdBin)
	} else {
		fmt.Fprintf(w, "etcd      not measured: %s\n", r.EtcdSkipped)
	}
	if r.Kept != nil {
		fmt.Fprintf(w, "kept      group %s; a node on it: tenure %s\n", r.Kept.Group, strings.Join(r.Kept.Command, " "))
	}

	fmt.Fprintln(w, "\nkv store: put latency (seq: one writer; conc: concurrent writers); snap: puts that overlapped a snapshot, quiet: the others")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tfill\tseq p50\tseq p99\tseq max\tseq snap max\tseq quiet p99\tconc puts/s\tconc p50\tconc p99\tconc max\tconc snap max\tconc quiet p99\tsnap puts\tfailed\t\n")
	for _, t := range r.Tenure {
		fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%v\t%v\t%v\t%.0f\t%v\t%v\t%v\t%v\t%v\t%d\t%d\t\n", t.Keys, roundDur(t.FillTime),
			roundDur(t.Seq.P50), roundDur(t.Seq.P99), roundDur(t.Seq.Max), roundDur(t.Seq.SnapMax), roundDur(t.Seq.QuietP99),
			t.Conc.PutsPerSec, roundDur(t.Conc.P50), roundDur(t.Conc.P99), roundDur(t.Conc.Max), roundDur(t.Conc.SnapMax), roundDur(t.Conc.QuietP99),
			t.Seq.SnapPuts+t.Conc.SnapPuts, t.Seq.Failed+t.Conc.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nkv store: store traffic per put, snapshots, memory, cold start")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tstore B/put\tlog B/put\tsnap B/put\tbase B/put\tPUT/put\tGET/put\tdisk B/put\tCPU/put\tsnaps\tsnap MiB\tsnap write\tsnap taken\tRSS MiB\tHWM MiB\theap MiB\tcold read\tserving\tcold MiB read\t\n")
	for _, t := range r.Tenure {
		puts := t.RequestsPerPut["put-create"] + t.RequestsPerPut["put-cas"]
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.3f\t%.3f\t%.0f\t%v\t%d\t%s\t%v\t%v\t%s\t%s\t%s\t%v\t%v\t%s\t\n", t.Keys,
			t.BytesPerPut, t.LogBytesPerPut, t.SnapBytesPerPut, t.BaseBytesPerPut, puts, t.RequestsPerPut["get"], t.DiskBytesPerPut, roundDur(t.CPUPerPut),
			t.Snapshots.Count, mib(t.Snapshots.LastBytes), roundDur(t.Snapshots.WriteMean), roundDur(t.Snapshots.TakeMean),
			mib(t.RSS), mib(t.HWM), mib(int64(t.HeapLive)), roundDur(t.Cold.FirstRead), roundDur(t.Cold.Serving), mib(t.Cold.BytesRead))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nkv store: peak memory against the data, cold start against the store's read bandwidth")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tdata MiB\tfill HWM MiB\tHWM MiB\tHWM / data\tcold HWM MiB\tcold HWM / data\tcold MiB read\tread MiB/s\tcold read\tbound\tcold / bound\t\n")
	for _, t := range r.Tenure {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.2f\t%s\t%.2f\t%s\t%.0f\t%v\t%v\t%.2f\t\n", t.Keys, mib(t.Data),
			mib(t.FillHWM), mib(t.HWM), floatRatio(float64(t.HWM), float64(t.Data)), mib(t.Cold.HWM), floatRatio(float64(t.Cold.HWM), float64(t.Data)),
			mib(t.Cold.BytesRead), t.Cold.ReadBandwidth/(1<<20), roundDur(t.Cold.FirstRead), roundDur(t.Cold.Bound), durRatio(t.Cold.FirstRead, t.Cold.Bound))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(r.Etcd) > 0 {
		fmt.Fprintln(w, "\netcd:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "keys\tfill\tseq p50\tseq p99\tseq max\tconc puts/s\tconc p50\tconc p99\tconc max\tdisk B/put\tCPU/put\tRSS MiB\tHWM MiB\tdb MiB\tfailed\t\n")
		for _, e := range r.Etcd {
			fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%v\t%.0f\t%v\t%v\t%v\t%.0f\t%v\t%s\t%s\t%s\t%d\t\n", e.Keys, roundDur(e.FillTime),
				roundDur(e.Seq.P50), roundDur(e.Seq.P99), roundDur(e.Seq.Max), e.Conc.PutsPerSec, roundDur(e.Conc.P50), roundDur(e.Conc.P99), roundDur(e.Conc.Max),
				e.DiskBytesPerPut, roundDur(e.CPUPerPut), mib(e.RSS), mib(e.HWM), mib(e.DBSize), e.Seq.Failed+e.Conc.Failed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nkv store / etcd (latency: above 1 is slower; puts/s: below 1 is slower):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "keys\tseq p50\tseq p99\tconc p99\tconc puts/s\tRSS\t\n")
		for _, q := range r.Ratios {
			fmt.Fprintf(tw, "%d\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\n", q.Keys, q.SeqP50, q.SeqP99, q.ConcP99, q.Rate, q.RSS)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// Servers and clients share the machine's cores: with them busy,
		// puts/s follows the CPU both spend per put.
		fmt.Fprintln(w, "\nconcurrent writers: CPU per put of the server and of the bench's clients (the same machine's cores)")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "keys\tkv server\tkv clients\tetcd server\tetcd clients\t\n")
		for i, t := range r.Tenure {
			if i >= len(r.Etcd) {
				break
			}
			e := r.Etcd[i]
			fmt.Fprintf(tw, "%d\t%v\t%v\t%v\t%v\t\n", t.Keys, perPut(t.Conc.CPU, t.Conc.Puts), perPut(t.Conc.ClientCPU, t.Conc.Puts),
				perPut(e.Conc.CPU, e.Conc.Puts), perPut(e.Conc.ClientCPU, e.Conc.Puts))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nstore B/put: bytes of the objects the node put (log entries, snapshots, leader state) over the measured puts;")
	fmt.Fprintln(w, "base B/put: the part of snap B/put that is new bases (the whole state, written once the segments since the last")
	fmt.Fprintln(w, "base reach three times its size): a window that holds one counts all of it, one that does not counts none.")
	fmt.Fprintln(w, "PUT/put and GET/put: store requests per put. disk B/put: the process's write_bytes (/proc/PID/io), per page.")
	fmt.Fprintln(w, "CPU/put: the serving process's user and system time (/proc/PID/stat) over the measured puts, per put.")
	fmt.Fprintln(w, "snap write: the snapshot object's store write; snap taken: from capturing the state to the end of that write.")
	fmt.Fprintln(w, "heap: live heap after a collection. cold read: from starting a fresh node on the same store to its first")
	fmt.Fprintln(w, "successful linearizable read (serving: to its HTTP API); cold MiB read: store bytes it read by then.")
	fmt.Fprintln(w, "data: the keys' and values' bytes. HWM: the node's peak RSS (VmHWM) after the measured phases; fill HWM: when")
	fmt.Fprintln(w, "the fill ended; cold HWM: the fresh node's, at its first read. read MiB/s: the snapshot objects read back through")
	fmt.Fprintf(w, "the same store driver, %d at a time as the loader reads them; bound: cold MiB read at that rate, plus 1 s.\n", kvLoaderReads)
	return nil
}
