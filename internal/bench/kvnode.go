package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
)

// The node that tenure bench kv measures is `tenure kv serve` itself, run
// as a child process through the hidden `tenure bench kv-node --stats ADDR
// KV-SERVE-FLAGS…`: the same code with the same defaults, but its store URL
// is "benchkv:///?url=INNER", which opens INNER wrapped in faultstore (the
// request counts tenure bench rsm uses) over a wrapper that adds what
// faultstore does not count: bytes put and read, by kind of object, and the
// times of snapshot writes. The child serves those on ADDR at /stats.

const (
	// KVNodeCommand is tenure bench's hidden subcommand that runs the node
	// tenure bench kv measures; see StartKVNode.
	KVNodeCommand = "kv-node"
	// EtcdNodeCommand is the same for tenure bench etcd's nodes, which
	// run tenure etcd serve; see StartKVNode.
	EtcdNodeCommand  = "etcd-node"
	kvCountScheme    = "benchkv"
	kvNodeProfileNow = "--cpu-profile-now"
)

// CountURL is the URL of the store that counts the calls tenure bench
// kv's node makes to the store inner.
func CountURL(inner string) string {
	return kvCountScheme + ":///?url=" + url.QueryEscape(inner)
}

// LatencyCountURL is CountURL with latency added before every call to
// inner, as tenure bench rsm --latency adds it.
func LatencyCountURL(inner string, latency time.Duration) string {
	if latency == 0 {
		return CountURL(inner)
	}
	return CountURL(inner) + "&latency=" + latency.String()
}

// CountedStore returns the store URL that storeURL counts the calls of,
// if it is the URL of the store tenure bench kv's node counts.
func CountedStore(storeURL string) (inner string, ok bool) {
	u, err := url.Parse(storeURL)
	if err != nil || u.Scheme != kvCountScheme {
		return "", false
	}
	return u.Query().Get("url"), true
}

var (
	registerKVCount sync.Once
	// kvNodeTracker is the tracker of the store the child opened; nil
	// before it did.
	kvNodeTracker atomic.Pointer[kvTracker]
)

// StartKVNode makes this process the node tenure bench kv measures, from
// the arguments after KVNodeCommand: --stats ADDR [--cpu-profile-now],
// then the flags of tenure kv serve, which it returns for the caller to
// serve with (after EtcdNodeCommand, those of tenure etcd serve). It registers the counting store's URL scheme, serves the
// counts on ADDR, and with --cpu-profile-now starts the CPU profile (a
// cold start's). stop stops serving the counts.
func StartKVNode(args []string, stdout io.Writer) (serveArgs []string, stop func(), err error) {
	if len(args) < 2 || args[0] != "--stats" {
		return nil, nil, errors.New("tenure bench kv-node and etcd-node: want --stats ADDR [--cpu-profile-now] then the flags of tenure kv serve or etcd serve")
	}
	addr := args[1]
	args = args[2:]
	if len(args) > 0 && args[0] == kvNodeProfileNow {
		// Profile from the start (a cold start), until /profile/cpu
		// stops it.
		args = args[1:]
		buf := &bytes.Buffer{}
		if err := pprof.StartCPUProfile(buf); err != nil {
			return nil, nil, err
		}
		kvNodeCPU.mu.Lock()
		kvNodeCPU.buf = buf
		kvNodeCPU.mu.Unlock()
	}
	registerKVCount.Do(func() { store.Register(kvCountScheme, openCountedStore) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--stats %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", serveKVNodeStats)
	mux.HandleFunc("/profile/cpu", serveKVNodeCPUProfile)
	mux.HandleFunc("/profile/heap", serveKVNodeHeapProfile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	fmt.Fprintf(stdout, "tenure bench kv-node: stats on http://%s\n", ln.Addr())
	return args, func() {
		srv.Close()
		<-served
	}, nil
}

func openCountedStore(ctx context.Context, u *url.URL, _ store.OpenOptions) (driver.Store, error) {
	inner := u.Query().Get("url")
	if inner == "" {
		return nil, errors.New("benchkv: the URL has no url parameter")
	}
	base, err := store.Open(ctx, inner)
	if err != nil {
		return nil, err
	}
	var latency time.Duration
	if l := u.Query().Get("latency"); l != "" {
		if latency, err = time.ParseDuration(l); err != nil || latency < 0 {
			base.Close()
			return nil, fmt.Errorf("benchkv: latency %q: want a duration of zero or more", l)
		}
	}
	t := &kvTracker{logEnd: map[uint64]int64{}}
	// The fault store owns the counting driver, which owns the inner one.
	t.fst = faultstore.New(&countingDriver{inner: base.Driver(), t: t})
	if latency > 0 {
		t.fst.SetLatency(faultstore.AllOps, faultstore.Fixed(latency))
	}
	kvNodeTracker.Store(t)
	return t.fst, nil
}

// kvNodeStats is what the child's /stats returns: totals since the store
// was opened.
type kvNodeStats struct {
	Requests      map[string]int64 `json:"requests"` // by faultstore op
	PutBytes      int64            `json:"putBytes"` // values of successful puts
	GetBytes      int64            `json:"getBytes"` // values read
	LogPuts       int64            `json:"logPuts"`
	LogBytes      int64            `json:"logBytes"`
	SnapshotPuts  int64            `json:"snapshotPuts"`
	SnapshotBytes int64            `json:"snapshotBytes"`
	BaseBytes     int64            `json:"baseBytes"` // of SnapshotBytes, new bases' parts
	OtherPuts     int64            `json:"otherPuts"`
	OtherBytes    int64            `json:"otherBytes"`
	Snapshots     []kvSnapEvent    `json:"snapshots"`
	// HeapLive is the heap after a collection (with ?gc=1), else 0.
	HeapLive uint64 `json:"heapLiveBytes,omitempty"`
}

// kvSnapEvent is one snapshot written. Times are Unix nanoseconds.
type kvSnapEvent struct {
	// Captured is when the log entry the snapshot ends at was written:
	// the state is captured after it is applied. 0 until the truncation
	// that follows the snapshot names that entry (or when this process
	// did not write it).
	Captured int64  `json:"captured,omitempty"`
	Start    int64  `json:"start"` // the store write of the snapshot
	End      int64  `json:"end"`
	Bytes    int64  `json:"bytes"`
	EndIndex uint64 `json:"endIndex,omitempty"`
}

// window is the span during which the snapshot was being taken: from its
// capture (or, when that is unknown, its write) to the end of its write.
func (s kvSnapEvent) window() (from, to int64) {
	if s.Captured > 0 && s.Captured < s.Start {
		return s.Captured, s.End
	}
	return s.Start, s.End
}

func serveKVNodeStats(w http.ResponseWriter, r *http.Request) {
	var st kvNodeStats
	if t := kvNodeTracker.Load(); t != nil {
		st = t.stats()
	}
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st.HeapLive = ms.HeapAlloc
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// kvNodeCPU is the CPU profile being recorded, nil if none.
var kvNodeCPU struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

// serveKVNodeCPUProfile starts a CPU profile (POST ?start=1) or stops the
// one running and returns it (POST), for tenure bench kv --profile.
func serveKVNodeCPUProfile(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	kvNodeCPU.mu.Lock()
	defer kvNodeCPU.mu.Unlock()
	if r.URL.Query().Get("start") == "1" {
		if kvNodeCPU.buf != nil {
			http.Error(w, "a CPU profile is already running", http.StatusConflict)
			return
		}
		buf := &bytes.Buffer{}
		if err := pprof.StartCPUProfile(buf); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		kvNodeCPU.buf = buf
		return
	}
	if kvNodeCPU.buf == nil {
		http.Error(w, "no CPU profile is running", http.StatusConflict)
		return
	}
	pprof.StopCPUProfile()
	buf := kvNodeCPU.buf
	kvNodeCPU.buf = nil
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(buf.Bytes())
}

// serveKVNodeHeapProfile returns a heap profile taken after a collection.
func serveKVNodeHeapProfile(w http.ResponseWriter, _ *http.Request) {
	runtime.GC()
	w.Header().Set("Content-Type", "application/octet-stream")
	_ = pprof.Lookup("heap").WriteTo(w, 0)
}

type kvTracker struct {
	fst *faultstore.Store

	mu        sync.Mutex
	st        kvNodeStats
	logEnd    map[uint64]int64 // log index → end of its write, until truncated
	snapshots []kvSnapEvent
}

func (t *kvTracker) stats() kvNodeStats {
	counts := t.fst.Counts()
	t.mu.Lock()
	st := t.st
	st.Snapshots = append([]kvSnapEvent(nil), t.snapshots...)
	t.mu.Unlock()
	st.Requests = map[string]int64{}
	for _, op := range []faultstore.Op{faultstore.OpGet, faultstore.OpPutCreate, faultstore.OpPutCAS, faultstore.OpDelete, faultstore.OpList} {
		st.Requests[op.String()] = counts.OpTotal(op)
	}
	return st
}

// logIndex returns the index of a log entry's key, or false.
func logIndex(key string) (uint64, bool) {
	i := strings.LastIndex(key, "/log/")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(key[i+len("/log/"):], 10, 64)
	return n, err == nil
}

func (t *kvTracker) put(key string, n int, start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.st.PutBytes += int64(n)
	if i, ok := logIndex(key); ok {
		t.st.LogPuts++
		t.st.LogBytes += int64(n)
		t.logEnd[i] = end.UnixNano()
		return
	}
	if strings.HasSuffix(key, "/snapshot") {
		t.st.SnapshotPuts++
		t.st.SnapshotBytes += int64(n)
		t.snapshots = append(t.snapshots, kvSnapEvent{Start: start.UnixNano(), End: end.UnixNano(), Bytes: int64(n)})
		return
	}
	if i := strings.Index(key, "/snap/"); i >= 0 { // a snapshot's base part or log segment
		t.st.SnapshotPuts++
		t.st.SnapshotBytes += int64(n)
		if strings.HasPrefix(key[i+len("/snap/"):], "b") {
			t.st.BaseBytes += int64(n)
		}
		return
	}
	t.st.OtherPuts++
	t.st.OtherBytes += int64(n)
}

// deleted notes a truncated log entry: the leader truncates the entries a
// snapshot covers right after writing it, so the highest one deleted is
// where the last snapshot ends.
func (t *kvTracker) deleted(key string) {
	i, ok := logIndex(key)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.snapshots); n > 0 && i > t.snapshots[n-1].EndIndex {
		s := &t.snapshots[n-1]
		s.EndIndex, s.Captured = i, t.logEnd[i]
	}
	delete(t.logEnd, i)
}

func (t *kvTracker) got(n int) {
	t.mu.Lock()
	t.st.GetBytes += int64(n)
	t.mu.Unlock()
}

// countingDriver passes every call on and tells its tracker what
// succeeded.
type countingDriver struct {
	inner driver.Store
	t     *kvTracker
}

var (
	_ driver.Limits = (*countingDriver)(nil)
	_ driver.Reader = (*countingDriver)(nil)
)

func (d *countingDriver) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := d.inner.Get(ctx, key)
	if err == nil {
		d.t.got(len(data))
	}
	return data, v, err
}

// ReadInto passes a read without a version on as such (driver.Reader),
// so that the node measured reads as it would without the wrappers.
func (d *countingDriver) ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	var data []byte
	var err error
	if r, ok := d.inner.(driver.Reader); ok {
		data, err = r.ReadInto(ctx, key, buf, max)
	} else {
		data, _, err = d.inner.GetLimited(ctx, key, max)
	}
	if err == nil {
		d.t.got(len(data))
	}
	return data, err
}

func (d *countingDriver) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	data, v, err := d.inner.GetLimited(ctx, key, max)
	if err == nil {
		d.t.got(len(data))
	}
	return data, v, err
}

func (d *countingDriver) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	start := time.Now()
	v, err := d.inner.Put(ctx, key, data, cond)
	if err == nil {
		d.t.put(key, len(data), start, time.Now())
	}
	return v, err
}

func (d *countingDriver) Delete(ctx context.Context, key string, cond driver.Cond) error {
	err := d.inner.Delete(ctx, key, cond)
	if err == nil {
		d.t.deleted(key)
	}
	return err
}

func (d *countingDriver) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	return d.inner.List(ctx, prefix, after, limit)
}

// Pack passes packing on (driver.Packer).
func (d *countingDriver) Pack(ctx context.Context, prefix string) (bool, error) {
	return driver.Pack(ctx, d.inner, prefix)
}

// Packs is the inner driver's (driver.Packer).
func (d *countingDriver) Packs() bool { return driver.Packs(d.inner) }

// ListKeys passes a listing without versions on as such
// (driver.KeyLister).
func (d *countingDriver) ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	return driver.ListKeys(ctx, d.inner, prefix, after, limit)
}

func (d *countingDriver) ErrorKind(err error) driver.Kind { return d.inner.ErrorKind(err) }

func (d *countingDriver) CheckKey(key string) error {
	if l, ok := d.inner.(driver.Limits); ok {
		return l.CheckKey(key)
	}
	return nil
}

func (d *countingDriver) Close() error { return d.inner.Close() }
