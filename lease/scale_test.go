package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/memstore"
)

// startMembers starts coordinators with the default timings, all over one
// mem:// store.
func startMembers(t *testing.T, url string, owners []string, ids []string, log *slog.Logger) ([]*lease.Coordinator, []*store.Store) {
	t.Helper()
	var cs []*lease.Coordinator
	var sts []*store.Store
	for _, o := range owners {
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c, err := lease.New(lease.Config{Store: st, Mode: lease.MemberLeases, ShardIDs: ids, OwnerID: o, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		cs, sts = append(cs, c), append(sts, st)
	}
	return cs, sts
}

// waitFair waits until every shard has exactly one leader among cs and
// none holds more than ceil(shards/members), and returns how long that
// took (virtual time).
func waitFair(t *testing.T, cs []*lease.Coordinator, n int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	share := (n + len(cs) - 1) / len(cs)
	for {
		owners := make(map[string]int, n)
		fair := true
		var per []int
		for _, c := range cs {
			held := c.Held()
			per = append(per, len(held))
			fair = fair && len(held) <= share
			for _, s := range held {
				owners[s]++
			}
		}
		once := len(owners) == n
		for _, k := range owners {
			once = once && k == 1
		}
		if fair && once {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("not settled after %v: %d of %d shards led, per member %v (share %d)", limit, len(owners), n, per, share)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMemberLeases100kShardsSettle: 100,000 shards on 3 members settle
// with every shard led once and each member holding at most
// ceil(shards/members), then again when a fourth member joins a stable
// group, each in less than 10 s of (virtual) time with the default
// timings; then a member dies and the survivors take its shards within
// 10 s of its lease.
func TestMemberLeases100kShardsSettle(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 shards")
	}
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	synctest.Test(t, func(t *testing.T) {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("shard-%06d", i)
		}
		url := "mem://" + t.Name()
		cs, sts := startMembers(t, url, []string{"m0", "m1", "m2"}, ids, quiet(t))
		settle := waitFair(t, cs, n, time.Minute)
		time.Sleep(time.Minute) // stable: every member at its regular period
		c3, _ := startMembers(t, url, []string{"m3"}, ids, quiet(t))
		cs = append(cs, c3...)
		join := waitFair(t, cs, n, time.Minute)
		time.Sleep(time.Minute)
		sts[0].Close() // m0 can neither renew nor release
		death := waitFair(t, cs[1:], n, 2*time.Minute)
		t.Logf("%d shards: settled in %v, rebalanced after a join in %v, after a death in %v (virtual time)", n, settle, join, death)
		if settle > 10*time.Second || join > 10*time.Second || death > lease.DefaultLeaseDuration+10*time.Second {
			t.Errorf("settle %v, join %v: want each within 10 s; death %v: want within the lease and 10 s", settle, join, death)
		}
		for _, c := range cs {
			if err := c.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
}

// countingHandler counts log records by level and message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[slog.Level]int
	msgs   map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Level]++
	h.msgs[r.Level.String()+" "+r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestMemberLeasesLogOneLinePerChange: settling 10,000 shards logs a
// handful of lines at INFO (one per change, with counts), not one per
// shard; each shard's start is at DEBUG.
func TestMemberLeasesLogOneLinePerChange(t *testing.T) {
	const n = 10_000
	synctest.Test(t, func(t *testing.T) {
		h := &countingHandler{counts: map[slog.Level]int{}, msgs: map[string]int{}}
		cs, _ := startMembers(t, "mem://"+t.Name(), []string{"m0", "m1", "m2"}, shardIDs(n), slog.New(h))
		waitFair(t, cs, n, time.Minute)
		time.Sleep(time.Minute)
		h.mu.Lock()
		info, starts := h.counts[slog.LevelInfo], h.msgs["DEBUG leading shard"]
		t.Logf("log lines: %v", h.msgs)
		h.mu.Unlock()
		if info > 30 {
			t.Errorf("%d lines at INFO to settle %d shards on 3 members; want a few per member", info, n)
		}
		if starts < n {
			t.Errorf("%d shard starts logged at DEBUG; want one per start, at least %d", starts, n)
		}
		for _, c := range cs {
			if err := c.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
}
