package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
)

// ShardsResult is what one run of bench shards measured.
type ShardsResult struct {
	Mode            string        `json:"mode"`
	Shards          int           `json:"shards"`
	Members         int           `json:"members"`
	Settle          time.Duration `json:"settleNanos"`
	Window          time.Duration `json:"windowNanos"`
	Requests        int64         `json:"requestsInWindow"`
	RequestsPerHour float64       `json:"requestsPerHour"`
	CPUPerSecond    float64       `json:"cpuSecondsPerSecond"`
	HeapBytes       uint64        `json:"heapBytes"`
	// PeakHeapBytes is the largest live heap sampled (every 100 ms) over
	// the whole run, settle, join and death included; MaxRSSBytes is the
	// process's peak resident set at the end of the run.
	PeakHeapBytes uint64        `json:"peakHeapBytes"`
	MaxRSSBytes   int64         `json:"maxRSSBytes"`
	Goroutines    int           `json:"goroutines"`
	Join          time.Duration `json:"joinRebalanceNanos,omitempty"`
	Death         time.Duration `json:"deathTakeoverNanos"`
}

// ShardsConfig is a run of the shard-lease benchmark.
type ShardsConfig struct {
	Store   string       // the store URL
	Modes   []lease.Mode // run one group of each mode, one after the other
	Shards  int          // number of shards
	Members int          // members at the start (one more joins, one dies)
	Lease   time.Duration
	Renew   time.Duration
	// Window is the stable window over which requests, CPU and memory are
	// measured.
	Window time.Duration
	// MemProfile is a file for a heap profile taken at the end of the run;
	// "" for none.
	MemProfile string
	Log        *slog.Logger // the members' log
	Progress   io.Writer    // a line as each mode starts; nil for none
}

// Shards runs the shard-lease benchmark: for each mode, shard groups in
// this process through settling, a stable window, a join and a death.
func Shards(ctx context.Context, cfg ShardsConfig) ([]ShardsResult, error) {
	url, err := sharedStoreURL(cfg.Store)
	if err != nil {
		return nil, err
	}
	var results []ShardsResult
	for _, m := range cfg.Modes {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "bench shards: %s, %d shards on %d members…\n", m, cfg.Shards, cfg.Members)
		}
		r, err := benchShardsOnce(ctx, url, m, cfg.Shards, cfg.Members, cfg.Lease, cfg.Renew, cfg.Window, cfg.MemProfile, cfg.Log)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// PrintShards prints the results of Shards as a table.
func PrintShards(w io.Writer, results []ShardsResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "mode\tshards\tmembers\tsettle\trequests/h\tCPU/s\theap MiB\tpeak heap MiB\tmax RSS MiB\tgoroutines\tjoin rebalance\tdeath takeover\n")
	for _, r := range results {
		join := "n/a (no fair share)"
		if r.Join > 0 {
			join = r.Join.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%.0f\t%.3f\t%.1f\t%.1f\t%.1f\t%d\t%s\t%v\n", r.Mode, r.Shards, r.Members,
			r.Settle.Round(time.Millisecond), r.RequestsPerHour, r.CPUPerSecond,
			float64(r.HeapBytes)/(1<<20), float64(r.PeakHeapBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20),
			r.Goroutines, join, r.Death.Round(time.Millisecond))
	}
	return tw.Flush()
}

// sharedStoreURL makes the members of one bench share a store: an unnamed
// mem:// store is private to each Open, so it gets a name of its own.
func sharedStoreURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--store %q: %w", raw, err)
	}
	if u.Scheme == "mem" && u.Host == "" && (u.Path == "" || u.Path == "/") {
		return "mem://bench-shards-" + rand.Text()[:8], nil
	}
	return raw, nil
}

// heapSampler records the largest live heap seen until stopped.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	wg   sync.WaitGroup
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value; v.Kind() == metrics.KindUint64 {
			h.note(v.Uint64())
		}
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

// note counts a heap size read elsewhere, so that the peak is never
// below a reading reported beside it.
func (h *heapSampler) note(v uint64) {
	for {
		p := h.peak.Load()
		if v <= p || h.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	h.wg.Wait()
	return h.peak.Load()
}

type shardMember struct {
	c  *lease.Coordinator
	st *store.Store
}

func benchShardsOnce(ctx context.Context, url string, mode lease.Mode, nShards, nMembers int, leaseDur, renew, window time.Duration, memProfile string, log *slog.Logger) (r ShardsResult, err error) {
	r = ShardsResult{Mode: mode.String(), Shards: nShards, Members: nMembers, Window: window}
	heap := startHeapSampler()
	defer func() {
		r.PeakHeapBytes = heap.Stop()
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		r.MaxRSSBytes = ru.Maxrss * 1024
	}()
	ids := make([]string, nShards)
	for i := range ids {
		ids[i] = fmt.Sprintf("shard-%05d", i)
	}
	prefix := "bench-shards-" + rand.Text()[:8] + "/"
	var requests atomic.Int64
	var all []*shardMember
	start := func(id string) (*shardMember, error) {
		st, err := store.Open(ctx, url, store.WithObserver(func(store.Call) { requests.Add(1) }))
		if err != nil {
			return nil, err
		}
		c, err := lease.New(lease.Config{Store: st, Prefix: prefix, ShardIDs: ids, OwnerID: id, Mode: mode,
			LeaseDuration: leaseDur, RenewPeriod: renew, Logger: log})
		if err != nil {
			st.Close()
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			st.Close()
			return nil, err
		}
		m := &shardMember{c: c, st: st}
		all = append(all, m)
		return m, nil
	}
	defer func() {
		for _, m := range all {
			sctx, cancel := context.WithTimeout(context.Background(), leaseDur)
			_ = m.c.Stop(sctx)
			cancel()
			m.st.Close()
		}
	}()
	// settled reports whether every shard has exactly one leader among
	// live, and (for member leases) nobody holds more than its share. It
	// counts into one reused slice, so that checking makes no garbage
	// beyond the held sets themselves.
	index := make(map[string]int, nShards)
	for i, id := range ids {
		index[id] = i
	}
	owners := make([]uint8, nShards)
	settled := func(live []*shardMember, fair bool) bool {
		clear(owners)
		for _, m := range live {
			held := m.c.Held()
			if fair && len(held) > (nShards+len(live)-1)/len(live) {
				return false
			}
			for _, s := range held {
				if i, ok := index[s]; ok && owners[i] < 2 {
					owners[i]++
				}
			}
		}
		for _, n := range owners {
			if n != 1 {
				return false
			}
		}
		return true
	}
	// Each check reads every member's held set: space them out with many
	// shards, so that the bench does not compete with what it measures.
	poll := max(10*time.Millisecond, time.Duration(nShards)*5*time.Microsecond/2)
	wait := func(live []*shardMember, fair bool, limit time.Duration) (time.Duration, error) {
		begin := time.Now()
		for time.Since(begin) < limit {
			if settled(live, fair) {
				return time.Since(begin), nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(poll):
			}
		}
		return 0, fmt.Errorf("bench shards: %s did not settle within %v", mode, limit)
	}
	fair := mode == lease.MemberLeases
	var live []*shardMember
	for i := 0; i < nMembers; i++ {
		m, err := start(fmt.Sprintf("member-%d", i))
		if err != nil {
			return r, err
		}
		live = append(live, m)
	}
	// Shard leases have no fair share: settling means one leader each.
	d, err := wait(live, fair, 20*leaseDur)
	if err != nil {
		return r, err
	}
	r.Settle = d
	time.Sleep(leaseDur) // let followers reach their stable polling

	// The stable window: requests, CPU and memory.
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	requests.Store(0)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(window):
	}
	r.Requests = requests.Load()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime)) +
		time.Duration(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))
	r.RequestsPerHour = float64(r.Requests) * float64(time.Hour) / float64(window)
	r.CPUPerSecond = cpu.Seconds() / window.Seconds()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapBytes, r.Goroutines = ms.HeapAlloc, runtime.NumGoroutine()
	heap.note(ms.HeapAlloc)

	// A member joins.
	if fair {
		m, err := start(fmt.Sprintf("member-%d", nMembers))
		if err != nil {
			return r, err
		}
		live = append(live, m)
		if r.Join, err = wait(live, true, 20*leaseDur); err != nil {
			return r, err
		}
	}
	// A member dies: its store is closed under it, so it can neither
	// renew nor release.
	dead := live[0]
	dead.st.Close()
	live = live[1:]
	if r.Death, err = wait(live, false, 20*leaseDur); err != nil {
		return r, err
	}
	if memProfile != "" {
		return r, writeHeapProfile(memProfile)
	}
	return r, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
