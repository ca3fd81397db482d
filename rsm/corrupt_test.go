package rsm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

// Corrupt objects in the store are reported, never applied, and do not make
// a node crash or hammer the store (DESIGN.md section 4). These tests write
// damaged objects straight into a memstore under running or starting nodes.

const corruptGroup = "g"

func logKeyOf(index uint64) string { return fmt.Sprintf("%s/log/%020d", corruptGroup, index) }

const (
	snapshotKeyOf    = corruptGroup + "/snapshot"
	leaderStateKeyOf = corruptGroup + "/leader_state.json"
)

// callLog records the store calls that reached the driver, per key.
type callLog struct {
	mu   sync.Mutex
	gets map[string][]time.Time
	puts map[string]int
}

func (c *callLog) observe(call store.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch call.Op {
	case "get":
		c.gets[call.Key] = append(c.gets[call.Key], time.Now())
	case "put":
		c.puts[call.Key]++
	}
}

func (c *callLog) getTimes(key string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.gets[key]...)
}

func (c *callLog) putCount(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[key]
}

// newCluster returns a memstore and the test's own, unobserved, view of it.
func newCluster() (*memstore.Store, *store.Store) {
	mem := memstore.New()
	return mem, store.New(mem)
}

// logRecorder keeps a host's log lines, to check what was reported.
type logRecorder struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.Write(p)
}

// bytes returns a copy of the lines so far.
func (r *logRecorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.b.Bytes())
}

func (r *logRecorder) contains(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.b.String(), s)
}

type corruptHost struct {
	h     *rsm.Host
	reg   *prometheus.Registry
	log   *logRecorder
	calls *callLog // the host's own store calls
}

// startCorruptHost starts a host on mem through a store of its own that
// records its calls, with its own metrics registry and a log recorder.
func startCorruptHost(t *testing.T, mem driver.Store, id string) *corruptHost {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := &corruptHost{reg: prometheus.NewRegistry(), log: &logRecorder{},
		calls: &callLog{gets: map[string][]time.Time{}, puts: map[string]int{}}}
	st := store.New(mem, store.WithObserver(ch.calls.observe))
	logger := slog.New(slog.NewTextHandler(ch.log, &slog.HandlerOptions{Level: slog.LevelDebug})).With("id", id)
	ch.h, err = rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: id, Addr: lis.Addr().String(), Listener: lis, Logger: logger, Registerer: ch.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.h.Close() })
	return ch
}

func (ch *corruptHost) join(t *testing.T, opts rsm.Options) *rsm.Node {
	t.Helper()
	n, err := ch.h.Join(t.Context(), corruptGroup, map[string]rsm.StateMachine{"counter": &counter{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// corruptCount reads tenure_rsm_corrupt_objects_total{object=kind}.
func (ch *corruptHost) corruptCount(t *testing.T, kind string) float64 {
	t.Helper()
	mfs, err := ch.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "tenure_rsm_corrupt_objects_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "object" && l.GetValue() == kind {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// handled reads tenure_rsm_handled_requests_total for commands with the
// given outcome.
func (ch *corruptHost) handled(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := ch.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "tenure_rsm_handled_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// poll calls check every few milliseconds until done reports true; it fails
// the test after 20 s. check may fail the test itself: it sees every state
// the node passes through while polling.
func poll(t *testing.T, what string, check func() (done bool)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// corruptOptions: fastOptions with a base retry delay long enough that a
// loop without backoff stands out against one with it.
func corruptOptions() rsm.Options {
	o := fastOptions()
	o.Retry.BaseDelay = 20 * time.Millisecond
	return o
}

// assertBackoff fails if the host's reads of key, from the from-th on, came
// faster than a retry loop with backoff allows: each retry sleeps at least
// BaseDelay less 20% jitter, so n reads span at least n-2 such sleeps (the
// first retry may follow at once). Slowness cannot fail it.
func (ch *corruptHost) assertBackoff(t *testing.T, key string, from int, o rsm.Options) {
	t.Helper()
	ts := ch.calls.getTimes(key)[from:]
	if len(ts) < 3 {
		t.Fatalf("%d reads of %s: too few to judge", len(ts), key)
	}
	span := ts[len(ts)-1].Sub(ts[1])
	if floor := time.Duration(len(ts)-2) * o.Retry.BaseDelay / 2; span < floor {
		t.Fatalf("%d reads of %s within %v (floor %v): a retry loop without backoff", len(ts), key, span, floor)
	}
}

func (ch *corruptHost) reads(key string) int { return len(ch.calls.getTimes(key)) }

// replaceRaw overwrites an existing object, as bit rot or a careless
// operator would.
func replaceRaw(t *testing.T, st *store.Store, key string, data []byte) {
	t.Helper()
	_, version, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if _, err := st.Put(t.Context(), key, data, store.IfMatch(version)); err != nil {
		t.Fatalf("replace %s: %v", key, err)
	}
}

func getRaw(t *testing.T, st *store.Store, key string) []byte {
	t.Helper()
	b, _, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func command(t *testing.T, n *rsm.Node, want uint64) {
	t.Helper()
	res, err := n.Command(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatalf("command: %v", err)
	}
	if got := decodeCount(t, res); got != want {
		t.Fatalf("command returned count %d, want %d", got, want)
	}
}

var garbage = []byte("this is not a log entry, a snapshot or a leader state")

// putGarbageAtNextSlot commits count commands through leader n, then puts
// garbage in the slot it writes next and returns that slot's index.
func putGarbageAtNextSlot(t *testing.T, st *store.Store, n *rsm.Node, count uint64) uint64 {
	t.Helper()
	for i := uint64(1); i <= count; i++ {
		command(t, n, i)
	}
	next := n.Status().ApplyIndex + 1
	if _, err := st.Put(t.Context(), logKeyOf(next), garbage, store.IfAbsent()); err != nil {
		t.Fatalf("the next slot %d is taken: %v", next, err)
	}
	return next
}

// TestCorruptEntryAtNextSlot: garbage lands in the slot a running leader
// writes next. The leader must apply nothing from the slot on, report the
// object (log, status, metric) and retry with backoff, never replacing it;
// its command fails at once naming the object, as of unknown outcome (it
// was sent). Once the object is deleted the node recovers and serves.
func TestCorruptEntryAtNextSlot(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	a := startCorruptHost(t, mem, "a")
	n := a.join(t, opts)
	waitLeader(t, n)
	badIndex := putGarbageAtNextSlot(t, st, n, 3)
	bad := logKeyOf(badIndex)

	res, err := n.Command(ctxT(t, 60*time.Second), "counter", nil)
	if !errors.Is(err, rsm.ErrCorrupt) || !errors.Is(err, rsm.ErrUnknownOutcome) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("command over a corrupt slot: %x, %v; want ErrCorrupt naming %s, as of unknown outcome", res, err, bad)
	}
	if s := n.Status(); !strings.Contains(s.Problem, bad) {
		t.Fatalf("status %+v does not name the corrupt object", s)
	}
	poll(t, "ten reads of the corrupt entry", func() bool {
		if s := n.Status(); s.ApplyIndex >= badIndex {
			t.Fatalf("applied index %d, at or past the corrupt entry at %d", s.ApplyIndex, badIndex)
		}
		return a.reads(bad) >= 10
	})
	if got := getRaw(t, st, bad); !bytes.Equal(got, garbage) {
		t.Fatalf("the corrupt object was replaced by %q", got)
	}
	a.assertBackoff(t, bad, 0, opts)
	if !a.log.contains(bad) {
		t.Fatalf("the corrupt object %s was never reported in the log", bad)
	}

	// The operator deletes the object: the slot was above the commit
	// index (nothing after it says otherwise), so the leader seals it and
	// serves again. The failed command never landed.
	if err := st.Delete(t.Context(), bad, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the node serves again", func() bool {
		s := n.Status()
		return s.State == "JOINED" && s.Problem == ""
	})
	command(t, n, 4)
	res, err = n.Read(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeCount(t, res); got != 4 {
		t.Fatalf("read %d after recovery, want 4", got)
	}
}

// TestCorruptEntryFailsCommandsAndReads: while the slot holds garbage, a
// command's outcome is unknown and a read is refused: neither answers
// from the state past it.
func TestCorruptEntryFailsCommandsAndReads(t *testing.T) {
	mem, st := newCluster()
	a := startCorruptHost(t, mem, "a")
	n := a.join(t, corruptOptions())
	waitLeader(t, n)
	badIndex := putGarbageAtNextSlot(t, st, n, 2)
	_, err := n.Command(ctxT(t, time.Second), "counter", nil)
	if !errors.Is(err, rsm.ErrUnknownOutcome) {
		t.Fatalf("command over a corrupt slot: %v, want ErrUnknownOutcome", err)
	}
	if res, err := n.Read(ctxT(t, 500*time.Millisecond), "counter", nil); err == nil {
		t.Fatalf("read answered %x while the leader cannot take over", res)
	}
	if s := n.Status(); s.ApplyIndex >= badIndex || s.State == "JOINED" {
		t.Fatalf("status %+v with a corrupt entry at %d", s, badIndex)
	}
}

// TestCorruptEntryMetric: a corrupt entry met by a leader's write and
// takeover is counted in tenure_rsm_corrupt_objects_total.
func TestCorruptEntryMetric(t *testing.T) {
	mem, st := newCluster()
	a := startCorruptHost(t, mem, "a")
	n := a.join(t, corruptOptions())
	waitLeader(t, n)
	bad := logKeyOf(putGarbageAtNextSlot(t, st, n, 1))
	_, _ = n.Command(ctxT(t, time.Second), "counter", nil)
	poll(t, "five reads of the corrupt entry", func() bool { return a.reads(bad) >= 5 })
	if got := a.corruptCount(t, "log"); got == 0 {
		t.Fatalf("tenure_rsm_corrupt_objects_total{object=\"log\"} is %v after %d reads of %s", got, a.reads(bad), bad)
	}
}

// TestCommandAfterUnknownOutcome: a command that timed out without reaching
// the log must not block the node's later commands. ErrUnknownOutcome
// says a retry through the same node is safe.
func TestCommandAfterUnknownOutcome(t *testing.T) {
	mem, st := newCluster()
	a := startCorruptHost(t, mem, "a")
	n := a.join(t, corruptOptions())
	waitLeader(t, n)
	bad := logKeyOf(putGarbageAtNextSlot(t, st, n, 2))
	if _, err := n.Command(ctxT(t, time.Second), "counter", nil); !errors.Is(err, rsm.ErrUnknownOutcome) {
		t.Fatalf("command over a corrupt slot: %v, want ErrUnknownOutcome", err)
	}
	if err := st.Delete(t.Context(), bad, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	res, err := n.Command(ctxT(t, 10*time.Second), "counter", nil)
	if err != nil {
		t.Fatalf("command after the cleanup: %v (%v refused as out of sequence)", err, a.handled(t, "REQUEST_OUT_OF_SEQUENCE"))
	}
	if got := decodeCount(t, res); got != 3 {
		t.Fatalf("count %d, want 3: the timed-out command never reached the log", got)
	}
}

// TestCorruptCommittedEntryBeforeCatchUp: a committed entry is damaged
// while no node runs; a node starting on the group must stop before it.
func TestCorruptCommittedEntryBeforeCatchUp(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	a := startCorruptHost(t, mem, "a")
	na := a.join(t, opts)
	waitLeader(t, na)
	for i := uint64(1); i <= 5; i++ {
		command(t, na, i)
	}
	last := na.Status().ApplyIndex
	if err := a.h.Close(); err != nil {
		t.Fatal(err)
	}
	const badIndex = 3
	if last <= badIndex {
		t.Fatalf("only %d entries written", last)
	}
	bad := logKeyOf(badIndex)
	orig := getRaw(t, st, bad)
	damaged := bytes.Clone(orig)
	damaged[len(damaged)-1] ^= 1
	replaceRaw(t, st, bad, damaged)

	b := startCorruptHost(t, mem, "b")
	nb := b.join(t, opts)
	poll(t, "five reads of the corrupt entry", func() bool {
		if s := nb.Status(); s.ApplyIndex >= badIndex || s.State == "JOINED" {
			t.Fatalf("node b reached %+v past a corrupt entry at %d", s, badIndex)
		}
		return b.reads(bad) >= 5
	})
	if _, err := nb.Read(ctxT(t, 500*time.Millisecond), "counter", nil); err == nil {
		t.Fatal("a read answered from a log with a corrupt entry")
	}
	if got := getRaw(t, st, bad); !bytes.Equal(got, damaged) {
		t.Fatalf("the corrupt entry was replaced")
	}
	if s := nb.Status(); s.ApplyIndex >= badIndex {
		t.Fatalf("node b applied up to %d, past the corrupt entry at %d", s.ApplyIndex, badIndex)
	}
	b.assertBackoff(t, bad, 0, opts)
	if !b.log.contains(bad) {
		t.Fatalf("the corrupt entry %s was never reported in the log", bad)
	}
}

// TestCorruptSnapshotFreshNode: the snapshot is damaged under a running
// leader; a fresh node that must load it reports it at every join
// attempt, reads it once, and applies nothing.
func TestCorruptSnapshotFreshNode(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	a := startCorruptHost(t, mem, "a")
	na := a.join(t, opts)
	waitLeader(t, na)
	// Twice the threshold makes a snapshot due; it is written by a worker
	// of its own, which a loaded machine may run after the last command.
	var count uint64
	for count < 2*uint64(opts.SnapshotThreshold) {
		count++
		command(t, na, count)
	}
	poll(t, "a snapshot", func() bool { return na.Status().SnapshotIndex > 0 })
	// Snapshots due by now are written before the damage: what is
	// counted below is what the damage causes.
	poll(t, "no snapshot due", func() bool {
		s := na.Status()
		return s.ApplyIndex-s.SnapshotIndex < uint64(opts.SnapshotThreshold)
	})
	orig := getRaw(t, st, snapshotKeyOf)
	damaged := bytes.Clone(orig)
	damaged[len(damaged)/2] ^= 0x10
	replaceRaw(t, st, snapshotKeyOf, damaged)

	b := startCorruptHost(t, mem, "b")
	nb := b.join(t, opts)
	poll(t, "three reports of the corrupt snapshot", func() bool {
		if s := nb.Status(); s.ApplyIndex != 0 || s.SnapshotIndex != 0 {
			t.Fatalf("node b loaded state from a corrupt snapshot: %+v", s)
		}
		return b.corruptCount(t, "snapshot") >= 3
	})
	if got := getRaw(t, st, snapshotKeyOf); !bytes.Equal(got, damaged) {
		t.Fatal("the corrupt snapshot was replaced")
	}
	if !b.log.contains("corrupt object") {
		t.Fatal("node b never logged the corrupt snapshot")
	}
	// Refused once: each later report lists the key and finds the version
	// it refused, which it does not read again.
	if got := b.reads(snapshotKeyOf); got != 1 {
		t.Fatalf("node b read the corrupt snapshot %d times over %v reports; want once", got, b.corruptCount(t, "snapshot"))
	}
	// The node that read it corrupt never writes it. (The leader may try a
	// swap that was due, over the version it wrote: that fails, and the
	// damaged bytes, checked above, stay.)
	if got := b.calls.putCount(snapshotKeyOf); got != 0 {
		t.Fatalf("node b wrote the snapshot %d times after reading it corrupt", got)
	}
	// The leader, which holds the state in memory, still answers correctly.
	count++
	command(t, na, count)
	if s := nb.Status(); s.ApplyIndex != 0 || s.SnapshotIndex != 0 {
		t.Fatalf("node b loaded state from a corrupt snapshot: %+v", s)
	}
}

// editLeaderState changes the leader's address in leader_state.json and
// keeps the old checksum: well-formed JSON that fails its check.
func editLeaderState(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["leaderAddr"] = "127.0.0.1:1"
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCorruptLeaderStateOnStart: nodes starting on a corrupt
// leader_state.json, or on another kind of record there (an election lock,
// written by a member pointed at the group's object by mistake), report it
// at every join attempt, naming what they found, never join, and never
// overwrite it.
func TestCorruptLeaderStateOnStart(t *testing.T) {
	lock := election.Record{LeaderID: "intruder", Term: 2, Session: "s", Nonce: "n"}.Encode()
	for _, tc := range []struct {
		name string
		edit func(*testing.T, []byte) []byte
		says string // in the log, if set
	}{
		{"garbage", func(*testing.T, []byte) []byte { return garbage }, ""},
		{"field changed, old checksum", editLeaderState, ""},
		{"an election lock", func(*testing.T, []byte) []byte { return lock }, `is not the group's: rsm: an object of another kind: it is a record of kind \"tenure.lock\"`},
		{"an election lock of the previous version", func(*testing.T, []byte) []byte {
			return []byte(`{"leaderID":"intruder","leaderAddr":"","lastUpdated":"2026-11-29T05:00:00Z","term":2,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)
		}, `is not the group's: rsm: an object of another kind: it is a record without a kind field, with the field \"leaderID\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, st := newCluster()
			opts := corruptOptions()
			a := startCorruptHost(t, mem, "a")
			na := a.join(t, opts)
			waitLeader(t, na)
			command(t, na, 1)
			if err := a.h.Close(); err != nil {
				t.Fatal(err)
			}
			damaged := tc.edit(t, getRaw(t, st, leaderStateKeyOf))
			replaceRaw(t, st, leaderStateKeyOf, damaged)

			hosts := []*corruptHost{startCorruptHost(t, mem, "a"), startCorruptHost(t, mem, "b")}
			var nodes []*rsm.Node
			for _, h := range hosts {
				n := h.join(t, opts)
				nodes = append(nodes, n)
			}
			poll(t, "five failed join attempts on each node", func() bool {
				done := true
				for i, h := range hosts {
					if s := nodes[i].Status(); s.State != "JOINING" {
						t.Fatalf("node %d joined over a corrupt leader_state.json: %+v", i, s)
					}
					done = done && h.corruptCount(t, "leader_state") >= 5
				}
				return done
			})
			for i, h := range hosts {
				if got := h.calls.putCount(leaderStateKeyOf); got != 0 {
					t.Fatalf("node %d wrote leader_state.json %d times after it was damaged", i, got)
				}
			}
			if got := getRaw(t, st, leaderStateKeyOf); !bytes.Equal(got, damaged) {
				t.Fatalf("leader_state.json was overwritten with %s", got)
			}
			for i, h := range hosts {
				if tc.says != "" && !h.log.contains(tc.says) {
					t.Fatalf("node %d did not report %q:\n%s", i, tc.says, h.log.bytes())
				}
			}
			_, err := nodes[0].Command(ctxT(t, 300*time.Millisecond), "counter", nil)
			if !errors.Is(err, rsm.ErrNotCommitted) {
				t.Fatalf("command without a leader: %v, want ErrNotCommitted", err)
			}
			for _, h := range hosts {
				h.assertBackoff(t, leaderStateKeyOf, 0, opts)
			}
		})
	}
}

// TestCorruptLeaderStateUnderLeader: leader_state.json is damaged under a
// running leader. Its next confirmation read fails: nothing is
// acknowledged, and requests fail at once with a *CorruptError naming the
// object (a command sent as of unknown outcome) instead of waiting out
// their deadlines. The node reports it in Status and the refused gauge,
// never overwrites it, and serves again once an operator restores it.
func TestCorruptLeaderStateUnderLeader(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	// A store that answers, if only with a corrupt object, is no reason
	// to step down (docs/rsm.md, "Availability"): the heartbeat timeout
	// is set beyond the requests' deadlines so that only the corrupt
	// object's report can end them.
	opts.HeartbeatInterval = 10 * time.Minute
	a := startCorruptHost(t, mem, "a")
	na := a.join(t, opts)
	waitLeader(t, na)
	command(t, na, 1)
	orig := getRaw(t, st, leaderStateKeyOf)
	damaged := editLeaderState(t, orig)
	replaceRaw(t, st, leaderStateKeyOf, damaged)
	puts := a.calls.putCount(leaderStateKeyOf)
	reads := a.reads(leaderStateKeyOf)

	// Deadlines far beyond the node's retries: only a request that fails
	// at once, with the object, passes.
	_, err := na.Command(ctxT(t, 60*time.Second), "counter", nil)
	if !errors.Is(err, rsm.ErrCorrupt) || !errors.Is(err, rsm.ErrUnknownOutcome) || !strings.Contains(err.Error(), leaderStateKeyOf) {
		t.Fatalf("command under a corrupt leader_state.json: %v; want ErrCorrupt naming %s, as of unknown outcome", err, leaderStateKeyOf)
	}
	if res, err := na.Read(ctxT(t, 60*time.Second), "counter", nil); !errors.Is(err, rsm.ErrCorrupt) || !strings.Contains(err.Error(), leaderStateKeyOf) {
		t.Fatalf("read under a corrupt leader_state.json: %x, %v; want ErrCorrupt naming %s", res, err, leaderStateKeyOf)
	}
	if s := na.Status(); !strings.Contains(s.Problem, leaderStateKeyOf) || s.Role == "LEADER" {
		t.Fatalf("status %+v: want no leadership and a problem naming %s", s, leaderStateKeyOf)
	}
	if g := a.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 1 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v, want 1", g)
	}
	poll(t, "five reports of the corrupt leader_state.json", func() bool {
		return a.corruptCount(t, "leader_state") >= 5
	})
	if got := a.calls.putCount(leaderStateKeyOf); got != puts {
		t.Fatalf("%d writes of leader_state.json after it was damaged", got-puts)
	}
	if got := getRaw(t, st, leaderStateKeyOf); !bytes.Equal(got, damaged) {
		t.Fatalf("leader_state.json was overwritten with %s", got)
	}
	a.assertBackoff(t, leaderStateKeyOf, reads, opts)

	// The operator restores the last good version: the node takes a new
	// term and serves. The command of unknown outcome had landed in the
	// log before its confirmation failed, so it counts.
	replaceRaw(t, st, leaderStateKeyOf, orig)
	poll(t, "the node serves again", func() bool {
		s := na.Status()
		return s.State == "JOINED" && s.Role == "LEADER" && s.Problem == ""
	})
	if g := a.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 0 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v after the repair, want 0", g)
	}
	command(t, na, 3)
}

// gauge reads the sample of the gauge family name whose label has value.
func (ch *corruptHost) gauge(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := ch.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// TestCorruptLeaderStateTellsFollowers: the leader that finds
// leader_state.json corrupt tells its followers it leaves, so they check
// the store at once and report the object too, instead of serving
// requests to a leader that is gone until they miss its heartbeats.
func TestCorruptLeaderStateTellsFollowers(t *testing.T) {
	mem, st := newCluster()
	opts := corruptOptions()
	opts.HeartbeatInterval = 10 * time.Minute // only the leader's word can tell the follower
	a := startCorruptHost(t, mem, "a")
	na := a.join(t, opts)
	waitLeader(t, na)
	b := startCorruptHost(t, mem, "b")
	nb := b.join(t, opts)
	poll(t, "b follows", func() bool {
		s := nb.Status()
		return s.State == "JOINED" && s.Role == "FOLLOWER"
	})
	command(t, nb, 1)
	replaceRaw(t, st, leaderStateKeyOf, editLeaderState(t, getRaw(t, st, leaderStateKeyOf)))

	if _, err := na.Command(ctxT(t, 60*time.Second), "counter", nil); !errors.Is(err, rsm.ErrCorrupt) {
		t.Fatalf("command on the leader: %v; want ErrCorrupt", err)
	}
	poll(t, "the follower reports the corrupt leader_state.json", func() bool {
		return strings.Contains(nb.Status().Problem, leaderStateKeyOf)
	})
	if _, err := nb.Command(ctxT(t, 60*time.Second), "counter", nil); !errors.Is(err, rsm.ErrCorrupt) || !strings.Contains(err.Error(), leaderStateKeyOf) {
		t.Fatalf("command on the follower: %v; want ErrCorrupt naming %s", err, leaderStateKeyOf)
	}
}

// oversized is a driver on which one key holds an object of size bytes
// (while size is above 0; junk, not stored), and that records the limit
// of every read of that key (math.MaxInt64 for an unbounded Get).
type oversized struct {
	driver.Store
	key    string
	size   atomic.Int64
	mu     sync.Mutex
	limits []int64
}

func (d *oversized) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	size := d.size.Load()
	if key != d.key || size <= 0 {
		return d.Store.GetLimited(ctx, key, max)
	}
	d.mu.Lock()
	d.limits = append(d.limits, max)
	d.mu.Unlock()
	if size > max {
		return nil, "", driver.TooLargeError(size, max)
	}
	return bytes.Repeat([]byte{'{'}, int(size)), "junk", nil
}

func (d *oversized) Get(ctx context.Context, key string) ([]byte, string, error) {
	return d.GetLimited(ctx, key, math.MaxInt64)
}

func (d *oversized) reads() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.limits)
}

// TestOversizedLeaderStateRefused: a 32 MiB object at leader_state.json
// (tenure writes at most rsm.LeaderStateMax there) is refused as corrupt
// at each join attempt, named in the log, Status, the corrupt-objects
// counter and the refused gauge, and never read past the bound: each
// attempt reads it once, with the bound, on the join loop's backoff. Once
// an operator restores it, the node leads again.
func TestOversizedLeaderStateRefused(t *testing.T) {
	mem, _ := newCluster()
	opts := corruptOptions()
	a := startCorruptHost(t, mem, "a")
	na := a.join(t, opts)
	waitLeader(t, na)
	command(t, na, 1)
	if err := a.h.Close(); err != nil {
		t.Fatal(err)
	}
	d := &oversized{Store: mem, key: leaderStateKeyOf}
	d.size.Store(32 << 20)
	b := startCorruptHost(t, d, "a")
	nb := b.join(t, opts)
	poll(t, "three reports of the oversized leader_state.json", func() bool {
		if s := nb.Status(); s.State != "JOINING" {
			t.Fatalf("the node joined over an oversized leader_state.json: %+v", s)
		}
		return b.corruptCount(t, "leader_state") >= 3
	})
	reports := b.corruptCount(t, "leader_state")
	limits := d.reads()
	for i, max := range limits {
		if max > rsm.LeaderStateMax {
			t.Fatalf("read %d of leader_state.json with limit %d; want at most %d", i, max, rsm.LeaderStateMax)
		}
	}
	// One read per report (and one more may be under way): not re-read
	// within an attempt.
	if len(limits) > int(reports)+1 {
		t.Fatalf("%d reads of leader_state.json for %v reports", len(limits), reports)
	}
	if s := nb.Status(); !strings.Contains(s.Problem, leaderStateKeyOf) || !strings.Contains(s.Problem, "larger than tenure writes there") {
		t.Fatalf("status problem %q: want leader_state.json named as too large", s.Problem)
	}
	if !b.log.contains(leaderStateKeyOf) || !b.log.contains("larger than tenure writes there") {
		t.Fatal("the oversized leader_state.json was not reported in the log")
	}
	if g := b.gauge(t, "tenure_rsm_refused", "object", "leader_state"); g != 1 {
		t.Fatalf("tenure_rsm_refused{object=\"leader_state\"} = %v, want 1", g)
	}
	b.assertBackoff(t, leaderStateKeyOf, 0, opts)
	if got := b.calls.putCount(leaderStateKeyOf); got != 0 {
		t.Fatalf("the node wrote leader_state.json %d times over the oversized one", got)
	}

	d.size.Store(0) // the operator restores the last good version
	poll(t, "the node leads again", func() bool {
		s := nb.Status()
		return s.State == "JOINED" && s.Role == "LEADER" && s.Problem == ""
	})
	command(t, nb, 2)
}

// TestForeignObjectInTheLogOrSnapshot: a JSON record (an election lock)
// where the group's snapshot or its next log entry belongs stops a
// restarted node from leading or serving, is reported naming the object
// and what it is, and stays as it was.
func TestForeignObjectInTheLogOrSnapshot(t *testing.T) {
	lock := election.Record{LeaderID: "intruder", Term: 2, Session: "s", Nonce: "n"}.Encode()
	for _, where := range []string{"snapshot", "next log entry"} {
		t.Run(where, func(t *testing.T) {
			mem, st := newCluster()
			opts := corruptOptions()
			a := startCorruptHost(t, mem, "a")
			na := a.join(t, opts)
			waitLeader(t, na)
			command(t, na, 1)
			next := na.Status().ApplyIndex + 1
			if err := a.h.Close(); err != nil {
				t.Fatal(err)
			}
			key := snapshotKeyOf
			if where != "snapshot" {
				key = logKeyOf(next)
			}
			if _, err := st.Put(t.Context(), key, lock, store.IfAbsent()); err != nil {
				t.Fatalf("put the lock at %s: %v", key, err)
			}
			b := startCorruptHost(t, mem, "a")
			nb := b.join(t, opts)
			says := `object \"` + key + `\" in the store is not the group's: rsm: an object of another kind: it is a record of kind \"tenure.lock\"`
			poll(t, "the foreign object reported", func() bool {
				if s := nb.Status(); s.Role == "LEADER" {
					t.Fatalf("the node leads over a foreign object at %s: %+v", key, s)
				}
				return b.log.contains(says)
			})
			if got := getRaw(t, st, key); !bytes.Equal(got, lock) {
				t.Fatalf("%s was overwritten with %q", key, got)
			}
			if got := b.calls.putCount(key); got != 0 {
				t.Fatalf("the node wrote %s %d times", key, got)
			}
		})
	}
}
