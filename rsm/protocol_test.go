package rsm

// Deterministic tests of the protocol's cases, each of which broke an
// earlier version of this design in a model checker. Nodes here have no
// RPC server: they lead or catch up against one shared in-memory store,
// and hooks in front of the store order the races exactly.

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

const testGroup = "g"

// protoCounter adds each command's 8-byte operand (1 if empty).
type protoCounter struct{ n uint64 }

func (c *protoCounter) Apply(cmd []byte) []byte {
	d := uint64(1)
	if len(cmd) == 8 {
		d = binary.BigEndian.Uint64(cmd)
	}
	c.n += d
	return binary.BigEndian.AppendUint64(nil, c.n)
}
func (c *protoCounter) Query([]byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, c.n), nil
}
func (c *protoCounter) Snapshot(w io.Writer) error {
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, c.n))
	return err
}
func (c *protoCounter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil || len(b) != 8 {
		return errors.New("protoCounter: bad snapshot")
	}
	c.n = binary.BigEndian.Uint64(b)
	return nil
}

// hookStore runs hooks before calls reach the inner store.
type hookStore struct {
	driver.Store
	mu    sync.Mutex
	onPut func(ctx context.Context, key string)
	onGet func(key string)
	// onLanded runs after a put landed, before it returns: a store that
	// shows a write before it is durable (store.WithVisible) is one whose
	// hook calls driver.VisibleFunc, then syncs.
	onLanded func(ctx context.Context, key string)
	landed   map[string]int // successful puts by key
}

func (h *hookStore) hooks() (func(context.Context, string), func(string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.onPut, h.onGet
}

func (h *hookStore) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if f, _ := h.hooks(); f != nil {
		f(ctx, key)
	}
	v, err := h.Store.Put(ctx, key, data, cond)
	if err == nil {
		h.mu.Lock()
		if h.landed == nil {
			h.landed = map[string]int{}
		}
		h.landed[key]++
		f := h.onLanded
		h.mu.Unlock()
		if f != nil {
			f(ctx, key)
		}
	}
	return v, err
}

func (h *hookStore) puts(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.landed[key]
}

func (h *hookStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return h.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited is how the group's objects are read (bounded).
func (h *hookStore) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if _, f := h.hooks(); f != nil {
		f(key)
	}
	return h.Store.GetLimited(ctx, key, max)
}

func (h *hookStore) set(put func(context.Context, string), get func(string)) {
	h.mu.Lock()
	h.onPut, h.onGet = put, get
	h.mu.Unlock()
}

func testOptions() Options {
	return Options{
		FlushInterval: time.Millisecond, BatchMinCount: 1, RequestTimeout: 5 * time.Second,
		HeartbeatInterval: time.Hour, SnapshotThreshold: 1 << 30,
		Retry: RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, ThrottleDelay: time.Millisecond},
	}
}

type testNode struct {
	*Node
	machine *protoCounter
	hooks   *hookStore
}

// newTestNode makes a node over its own hooks in front of inner. It is not
// started: tests drive lead and catchUp themselves, or call start.
func newTestNode(t *testing.T, inner driver.Store, id string, opts Options) *testNode {
	t.Helper()
	hs := &hookStore{Store: inner}
	m, err := newMetrics(nil, id)
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{st: store.New(hs), cfg: HostConfig{ID: id, Addr: "127.0.0.1:1", ConnectTimeout: time.Second, HandshakeTimeout: time.Second},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), m: m, groups: map[string]*Node{}}
	c := &protoCounter{}
	n, err := newNode(h, testGroup, map[string]StateMachine{"c": c}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.cancel()
		n.wg.Wait()
		n.rep.close()
	})
	return &testNode{Node: n, machine: c, hooks: hs}
}

// leadInBackground makes n attempt leadership over the current
// leader_state.json and serve; it returns when n serves.
func (n *testNode) leadInBackground(t *testing.T) {
	t.Helper()
	ls, version, err := n.gs.readLeaderState(t.Context())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.lead(ls, version)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for n.Status().Role != "LEADER" {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not take over", n.host.cfg.ID)
		}
		time.Sleep(time.Millisecond)
	}
}

func (n *testNode) count(t *testing.T) uint64 {
	t.Helper()
	var c uint64
	n.rep.do(func(*replica) { c = n.machine.n })
	return c
}

// onReplica runs f on n's replica, on its goroutine.
func (n *testNode) onReplica(f func(r *replica)) {
	n.rep.do(f)
}

func (n *testNode) command(ctx context.Context) ([]byte, error) {
	return n.Command(ctx, "c", nil)
}

func mustCommand(t *testing.T, n *testNode, want uint64) {
	t.Helper()
	res, err := n.command(t.Context())
	if err != nil {
		t.Fatalf("command on %s: %v", n.host.cfg.ID, err)
	}
	if got := binary.BigEndian.Uint64(res); got != want {
		t.Fatalf("command on %s: count %d, want %d", n.host.cfg.ID, got, want)
	}
}

// fresh returns the count a new node reaches from the store alone.
func fresh(t *testing.T, inner driver.Store) (count, applied uint64) {
	t.Helper()
	return freshWith(t, inner, testOptions())
}

func freshWith(t *testing.T, inner driver.Store, opts Options) (count, applied uint64) {
	t.Helper()
	n := newTestNode(t, inner, "reader", opts)
	if _, _, err := n.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	n.onReplica(func(r *replica) { count, applied = n.machine.n, r.applied })
	return count, applied
}

func readEntryT(t *testing.T, inner driver.Store, index uint64) *rsmpb.Entry {
	t.Helper()
	gs := newGroupStore(store.New(inner), testGroup, testOptions().withDefaults().Retry, 0, snapshot.Options{})
	e, err := gs.readEntry(t.Context(), index)
	if err != nil {
		t.Fatalf("read entry %d: %v", index, err)
	}
	return e
}

func writeEntryT(t *testing.T, inner driver.Store, e *rsmpb.Entry) {
	t.Helper()
	b, err := record.EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inner.Put(context.Background(), logKey(testGroup, e.Index), b, driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatalf("write entry %d: %v", e.Index, err)
	}
}

// cmdEntry is a command of session (its next sequence number seq): one
// that every replica applies if the entry is valid where it lands.
func cmdEntry(index, term uint64, session, seq uint64, add uint64) *rsmpb.Entry {
	return &rsmpb.Entry{Index: index, Term: term, Writer: "stale", Nonce: record.NewNonce(), Commands: []*rsmpb.Command{
		{Session: session, Seq: seq, Machine: "c", Data: binary.BigEndian.AppendUint64(nil, add)}}}
}

// sessionOf returns n's client session and the last sequence number it gave out.
func (n *testNode) sessionOf() (session, seq uint64) {
	c := n.client
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session, c.seq
}

// blockPut makes n's next Put of key wait until release is closed, and
// closes reached when it gets there.
func blockPut(n *testNode, key string) (reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	n.hooks.set(func(ctx context.Context, k string) {
		if k != key {
			return
		}
		once.Do(func() {
			close(reached)
			<-release
		})
	}, nil)
	return reached, release
}

// A stale leader racing the seal. Its write at the seal's index lands
// first: the new leader applies it (it is valid: no higher term precedes
// it) and seals after it; the stale leader never acknowledges it. Or the
// seal lands first: the stale leader's write fails, it is deposed, and its
// command is not applied anywhere.
func TestStaleLeaderRacesTheSeal(t *testing.T) {
	for _, staleFirst := range []bool{true, false} {
		name := map[bool]string{true: "stale write lands first", false: "seal lands first"}[staleFirst]
		t.Run(name, func(t *testing.T) {
			mem := memstore.New()
			a := newTestNode(t, mem, "a", testOptions())
			a.leadInBackground(t)
			for i := uint64(1); i <= 3; i++ {
				mustCommand(t, a, i)
			}
			next := uint64(6) // seal 1, registration 2, commands 3..5
			reached, release := blockPut(a, logKey(testGroup, next))
			type outcome struct {
				res []byte
				err error
			}
			staleDone := make(chan outcome, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				res, err := a.command(ctx)
				staleDone <- outcome{res, err}
			}()
			<-reached // a's write of index 5 is in flight

			b := newTestNode(t, mem, "b", testOptions())
			if staleFirst {
				// b's seal write at 5 waits until a's write has landed.
				var once sync.Once
				b.hooks.set(func(ctx context.Context, k string) {
					if k == logKey(testGroup, next) {
						once.Do(func() {
							close(release)
							for {
								if _, _, err := mem.Get(ctx, k); err == nil {
									return
								}
								time.Sleep(time.Millisecond)
							}
						})
					}
				}, nil)
			}
			b.leadInBackground(t)
			if !staleFirst {
				close(release)
			}
			o := <-staleDone
			if o.err == nil {
				t.Fatalf("the deposed leader acknowledged its command: %x", o.res)
			}
			e := readEntryT(t, mem, next)
			if staleFirst {
				if e.Term != 1 || e.Noop {
					t.Fatalf("index %d: want a's term-1 command, got term %d noop %v", next, e.Term, e.Noop)
				}
				if s := readEntryT(t, mem, next+1); s.Term != 2 || !s.Noop {
					t.Fatalf("the seal should follow at %d; got term %d noop %v", next+1, s.Term, s.Noop)
				}
				// Valid, so every replica applies it: 4.
				if got := b.count(t); got != 4 {
					t.Fatalf("new leader's count %d, want 4", got)
				}
			} else {
				if e.Term != 2 || !e.Noop {
					t.Fatalf("index %d: want b's seal, got term %d noop %v", next, e.Term, e.Noop)
				}
				if got := b.count(t); got != 3 {
					t.Fatalf("new leader's count %d, want 3", got)
				}
			}
			mustCommand(t, b, b.count(t)+1)
			if got, _ := fresh(t, mem); got != b.count(t) {
				t.Fatalf("a fresh replica counts %d, the leader %d", got, b.count(t))
			}
		})
	}
}

// A hole left by a pipelined write: the old leader's write of index 4
// never landed but its write of 5 did. The new leader seals the hole at 4,
// so the term-1 entry at 5 comes after a term-2 entry and is invalid for
// every replica; the new leader's own next write finds 5 taken, skips it
// and commits at 6.
func TestHoleLeftByPipelinedWrite(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	mustCommand(t, a, 1)
	mustCommand(t, a, 2) // seal 1, registration 2, commands 3, 4
	a.Node.cancel()      // a dies; its pipelined write of 6 landed, 5 did not
	a.wg.Wait()
	session, seq := a.sessionOf()
	writeEntryT(t, mem, cmdEntry(6, 1, session, seq+1, 100))

	b := newTestNode(t, mem, "b", testOptions())
	b.leadInBackground(t)
	if s := readEntryT(t, mem, 5); s.Term != 2 || !s.Noop {
		t.Fatalf("the seal should fill the hole at 5; got term %d noop %v", s.Term, s.Noop)
	}
	mustCommand(t, b, 3) // b's registration finds 6 taken and commits at 7
	if e := readEntryT(t, mem, 8); e.Term != 2 || len(e.Commands) != 1 || e.Commands[0].Register {
		t.Fatalf("b's command should commit at 8; got term %d with %d commands", e.Term, len(e.Commands))
	}
	count, applied := fresh(t, mem)
	if count != 3 || applied != 8 {
		t.Fatalf("a fresh replica: count %d at index %d, want 3 at 8 (the pipelined +100 must be ignored)", count, applied)
	}
}

// A candidate that meets a higher-term entry before its seal has been
// deposed: it must stop without writing anything of its term.
func TestCandidateMeetsHigherTermBeforeSeal(t *testing.T) {
	for _, at := range []string{"in the log", "at the seal's slot"} {
		t.Run(at, func(t *testing.T) {
			mem := memstore.New()
			a := newTestNode(t, mem, "a", testOptions())
			a.leadInBackground(t)
			mustCommand(t, a, 1)
			a.Node.cancel()
			a.wg.Wait()
			// b becomes candidate of term 2; a term-3 leader (c) has written
			// index 4, before b read the log or just before b's seal.
			b := newTestNode(t, mem, "b", testOptions())
			ls, version, err := b.gs.readLeaderState(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			session, seq := a.sessionOf()
			higher := cmdEntry(4, 3, session, seq+1, 1000)
			if at == "in the log" {
				writeEntryT(t, mem, higher)
			} else {
				var once sync.Once
				b.hooks.set(func(ctx context.Context, k string) {
					if k == logKey(testGroup, 4) {
						once.Do(func() { writeEntryT(t, mem, higher) })
					}
				}, nil)
			}
			if err := b.lead(ls, version); err != nil {
				t.Fatal(err)
			}
			if b.Status().Role == "LEADER" {
				t.Fatal("b serves although a higher term was in the log before its seal")
			}
			items, err := mem.List(t.Context(), testGroup+"/log/", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				i, _ := parseLogKey(testGroup, it.Key)
				if e := readEntryT(t, mem, i); e.Term == 2 {
					t.Fatalf("b wrote index %d in its term after meeting term 3", i)
				}
			}
		})
	}
}

// Ambiguous writes: the write lands but the leader sees an error. It reads
// back its nonce and acknowledges once; if it cannot settle the outcome it
// steps down, and the command retried under its original sequence number
// after the next takeover is applied exactly once.
func TestAmbiguousLogWrites(t *testing.T) {
	t.Run("settled by reading back", func(t *testing.T) {
		mem := memstore.New()
		fs := faultstore.New(mem)
		a := newTestNode(t, fs, "a", testOptions())
		a.leadInBackground(t)
		mustCommand(t, a, 1)
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpPutCreate, Prefix: testGroup + "/log/", P: 1, Times: 1, Action: faultstore.ApplyThenFail}); err != nil {
			t.Fatal(err)
		}
		mustCommand(t, a, 2)
		if a.Status().Role != "LEADER" {
			t.Fatal("a settled ambiguity should not cost leadership")
		}
		if got, _ := fresh(t, mem); got != 2 {
			t.Fatalf("fresh replica counts %d, want 2", got)
		}
	})
	t.Run("unsettled: step down, retry exactly once", func(t *testing.T) {
		mem := memstore.New()
		fs := faultstore.New(mem)
		a := newTestNode(t, fs, "a", testOptions())
		a.start() // the full lifecycle: it retakes leadership after stepping down
		deadline := time.Now().Add(10 * time.Second)
		for a.Status().Role != "LEADER" && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		mustCommand(t, a, 1)
		// The next log write lands, its answer is lost, and reads of the
		// log fail until the leader gives up on it.
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpPutCreate, Prefix: testGroup + "/log/", P: 1, Times: 1, Action: faultstore.ApplyThenFail}); err != nil {
			t.Fatal(err)
		}
		if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpGet | faultstore.OpPutCreate, Prefix: testGroup + "/log/", P: 1, Times: 12, Action: faultstore.Fail, Kind: driver.Transient}); err != nil {
			t.Fatal(err)
		}
		res, err := a.command(t.Context())
		if err != nil {
			t.Fatalf("the retried command failed: %v", err)
		}
		if got := binary.BigEndian.Uint64(res); got != 2 {
			t.Fatalf("retried command returned count %d, want 2 (applied once)", got)
		}
		if got := a.Status().Term; got < 2 {
			t.Fatalf("term %d: the leader should have stepped down and retaken leadership", got)
		}
		if got, _ := fresh(t, mem); got != 2 {
			t.Fatalf("fresh replica counts %d, want 2", got)
		}
	})
}

// A truncation interrupted: the snapshot was written but the log not
// deleted. The next leader finishes it.
func TestInterruptedTruncationIsFinished(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.SnapshotThreshold = 5
	a := newTestNode(t, mem, "a", opts)
	// Delete nothing: a crashes between the snapshot and its truncation.
	fs := faultstore.New(mem)
	a.hooks.Store = fs
	if _, err := fs.AddRule(faultstore.Rule{Ops: faultstore.OpDelete, P: 1, Action: faultstore.Fail, Kind: driver.Permanent}); err != nil {
		t.Fatal(err)
	}
	a.leadInBackground(t)
	for i := uint64(1); i <= 8; i++ {
		mustCommand(t, a, i)
	}
	var snap *snapshot.Stored
	deadline := time.Now().Add(10 * time.Second)
	for snap == nil && time.Now().Before(deadline) {
		snap, _, _ = a.gs.snap.Read(t.Context())
		time.Sleep(time.Millisecond)
	}
	if snap == nil {
		t.Fatal("no snapshot written")
	}
	a.Node.cancel()
	a.wg.Wait()
	if _, _, err := mem.Get(t.Context(), logKey(testGroup, 1)); err != nil {
		t.Fatalf("setup: index 1 should still exist: %v", err)
	}
	b := newTestNode(t, mem, "b", opts)
	b.leadInBackground(t)
	deadline = time.Now().Add(10 * time.Second)
	for {
		items, err := mem.List(t.Context(), testGroup+"/log/", "", 1)
		if err != nil {
			t.Fatal(err)
		}
		if i, _ := parseLogKey(testGroup, items[0].Key); i > snap.EndIndex {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries up to the snapshot's end %d are still in the log", snap.EndIndex)
		}
		time.Sleep(time.Millisecond)
	}
	if got := b.count(t); got != 8 {
		t.Fatalf("new leader counts %d, want 8", got)
	}
}

// A stale writer's delayed create lands on a slot that a newer leader has
// already snapshotted and deleted. The create succeeds, but the stale
// leader's confirmation read shows the newer term, so it never
// acknowledges; and no replica applies the entry, because readers start
// after the snapshot's end index.
func TestDelayedCreateOnTruncatedSlot(t *testing.T) {
	// On a store that shows the create before it is durable
	// (store.WithVisible), the round issued then sees the newer term: the
	// create syncs until a's round read leader_state.json (or a gave up).
	for _, shows := range []bool{false, true} {
		t.Run(map[bool]string{false: "store answers once durable", true: "store shows the write before its sync"}[shows], func(t *testing.T) {
			delayedCreateOnTruncatedSlot(t, shows)
		})
	}
}

func delayedCreateOnTruncatedSlot(t *testing.T, shows bool) {
	mem := memstore.New()
	opts := testOptions()
	opts.SnapshotThreshold = 4
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	mustCommand(t, a, 1)
	mustCommand(t, a, 2) // seal 1, registration 2, commands 3, 4
	slot := uint64(5)
	read := make(chan struct{}, 1)
	if shows {
		showLanded(a, func(k string) bool { return k == logKey(testGroup, slot) }, func() {
			select {
			case <-read:
			case <-time.After(10 * time.Second):
			}
		})
	}
	reached, release := blockPut(a, logKey(testGroup, slot))
	staleDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := a.Command(ctx, "c", binary.BigEndian.AppendUint64(nil, 1000))
		staleDone <- err
	}()
	<-reached

	b := newTestNode(t, mem, "b", opts)
	b.leadInBackground(t) // seals at 5
	for i := uint64(3); i <= 12; i++ {
		mustCommand(t, b, i)
	}
	// Wait until b's snapshot covers the slot and its truncation deleted it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, _, err := b.gs.snap.Read(t.Context())
		_, _, gerr := store.New(mem).Get(t.Context(), logKey(testGroup, slot))
		if err == nil && snap != nil && snap.EndIndex >= slot && errors.Is(gerr, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b did not snapshot and truncate past the slot")
		}
		time.Sleep(time.Millisecond)
	}
	lsKey := a.gs.key(leaderStateKey)
	a.hooks.set(nil, func(k string) {
		if k == lsKey {
			select {
			case read <- struct{}{}:
			default:
			}
		}
	})
	close(release) // a's create now lands on the emptied slot (and is shown)
	if err := <-staleDone; err == nil {
		t.Fatal("the stale leader acknowledged a command written to a truncated slot")
	}
	// The late create landed (a truncation sweep may have deleted it
	// again since, as it may).
	if a.hooks.puts(logKey(testGroup, slot)) != 1 {
		t.Fatalf("setup: a's late create of slot %d did not land", slot)
	}
	if got, _ := fresh(t, mem); got != 12 {
		t.Fatalf("a fresh replica counts %d, want 12 (the late +1000 must not apply)", got)
	}
	mustCommand(t, b, 13)
}

// A follower catching up while the log is truncated under it, and a stale
// writer re-creates a deleted slot: the snapshot read after the entries
// shows it, so the catch-up discards what it read and loads the snapshot.
func TestCatchUpWhileTruncated(t *testing.T) {
	mem := memstore.New()
	a := newTestNode(t, mem, "a", testOptions())
	a.leadInBackground(t)
	for i := uint64(1); i <= 6; i++ {
		mustCommand(t, a, i)
	}
	// A snapshot at index 8 (seal, registration, 6 commands), built by a replica.
	r, err := newReplica(map[string]StateMachine{"c": &protoCounter{}}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 8; i++ {
		r.apply(readEntryT(t, mem, i))
	}
	session, _ := a.sessionOf()
	snap, err := r.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Nonce = record.NewNonce()

	c := newTestNode(t, mem, "c", testOptions())
	var once sync.Once
	c.hooks.set(nil, func(k string) {
		if k != logKey(testGroup, 3) {
			return
		}
		once.Do(func() {
			// While c reads index 3: the snapshot lands, 1..7 are deleted,
			// and a stale writer re-creates 4 with a term-1 +1000.
			b, err := record.EncodeSnapshot(snap)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := mem.Put(context.Background(), testGroup+"/"+snapshotKey, b, driver.Cond{Kind: driver.IfAbsent}); err != nil {
				t.Error(err)
			}
			for i := uint64(1); i <= 8; i++ {
				if err := mem.Delete(context.Background(), logKey(testGroup, i), driver.Cond{}); err != nil {
					t.Error(err)
				}
			}
			// After 1..3 the session's next number is 2: applied if read.
			writeEntryT(t, mem, cmdEntry(4, 1, session, 2, 1000))
		})
	})
	if _, _, err := c.catchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := c.count(t); got != 6 {
		t.Fatalf("catch-up counts %d, want 6 from the snapshot (the late +1000 must not apply)", got)
	}
	if s := c.Status(); s.ApplyIndex != 8 {
		t.Fatalf("catch-up ends at %d, want 8", s.ApplyIndex)
	}
}

// A leader deposed while idle (no requests, no followers to tell it) finds
// out at its next idle check and stops saying it leads.
func TestIdleDeposedLeaderStepsDown(t *testing.T) {
	mem := memstore.New()
	opts := testOptions()
	opts.HeartbeatInterval, opts.MaxMissedHeartbeats = 20*time.Millisecond, 2
	a := newTestNode(t, mem, "a", opts)
	a.leadInBackground(t)
	b := newTestNode(t, mem, "b", opts)
	b.leadInBackground(t)
	deadline := time.Now().Add(10 * time.Second)
	for a.Status().Role == "LEADER" {
		if time.Now().After(deadline) {
			t.Fatal("the deposed leader still says it leads")
		}
		time.Sleep(time.Millisecond)
	}
	if b.Status().Role != "LEADER" {
		t.Fatal("the new leader stepped down")
	}
}
