package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
)

// tenure bench etcd runs `tenure etcd serve` nodes as child processes
// (`tenure bench etcd-node`: the same command, its store calls counted
// and delayed by the injected latency) and drives them with the traffic
// kube-apiserver's etcd3 store sends, through the official client's
// Kubernetes interface (go.etcd.io/etcd/client/v3/kubernetes), which is
// what kube-apiserver calls:
//
//   - objects under /registry/<resource>/<namespace>/<name>, 1 to 4 KiB
//     each;
//   - writers: creates as Txn(If mod_revision(key) = 0 Then Put Else
//     Get), optimistic updates as Txn(If mod_revision(key) = R Then Put
//     Else Get) and deletes as Txn(If mod_revision(key) = R Then
//     DeleteRange Else Get); a Txn that does not succeed is a conflict,
//     retried, as kube-apiserver's GuaranteedUpdate does, with the object
//     its Else branch returned;
//   - listers: a resource's keys in pages of 500 (the first page at the
//     current revision, the next ones at the first page's), then the
//     Count (a count_only Range of the prefix);
//   - watchers: a watch of each resource's prefix from the revision the
//     measured phase starts at, with progress notifications and no
//     prev_kv, asking for progress every second.
//
// Writers keep what the answers tell them of each object (its mod
// revision) in one table shared by all, as kube-apiserver's watch cache
// does, so a conflict happens when two writers change one object at
// once. At the end every watcher must have seen every committed write
// under its prefix once, in revision order, and no other.

// etcdResources are the resources the objects are spread over; watcher w
// watches etcdResources[w % len].
var etcdResources = []string{"pods", "leases", "configmaps"}

const (
	etcdNamespaces    = 10
	etcdListLimit     = 500
	etcdDeleteShare   = 0.05 // of the writes to an object that exists
	etcdMinValue      = 1 << 10
	etcdMaxValue      = 4 << 10
	etcdProgressEvery = time.Second
)

// EtcdConfig is a run of tenure bench etcd.
type EtcdConfig struct {
	// Store is the store URL the nodes share; each group size runs in a
	// group of its own, deleted afterwards.
	Store string
	// Latency is added before every store call of the nodes (and of the
	// reference puts).
	Latency time.Duration
	// Nodes are the group sizes, run one after the other; clients are
	// spread over a group's nodes.
	Nodes []int
	// Writers, Listers and Watchers are the clients of each kind.
	Writers, Listers, Watchers int
	// Objects is the working set: objects created before the measured
	// phase, spread over the resources and namespaces.
	Objects int
	// Duration is the measured phase; RefDuration how long the store's
	// own puts are timed.
	Duration, RefDuration time.Duration
	// ListInterval: each lister starts a full list this often (or at
	// once when the previous one took longer).
	ListInterval time.Duration
	// Exe is the tenure program the nodes run as.
	Exe string
	// ServeFlags are extra flags of the nodes' tenure etcd serve.
	ServeFlags []string
	// Options describes the nodes' defaults for the result.
	Options string
	Verbose bool // copy the nodes' logs to Stderr
	// Profile is a directory for each node's CPU profile over the
	// measured phase, etcd-nN-node-I.cpu.pprof; "" for none.
	Profile string
	Stderr  io.Writer
}

// etcdOpStats are the latencies of one kind of request.
type etcdOpStats struct {
	Count int64         `json:"count"`
	P50   time.Duration `json:"p50Nanos"`
	P99   time.Duration `json:"p99Nanos"`
	Max   time.Duration `json:"maxNanos"`
}

func opStats(ds []time.Duration) etcdOpStats {
	slices.Sort(ds)
	s := etcdOpStats{Count: int64(len(ds)), P50: percentile(ds, 0.50), P99: percentile(ds, 0.99)}
	if len(ds) > 0 {
		s.Max = ds[len(ds)-1]
	}
	return s
}

// etcdWatchStats is what one watcher saw of the measured phase.
type etcdWatchStats struct {
	Prefix string `json:"prefix"`
	Node   int    `json:"node"`
	// Expected are the committed writes under Prefix; Seen the events
	// that matched one of them (key, kind and revision), Missing those
	// never seen, Duplicates events seen again, OutOfOrder events whose
	// revision was not above the one before, Unexpected events that
	// match no committed write (a write whose answer was lost may
	// explain them).
	Expected   int64 `json:"expected"`
	Seen       int64 `json:"seen"`
	Missing    int64 `json:"missing"`
	Duplicates int64 `json:"duplicates"`
	OutOfOrder int64 `json:"outOfOrder"`
	Unexpected int64 `json:"unexpected"`
	// Progress notifications received; ProgressBehind those whose
	// revision was below an event already received or not below the
	// next event.
	Progress       int64 `json:"progress"`
	ProgressBehind int64 `json:"progressBehind"`
	// Lag runs from the writer's answer to the event's arrival (zero
	// when the event came first).
	LagP50 time.Duration `json:"lagP50Nanos"`
	LagP99 time.Duration `json:"lagP99Nanos"`
	LagMax time.Duration `json:"lagMaxNanos"`
}

// EtcdRun is one group size's measured phase.
type EtcdRun struct {
	Nodes   int           `json:"nodes"`
	Elapsed time.Duration `json:"elapsedNanos"`
	// Writes are the write Txns that succeeded; Conflicts those answered
	// succeeded=false (each retried or, for a create or an object gone,
	// given up as kube-apiserver does); Errors calls that failed.
	Writes       int64   `json:"writes"`
	WritesPerSec float64 `json:"writesPerSecond"`
	Creates      int64   `json:"creates"`
	Updates      int64   `json:"updates"`
	Deletes      int64   `json:"deletes"`
	Conflicts    int64   `json:"conflicts"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"firstError,omitempty"`
	// Ops are the latencies by kind: create, update, delete (succeeded),
	// conflict (a write answered succeeded=false), list (every page of
	// a list and its count), page, count.
	Ops map[string]etcdOpStats `json:"ops"`
	// ListsShort are lists whose pages held fewer keys than the first
	// page's count: a list at one revision must not.
	ListsShort int64            `json:"listsShort"`
	Watches    []etcdWatchStats `json:"watches"`
	LagP50     time.Duration    `json:"watchLagP50Nanos"`
	LagP99     time.Duration    `json:"watchLagP99Nanos"`
	// Store requests of every node over the phase, by kind, and per
	// write; LogEntries the log entries written (one per batch).
	StoreRequests    map[string]int64   `json:"storeRequests"`
	RequestsPerWrite map[string]float64 `json:"storeRequestsPerWrite"`
	AllPerWrite      float64            `json:"allStoreRequestsPerWrite"`
	LogEntries       int64              `json:"logEntries"`
	WritesPerEntry   float64            `json:"writesPerLogEntry"`
	// Per node: RSS and peak RSS at the end, CPU over the phase.
	RSS []int64         `json:"rssBytes"`
	HWM []int64         `json:"hwmBytes"`
	CPU []time.Duration `json:"cpuNanos"`
	// ClientCPU is this process's CPU over the phase (the clients').
	ClientCPU time.Duration `json:"clientCpuNanos"`
	// UpdateOverRef is the update p50 over the store's own put p50.
	UpdateOverRef float64 `json:"updateP50OverStorePutP50"`
}

// EtcdResult is what tenure bench etcd measured.
type EtcdResult struct {
	Store        string        `json:"store"`
	Latency      time.Duration `json:"latencyNanos"`
	Writers      int           `json:"writers"`
	Listers      int           `json:"listers"`
	Watchers     int           `json:"watchers"`
	Objects      int           `json:"objects"`
	Duration     time.Duration `json:"durationNanos"`
	ListInterval time.Duration `json:"listIntervalNanos"`
	Options      string        `json:"options"`
	GOMAXPROCS   int           `json:"gomaxprocs"`
	CPUs         int           `json:"cpus"`
	LoadBefore   string        `json:"loadavgBefore,omitempty"`
	LoadAfter    string        `json:"loadavgAfter,omitempty"`
	// Ref is the store's own create-if-absent put under the same
	// latency, from this process, one at a time.
	Ref  rsmStoreRef `json:"storePut"`
	Runs []EtcdRun   `json:"runs"`
}

var etcdAPILine = regexp.MustCompile(`etcd API on (https?://\S+),`)

// Etcd runs tenure bench etcd.
func Etcd(ctx context.Context, cfg EtcdConfig) (*EtcdResult, error) {
	if u, err := url.Parse(cfg.Store); err == nil && u.Scheme == "mem" && slices.Max(cfg.Nodes) > 1 {
		return nil, errors.New("mem:// is one process's memory and the nodes are separate processes: run one node (--nodes 1) or give a store they share")
	}
	stderr := &syncWriter{w: cfg.Stderr}
	cfg.Stderr = stderr
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "tenure bench etcd: "+format+"\n", args...) }
	base, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	fst := faultstore.New(base.Driver())
	st := store.New(fst)
	defer st.Close()
	run := "bench-etcd-" + strings.ToLower(rand.Text()[:8])
	res := &EtcdResult{Store: cfg.Store, Latency: cfg.Latency, Writers: cfg.Writers, Listers: cfg.Listers, Watchers: cfg.Watchers,
		Objects: cfg.Objects, Duration: cfg.Duration, ListInterval: cfg.ListInterval, Options: cfg.Options,
		GOMAXPROCS: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU()}
	if len(cfg.ServeFlags) > 0 {
		res.Options += "; with " + strings.Join(cfg.ServeFlags, " ")
	}
	res.LoadBefore = loadAvg()
	defer func() { res.LoadAfter = loadAvg() }()

	fst.SetLatency(faultstore.AllOps, faultstore.Fixed(cfg.Latency))
	res.Ref, err = benchStorePuts(ctx, st, run+"-ref", cfg.RefDuration)
	fst.SetLatency(faultstore.AllOps, nil)
	cleanupPrefix(st, run+"-ref/")
	if err != nil {
		return nil, fmt.Errorf("the store's own puts: %w", err)
	}
	res.Ref.Latency = cfg.Latency
	progress("store create-if-absent put with %v latency: p50 %v, p99 %v (%d puts)", cfg.Latency, roundDur(res.Ref.P50), roundDur(res.Ref.P99), res.Ref.Ops)

	for _, n := range cfg.Nodes {
		group := fmt.Sprintf("%s-n%d", run, n)
		r, err := etcdRunGroup(ctx, cfg, group, n, progress)
		cleanupPrefix(st, group+"/")
		if err != nil {
			return nil, fmt.Errorf("%d node(s): %w", n, err)
		}
		if res.Ref.P50 > 0 {
			r.UpdateOverRef = durRatio(r.Ops["update"].P50, res.Ref.P50)
		}
		res.Runs = append(res.Runs, *r)
	}
	return res, nil
}

// etcdNode is one running node and its client.
type etcdNode struct {
	child *kvChild
	c     *kubernetes.Client
}

func etcdRunGroup(ctx context.Context, cfg EtcdConfig, group string, n int, progress func(string, ...any)) (*EtcdRun, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	var logw io.Writer
	if cfg.Verbose {
		logw = cfg.Stderr
	}
	nodes := make([]*etcdNode, 0, n)
	defer func() {
		for _, nd := range nodes {
			if nd.c != nil {
				nd.c.Close()
			}
		}
		var wg sync.WaitGroup
		for _, nd := range nodes {
			wg.Go(nd.child.stop)
		}
		wg.Wait()
	}()
	for i := range n {
		args := []string{"bench", EtcdNodeCommand, "--stats", "127.0.0.1:0",
			"--store", LatencyCountURL(cfg.Store, cfg.Latency), "--group", group, "--id", fmt.Sprintf("node-%d", i),
			"--peer-listen", "127.0.0.1:0", "--listen-client-urls", "http://127.0.0.1:0"}
		args = append(args, cfg.ServeFlags...)
		child, err := startNodeChild(ctx, cfg.Exe, args, etcdAPILine, hc, logw)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		nd := &etcdNode{child: child}
		nodes = append(nodes, nd)
		nd.c, err = kubernetes.New(clientv3.Config{Endpoints: []string{child.api}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("client of node %d: %w", i, err)
		}
	}
	progress("%d node(s) serving; creating %d objects", n, cfg.Objects)
	t := newEtcdTraffic(cfg, nodes)
	if err := t.fill(ctx); err != nil {
		return nil, err
	}
	// The measured phase starts after the fill's last revision.
	first, err := nodes[0].c.KV.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("the revision after the fill: %w", err)
	}
	r := &EtcdRun{Nodes: n}
	before := make([]kvNodeStats, n)
	cpuBefore := make([]time.Duration, n)
	for i, nd := range nodes {
		if before[i], err = nodeStats(ctx, hc, nd.child); err != nil {
			return nil, err
		}
		cpuBefore[i] = procCPU(nd.child.cmd.Process.Pid)
	}
	clientCPU := procCPU(os.Getpid())
	if cfg.Profile != "" {
		for _, nd := range nodes {
			if _, err := nodeCPUProfile(ctx, hc, nd.child, true); err != nil {
				return nil, err
			}
		}
	}
	progress("%d node(s): %d writers, %d listers, %d watchers for %v", n, cfg.Writers, cfg.Listers, cfg.Watchers, cfg.Duration)
	if err := t.measure(ctx, first.Header.Revision, r); err != nil {
		return nil, err
	}
	r.ClientCPU = procCPU(os.Getpid()) - clientCPU
	if cfg.Profile != "" {
		if err := os.MkdirAll(cfg.Profile, 0o777); err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
		for i, nd := range nodes {
			data, err := nodeCPUProfile(ctx, hc, nd.child, false)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(cfg.Profile, fmt.Sprintf("etcd-n%d-node-%d.cpu.pprof", n, i)), data, 0o666); err != nil {
				return nil, fmt.Errorf("--profile: %w", err)
			}
		}
	}
	r.StoreRequests = map[string]int64{}
	for i, nd := range nodes {
		after, err := nodeStats(ctx, hc, nd.child)
		if err != nil {
			return nil, err
		}
		for k, v := range after.Requests {
			r.StoreRequests[k] += v - before[i].Requests[k]
		}
		r.LogEntries += after.LogPuts - before[i].LogPuts
		r.CPU = append(r.CPU, procCPU(nd.child.cmd.Process.Pid)-cpuBefore[i])
		rss, hwm := procMem(nd.child.cmd.Process.Pid)
		r.RSS, r.HWM = append(r.RSS, rss), append(r.HWM, hwm)
	}
	r.RequestsPerWrite = map[string]float64{}
	var all int64
	for k, v := range r.StoreRequests {
		all += v
		r.RequestsPerWrite[k] = floatRatio(float64(v), float64(r.Writes))
	}
	r.AllPerWrite = floatRatio(float64(all), float64(r.Writes))
	r.WritesPerEntry = floatRatio(float64(r.Writes), float64(r.LogEntries))
	progress("%d node(s): %.0f writes/s (%d writes, %d conflicts, %d errors); update p50 %v p99 %v; watch lag p50 %v p99 %v; %.2f store requests per write",
		n, r.WritesPerSec, r.Writes, r.Conflicts, r.Errors, roundDur(r.Ops["update"].P50), roundDur(r.Ops["update"].P99),
		roundDur(r.LagP50), roundDur(r.LagP99), r.AllPerWrite)
	return r, nil
}

func nodeStats(ctx context.Context, hc *http.Client, c *kvChild) (kvNodeStats, error) {
	var st kvNodeStats
	b := &kvTenureBench{client: hc, node: c}
	st, err := b.stats(ctx, false)
	if err != nil {
		return st, fmt.Errorf("node at %s: %w", c.api, err)
	}
	return st, nil
}

// nodeCPUProfile starts the node's CPU profile, or stops it and returns
// it.
func nodeCPUProfile(ctx context.Context, hc *http.Client, c *kvChild, start bool) ([]byte, error) {
	u := c.stats + "/profile/cpu"
	if start {
		u += "?start=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the node's profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the node's profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the node's profile: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return data, nil
}

// objState is what a writer last learned of an object.
type objState struct {
	modRev int64 // 0: absent
	seen   int64 // the revision the answer was at
}

// etcdWrite is a committed write Txn.
type etcdWrite struct {
	rev   int64
	key   string
	del   bool
	acked time.Time
}

// etcdEvent is an event a watcher received.
type etcdEvent struct {
	rev int64
	key string
	del bool
	at  time.Time
}

type etcdTraffic struct {
	cfg    EtcdConfig
	nodes  []*etcdNode
	objs   []atomic.Pointer[objState]
	values []byte // random bytes; a value is a slice of them
}

func newEtcdTraffic(cfg EtcdConfig, nodes []*etcdNode) *etcdTraffic {
	t := &etcdTraffic{cfg: cfg, nodes: nodes, objs: make([]atomic.Pointer[objState], cfg.Objects), values: make([]byte, 64<<10)}
	_, _ = rand.Read(t.values)
	return t
}

// key is object i's key: its resource by i, its namespace by i / the
// number of resources.
func (t *etcdTraffic) key(i int) string {
	res := etcdResources[i%len(etcdResources)]
	return fmt.Sprintf("/registry/%s/ns-%02d/%s-%06d", res, (i/len(etcdResources))%etcdNamespaces, strings.TrimSuffix(res, "s"), i)
}

func (t *etcdTraffic) value(rng *mrand.Rand) []byte {
	n := etcdMinValue + rng.IntN(etcdMaxValue-etcdMinValue+1)
	off := rng.IntN(len(t.values) - n)
	return t.values[off : off+n]
}

// learn records what an answer at revision seen said of object i, unless
// a later answer is known already.
func (t *etcdTraffic) learn(i int, modRev, seen int64) {
	s := &objState{modRev: modRev, seen: seen}
	for {
		old := t.objs[i].Load()
		if old != nil && old.seen >= seen {
			return
		}
		if t.objs[i].CompareAndSwap(old, s) {
			return
		}
	}
}

// etcdTally is one writer's or lister's record.
type etcdTally struct {
	writes                    []etcdWrite
	creates, updates, deletes int64
	conflicts, errors, short  int64
	firstErr                  error
	lat                       map[string][]time.Duration
}

func (y *etcdTally) fail(err error) {
	y.errors++
	if y.firstErr == nil {
		y.firstErr = err
	}
}

// fill creates the objects, cfg.Writers at a time.
func (t *etcdTraffic) fill(ctx context.Context) error {
	var next atomic.Int64
	errs := make([]error, t.cfg.Writers)
	var wg sync.WaitGroup
	for w := range t.cfg.Writers {
		c := t.nodes[w%len(t.nodes)].c
		rng := mrand.New(mrand.NewPCG(uint64(w), 1))
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(t.objs) || ctx.Err() != nil {
					return
				}
				resp, err := c.Kubernetes.OptimisticPut(ctx, t.key(i), t.value(rng), 0, kubernetes.PutOptions{GetOnFailure: true})
				if err != nil {
					errs[w] = fmt.Errorf("creating %s: %w", t.key(i), err)
					return
				}
				if !resp.Succeeded {
					errs[w] = fmt.Errorf("creating %s: it exists", t.key(i))
					return
				}
				t.learn(i, resp.Revision, resp.Revision)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write makes one change to a random object as kube-apiserver does:
// retried on conflict with what the Txn's Else branch returned.
func (t *etcdTraffic) write(c *kubernetes.Client, rng *mrand.Rand, y *etcdTally) {
	i := rng.IntN(len(t.objs))
	key := t.key(i)
	var modRev int64
	if s := t.objs[i].Load(); s != nil {
		modRev = s.modRev
	}
	kind := "update"
	switch {
	case modRev == 0:
		kind = "create"
	case rng.Float64() < etcdDeleteShare:
		kind = "delete"
	}
	for {
		// A call is not cut short when the phase ends: a write whose
		// answer was lost could still be applied.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		var ok bool
		var rev int64
		var cur *int64 // the object's mod revision an Else branch returned, nil if absent
		var err error
		if kind == "delete" {
			var resp kubernetes.DeleteResponse
			resp, err = c.Kubernetes.OptimisticDelete(ctx, key, modRev, kubernetes.DeleteOptions{GetOnFailure: true})
			ok, rev = resp.Succeeded, resp.Revision
			if resp.KV != nil {
				cur = &resp.KV.ModRevision
			}
		} else {
			var resp kubernetes.PutResponse
			resp, err = c.Kubernetes.OptimisticPut(ctx, key, t.value(rng), modRev, kubernetes.PutOptions{GetOnFailure: true})
			ok, rev = resp.Succeeded, resp.Revision
			if resp.KV != nil {
				cur = &resp.KV.ModRevision
			}
		}
		cancel()
		d := time.Since(start)
		if err != nil {
			y.fail(fmt.Errorf("%s %s: %w", kind, key, err))
			return
		}
		if ok {
			y.lat[kind] = append(y.lat[kind], d)
			y.writes = append(y.writes, etcdWrite{rev: rev, key: key, del: kind == "delete", acked: time.Now()})
			switch kind {
			case "create":
				y.creates++
			case "update":
				y.updates++
			default:
				y.deletes++
			}
			if kind == "delete" {
				t.learn(i, 0, rev)
			} else {
				t.learn(i, rev, rev)
			}
			return
		}
		y.conflicts++
		y.lat["conflict"] = append(y.lat["conflict"], d)
		if cur == nil {
			t.learn(i, 0, rev)
			return // gone: NotFound for an update, nothing to do for a delete
		}
		t.learn(i, *cur, rev)
		if kind == "create" {
			return // AlreadyExists
		}
		modRev = *cur
	}
}

// list lists a resource page by page at one revision, then counts it.
func (t *etcdTraffic) list(ctx context.Context, c *kubernetes.Client, prefix string, y *etcdTally) {
	start := time.Now()
	var rev, total, got int64
	cont := ""
	for {
		ps := time.Now()
		resp, err := c.Kubernetes.List(ctx, prefix, kubernetes.ListOptions{Limit: etcdListLimit, Revision: rev, Continue: cont})
		if ctx.Err() != nil {
			return // the phase ended
		}
		if err != nil {
			y.fail(fmt.Errorf("list %s: %w", prefix, err))
			return
		}
		y.lat["page"] = append(y.lat["page"], time.Since(ps))
		if rev == 0 {
			rev, total = resp.Revision, resp.Count
		}
		got += int64(len(resp.Kvs))
		if int64(len(resp.Kvs)) >= resp.Count || len(resp.Kvs) == 0 {
			break
		}
		cont = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if got != total {
		y.short++
	}
	cs := time.Now()
	_, err := c.Kubernetes.Count(ctx, prefix, kubernetes.CountOptions{})
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		y.fail(fmt.Errorf("count %s: %w", prefix, err))
		return
	}
	y.lat["count"] = append(y.lat["count"], time.Since(cs))
	y.lat["list"] = append(y.lat["list"], time.Since(start))
}

// etcdWatcher is one watch's record.
type etcdWatcher struct {
	prefix   string
	node     int
	events   []etcdEvent
	progress int64
	behind   int64
	last     atomic.Int64 // the highest revision the watch has reported
	err      error
}

func (t *etcdTraffic) watch(ctx context.Context, c *kubernetes.Client, w *etcdWatcher, from int64) {
	ctx = clientv3.WithRequireLeader(ctx)
	ch := c.Watch(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	tick := time.NewTicker(etcdProgressEvery)
	defer tick.Stop()
	var lastEvent, lastProgress int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = c.RequestProgress(ctx)
		case resp, ok := <-ch:
			if !ok {
				if ctx.Err() == nil {
					w.err = errors.New("the watch channel closed")
				}
				return
			}
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil {
					w.err = err
				}
				return
			}
			now := time.Now()
			if resp.IsProgressNotify() {
				w.progress++
				if resp.Header.Revision < lastEvent {
					w.behind++
				}
				lastProgress = max(lastProgress, resp.Header.Revision)
				w.last.Store(max(w.last.Load(), resp.Header.Revision))
				continue
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision <= lastProgress {
					w.behind++
				}
				lastEvent = ev.Kv.ModRevision
				w.events = append(w.events, etcdEvent{rev: ev.Kv.ModRevision, key: string(ev.Kv.Key), del: ev.Type == clientv3.EventTypeDelete, at: now})
				w.last.Store(max(w.last.Load(), ev.Kv.ModRevision))
			}
		}
	}
}

// measure runs the writers, listers and watchers for the phase, then
// checks what the watchers saw.
func (t *etcdTraffic) measure(ctx context.Context, fillRev int64, r *EtcdRun) error {
	cfg := t.cfg
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchers := make([]*etcdWatcher, cfg.Watchers)
	var watching sync.WaitGroup
	for w := range watchers {
		node := (w + 1) % len(t.nodes)
		watchers[w] = &etcdWatcher{prefix: "/registry/" + etcdResources[w%len(etcdResources)] + "/", node: node}
		watching.Go(func() { t.watch(wctx, t.nodes[node].c, watchers[w], fillRev+1) })
	}
	defer watching.Wait()

	var stop atomic.Bool
	lctx, stopLists := context.WithCancel(ctx)
	defer stopLists()
	tallies := make([]*etcdTally, cfg.Writers+cfg.Listers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Writers {
		y := &etcdTally{lat: map[string][]time.Duration{}}
		tallies[w] = y
		c := t.nodes[w%len(t.nodes)].c
		rng := mrand.New(mrand.NewPCG(uint64(w), uint64(fillRev)))
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				t.write(c, rng, y)
			}
		})
	}
	for l := range cfg.Listers {
		y := &etcdTally{lat: map[string][]time.Duration{}}
		tallies[cfg.Writers+l] = y
		c := t.nodes[l%len(t.nodes)].c
		prefix := "/registry/" + etcdResources[l%len(etcdResources)] + "/"
		wg.Go(func() {
			for lctx.Err() == nil {
				began := time.Now()
				t.list(lctx, c, prefix, y)
				select {
				case <-lctx.Done():
				case <-time.After(time.Until(began.Add(cfg.ListInterval))):
				}
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Duration):
	}
	stop.Store(true)
	stopLists()
	wg.Wait()
	r.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return err
	}

	lat := map[string][]time.Duration{}
	var writes []etcdWrite
	for _, y := range tallies {
		writes = append(writes, y.writes...)
		r.Creates += y.creates
		r.Updates += y.updates
		r.Deletes += y.deletes
		r.Conflicts += y.conflicts
		r.Errors += y.errors
		r.ListsShort += y.short
		if y.firstErr != nil && r.FirstError == "" {
			r.FirstError = y.firstErr.Error()
		}
		for k, v := range y.lat {
			lat[k] = append(lat[k], v...)
		}
	}
	r.Writes = int64(len(writes))
	r.WritesPerSec = float64(r.Writes) / r.Elapsed.Seconds()
	r.Ops = map[string]etcdOpStats{}
	for k, v := range lat {
		r.Ops[k] = opStats(v)
	}

	// Wait until every watcher has reported the last committed revision.
	var lastRev int64
	for _, w := range writes {
		lastRev = max(lastRev, w.rev)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, w := range watchers {
		for w.last.Load() < lastRev && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	stopWatch()
	watching.Wait()

	byRev := make(map[int64]etcdWrite, len(writes))
	for _, w := range writes {
		byRev[w.rev] = w
	}
	var lags []time.Duration
	for _, w := range watchers {
		if w.err != nil {
			return fmt.Errorf("watch of %s on node %d: %w", w.prefix, w.node, w.err)
		}
		ws := etcdWatchStats{Prefix: w.prefix, Node: w.node, Progress: w.progress, ProgressBehind: w.behind}
		for _, x := range writes {
			if strings.HasPrefix(x.key, w.prefix) {
				ws.Expected++
			}
		}
		seen := map[int64]bool{}
		var prev int64
		var wl []time.Duration
		for _, ev := range w.events {
			if ev.rev <= prev {
				ws.OutOfOrder++
			}
			prev = max(prev, ev.rev)
			x, ok := byRev[ev.rev]
			switch {
			case !ok || x.key != ev.key || x.del != ev.del:
				ws.Unexpected++
			case seen[ev.rev]:
				ws.Duplicates++
			default:
				seen[ev.rev] = true
				ws.Seen++
				wl = append(wl, max(0, ev.at.Sub(x.acked)))
			}
		}
		ws.Missing = ws.Expected - ws.Seen
		lags = append(lags, wl...)
		slices.Sort(wl)
		ws.LagP50, ws.LagP99 = percentile(wl, 0.5), percentile(wl, 0.99)
		if len(wl) > 0 {
			ws.LagMax = wl[len(wl)-1]
		}
		r.Watches = append(r.Watches, ws)
	}
	slices.Sort(lags)
	r.LagP50, r.LagP99 = percentile(lags, 0.5), percentile(lags, 0.99)
	return nil
}

// Print writes the result as tables.
func (res *EtcdResult) Print(w io.Writer) error {
	fmt.Fprintf(w, "tenure etcd serve on %s, %v added to every store call; %s\n", res.Store, res.Latency, res.Options)
	fmt.Fprintf(w, "%d writers, %d listers (a list every %v, pages of %d), %d watchers; %d objects of 1-4 KiB; %v measured; GOMAXPROCS %d, %d CPUs; load %s -> %s\n",
		res.Writers, res.Listers, res.ListInterval, etcdListLimit, res.Watchers, res.Objects, res.Duration, res.GOMAXPROCS, res.CPUs, res.LoadBefore, res.LoadAfter)
	fmt.Fprintf(w, "the store's own create-if-absent put (reference): p50 %v, p99 %v\n\n", roundDur(res.Ref.P50), roundDur(res.Ref.P99))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "nodes\twrites/s\twrites\tcreate/update/delete\tconflicts\terrors\tupdate p50/p99\tvs store put p50\tcreate p50/p99\tdelete p50/p99\tconflict p50\tlist p50/p99\tpage p50\tcount p50\twatch lag p50/p99\tstore req/write\twrites/log entry\tRSS MiB\tCPU/write")
	for _, r := range res.Runs {
		var cpu time.Duration
		var rss []string
		for i := range r.CPU {
			cpu += r.CPU[i]
			rss = append(rss, mib(r.RSS[i]))
		}
		o := r.Ops
		fmt.Fprintf(tw, "%d\t%.0f\t%d\t%d/%d/%d\t%d\t%d\t%v/%v\t%.2fx\t%v/%v\t%v/%v\t%v\t%v/%v\t%v\t%v\t%v/%v\t%.2f\t%.1f\t%s\t%v\t%v\n",
			r.Nodes, r.WritesPerSec, r.Writes, r.Creates, r.Updates, r.Deletes, r.Conflicts, r.Errors,
			roundDur(o["update"].P50), roundDur(o["update"].P99), r.UpdateOverRef, roundDur(o["create"].P50), roundDur(o["create"].P99),
			roundDur(o["delete"].P50), roundDur(o["delete"].P99), roundDur(o["conflict"].P50), roundDur(o["list"].P50), roundDur(o["list"].P99),
			roundDur(o["page"].P50), roundDur(o["count"].P50), roundDur(r.LagP50), roundDur(r.LagP99), r.AllPerWrite, r.WritesPerEntry,
			strings.Join(rss, "/"), perPut(cpu, int(r.Writes)), perPut(r.ClientCPU, int(r.Writes)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range res.Runs {
		fmt.Fprintf(w, "\n%d node(s): store requests per write:", r.Nodes)
		for _, k := range slices.Sorted(maps.Keys(r.RequestsPerWrite)) {
			fmt.Fprintf(w, " %s %.3f", k, r.RequestsPerWrite[k])
		}
		fmt.Fprintln(w)
		if r.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
		}
		if r.ListsShort > 0 {
			fmt.Fprintf(w, "  %d lists held fewer keys than their first page's count\n", r.ListsShort)
		}
		for _, ws := range r.Watches {
			fmt.Fprintf(w, "  watch %s on node %d: %d of %d committed writes seen, %d missing, %d duplicates, %d out of order, %d unexpected; %d progress notifications (%d behind); lag p50 %v p99 %v max %v\n",
				ws.Prefix, ws.Node, ws.Seen, ws.Expected, ws.Missing, ws.Duplicates, ws.OutOfOrder, ws.Unexpected, ws.Progress, ws.ProgressBehind,
				roundDur(ws.LagP50), roundDur(ws.LagP99), roundDur(ws.LagMax))
		}
	}
	return nil
}
