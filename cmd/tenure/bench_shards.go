package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
)

// shardsResult is what one run of bench shards measured.
type shardsResult struct {
	Mode            string        `json:"mode"`
	Shards          int           `json:"shards"`
	Members         int           `json:"members"`
	Settle          time.Duration `json:"settleNanos"`
	Window          time.Duration `json:"windowNanos"`
	Requests        int64         `json:"requestsInWindow"`
	RequestsPerHour float64       `json:"requestsPerHour"`
	CPUPerSecond    float64       `json:"cpuSecondsPerSecond"`
	HeapBytes       uint64        `json:"heapBytes"`
	MaxRSSBytes     int64         `json:"maxRSSBytes"`
	Goroutines      int           `json:"goroutines"`
	Join            time.Duration `json:"joinRebalanceNanos,omitempty"`
	Death           time.Duration `json:"deathTakeoverNanos"`
}

func runBenchShards(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench shards", "bench shards --store URL [--shards N] [--members M] [--mode member|shard|both] [--lease D] [--renew D] [--window D] [--json]")
	storeURL := fs.String("store", "", "store URL (required), e.g. s3://bucket/prefix?endpoint=… or etcd://host:2379/prefix")
	shards := fs.Int("shards", 1000, "number of shards")
	members := fs.Int("members", 3, "members at the start (one more joins, one dies)")
	mode := fs.String("mode", "both", "member, shard or both")
	leaseDur := fs.Duration("lease", lease.DefaultLeaseDuration, "LeaseDuration")
	renew := fs.Duration("renew", lease.DefaultRenewPeriod, "RenewPeriod")
	window := fs.Duration("window", 2*time.Minute, "stable window over which requests, CPU and memory are measured")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *storeURL == "" || *shards < 1 || *members < 2 {
		fmt.Fprintln(e.stderr, "tenure bench shards: --store is required; --shards ≥ 1; --members ≥ 2")
		fs.Usage()
		return errUsage
	}
	var modes []lease.Mode
	switch *mode {
	case "member":
		modes = []lease.Mode{lease.MemberLeases}
	case "shard":
		modes = []lease.Mode{lease.ShardLeases}
	case "both":
		modes = []lease.Mode{lease.MemberLeases, lease.ShardLeases}
	default:
		return fmt.Errorf("--mode %q: want member, shard or both", *mode)
	}
	var results []shardsResult
	for _, m := range modes {
		if !*asJSON {
			fmt.Fprintf(e.stderr, "bench shards: %s, %d shards on %d members…\n", m, *shards, *members)
		}
		r, err := benchShardsOnce(ctx, *storeURL, m, *shards, *members, *leaseDur, *renew, *window)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "mode\tshards\tmembers\tsettle\trequests/h\tCPU/s\theap MiB\tmax RSS MiB\tgoroutines\tjoin rebalance\tdeath takeover\n")
	for _, r := range results {
		join := "n/a (no fair share)"
		if r.Join > 0 {
			join = r.Join.Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%v\t%.0f\t%.3f\t%.1f\t%.1f\t%d\t%s\t%v\n", r.Mode, r.Shards, r.Members,
			r.Settle.Round(time.Millisecond), r.RequestsPerHour, r.CPUPerSecond,
			float64(r.HeapBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20), r.Goroutines, join, r.Death.Round(time.Millisecond))
	}
	return w.Flush()
}

type shardMember struct {
	c  *lease.Coordinator
	st *store.Store
}

func benchShardsOnce(ctx context.Context, url string, mode lease.Mode, nShards, nMembers int, leaseDur, renew, window time.Duration) (shardsResult, error) {
	r := shardsResult{Mode: mode.String(), Shards: nShards, Members: nMembers, Window: window}
	ids := make([]string, nShards)
	for i := range ids {
		ids[i] = fmt.Sprintf("shard-%05d", i)
	}
	prefix := "bench-shards-" + rand.Text()[:8] + "/"
	var requests atomic.Int64
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var all []*shardMember
	start := func(id string) (*shardMember, error) {
		st, err := store.Open(ctx, url, store.WithObserver(func(store.Call) { requests.Add(1) }))
		if err != nil {
			return nil, err
		}
		c, err := lease.New(lease.Config{Store: st, Prefix: prefix, ShardIDs: ids, OwnerID: id, Mode: mode,
			LeaseDuration: leaseDur, RenewPeriod: renew, Logger: quiet})
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
	// live, and (for member leases) nobody holds more than its share.
	settled := func(live []*shardMember, fair bool) bool {
		owners := make(map[string]int, nShards)
		for _, m := range live {
			held := m.c.Held()
			if fair && len(held) > (nShards+len(live)-1)/len(live) {
				return false
			}
			for _, s := range held {
				owners[s]++
			}
		}
		if len(owners) != nShards {
			return false
		}
		for _, n := range owners {
			if n != 1 {
				return false
			}
		}
		return true
	}
	wait := func(live []*shardMember, fair bool, limit time.Duration) (time.Duration, error) {
		begin := time.Now()
		for time.Since(begin) < limit {
			if settled(live, fair) {
				return time.Since(begin), nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(10 * time.Millisecond):
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
	r.HeapBytes, r.MaxRSSBytes, r.Goroutines = ms.HeapAlloc, ru1.Maxrss*1024, runtime.NumGoroutine()

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
	return r, nil
}
