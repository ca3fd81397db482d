package rsmtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// seedFor returns the seed of a run: $RSMTEST_SEED if set, else the time.
// It is logged so that a failing run can be repeated (as far as goroutine
// scheduling allows).
func seedFor(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RSMTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RSMTEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (repeat with RSMTEST_SEED=%d)", seed, seed)
	return seed
}

func kvMachines(int) map[string]rsm.StateMachine {
	return map[string]rsm.StateMachine{kv.MachineName: kv.New()}
}

// kvWorkload is concurrent clients, each bound to one node, running random
// operations on a few keys and recording them for porcupine.
type kvWorkload struct {
	c       *rsmtest.Cluster
	h       *rsmtest.History
	keys    []string
	clients int
	// opTimeout bounds each operation; shortTimeouts is the share of
	// operations given a random timeout of 100 to 800 ms instead, so that
	// some give up while a fault lasts, as impatient clients do.
	opTimeout     time.Duration
	shortTimeouts float64
	// owners, if set, makes each key written by one client only (key i by
	// client i % clients), with puts and deletes: for the durability test.
	owners bool
	seed   uint64
	// submitter, if set, is what the clients of node i use instead of
	// the node itself.
	submitter func(i int, n *rsm.Node) kv.Submitter

	stats kvStats
}

type kvStats struct {
	acked        atomic.Int64 // writes with a known result
	applied      atomic.Int64 // writes applied, result lost
	pending      atomic.Int64 // writes of unknown outcome
	notCommitted atomic.Int64 // writes that definitely did not apply
	reads        atomic.Int64 // reads answered
	failedReads  atomic.Int64
	noNode       atomic.Int64 // attempts while the client's node was down

	mu      sync.Mutex
	errs    map[string]int // error messages (truncated) by count
	perNode map[int]int    // acknowledged operations by node
}

func (s *kvStats) noteErr(err error) {
	msg := err.Error()
	if len(msg) > 90 {
		msg = msg[:90]
	}
	s.mu.Lock()
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	s.errs[msg]++
	s.mu.Unlock()
}

func (s *kvStats) noteOK(node int) {
	s.mu.Lock()
	if s.perNode == nil {
		s.perNode = map[int]int{}
	}
	s.perNode[node]++
	s.mu.Unlock()
}

func (s *kvStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := fmt.Sprintf("writes: %d acknowledged, %d applied with result lost, %d unknown outcome, %d not committed; reads: %d answered, %d failed; %d attempts with the node down; acknowledged ops by node %v",
		s.acked.Load(), s.applied.Load(), s.pending.Load(), s.notCommitted.Load(), s.reads.Load(), s.failedReads.Load(), s.noNode.Load(), s.perNode)
	for msg, n := range s.errs {
		out += fmt.Sprintf("\n  %5d × %s", n, msg)
	}
	return out
}

// run runs the clients until stop is closed, then waits for their last
// operations.
func (w *kvWorkload) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for cl := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(cl, stop)
		}()
	}
	wg.Wait()
}

func (w *kvWorkload) client(id int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
	// Clients are spread over the nodes from a random first one, so that
	// every node has clients.
	node := (id + int(w.seed%uint64(w.c.Len()))) % w.c.Len()
	// mods is the ModRevision this client last saw of each key (0:
	// absent), which its cas expects.
	mods := map[string]uint64{}
	var mine []string
	for i, k := range w.keys {
		if i%w.clients == id {
			mine = append(mine, k)
		}
	}
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		n := w.c.Node(node)
		if n == nil {
			w.stats.noNode.Add(1)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		var sub kv.Submitter = n
		if w.submitter != nil {
			sub = w.submitter(node, n)
		}
		cl := kv.NewClient(sub)
		key := w.keys[rng.IntN(len(w.keys))]
		var in rsmtest.KVInput
		switch p := rng.IntN(100); {
		case w.owners && len(mine) == 0:
			in = rsmtest.KVInput{Op: rsmtest.KVGet, Key: key}
		case w.owners:
			key = mine[rng.IntN(len(mine))]
			in = rsmtest.KVInput{Op: rsmtest.KVPut, Key: key}
			if p < 15 {
				in.Op = rsmtest.KVDelete
			}
		case p < 35:
			in = rsmtest.KVInput{Op: rsmtest.KVGet, Key: key}
		case p < 70:
			in = rsmtest.KVInput{Op: rsmtest.KVPut, Key: key}
		case p < 90:
			in = rsmtest.KVInput{Op: rsmtest.KVCAS, Key: key, Expect: mods[key]}
		default:
			in = rsmtest.KVInput{Op: rsmtest.KVDelete, Key: key}
		}
		if in.Op == rsmtest.KVPut || in.Op == rsmtest.KVCAS {
			in.Value = fmt.Sprintf("c%d.%d", id, seq)
		}
		timeout := w.opTimeout
		if rng.Float64() < w.shortTimeouts {
			timeout = 100*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond)))
		}
		w.do(cl, id, node, in, mods, timeout)
	}
}

// do runs one operation and records it.
func (w *kvWorkload) do(cl *kv.Client, id, node int, in rsmtest.KVInput, mods map[string]uint64, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out rsmtest.KVOutput
	var err error
	call := w.h.Now()
	switch in.Op {
	case rsmtest.KVGet:
		var got kv.KeyValue
		got, err = cl.Get(ctx, in.Key)
		if errors.Is(err, kv.ErrNotFound) {
			err = nil
		} else if err == nil {
			out = rsmtest.KVOutput{Found: true, Value: string(got.Value), Rev: got.ModRevision, Create: got.CreateRevision}
		}
	case rsmtest.KVPut:
		out.Rev, err = cl.Put(ctx, in.Key, []byte(in.Value))
	case rsmtest.KVDelete:
		out.Found, out.Rev, err = cl.Delete(ctx, in.Key)
	case rsmtest.KVCAS:
		out.Found, out.Rev, err = cl.CAS(ctx, in.Key, in.Expect, []byte(in.Value))
	}
	ret := w.h.Now()
	meta := fmt.Sprintf("client %d on node %d", id, node)
	if err != nil {
		w.stats.noteErr(err)
		meta += ": " + err.Error()
	}
	switch {
	case in.Op == rsmtest.KVGet && err != nil:
		// A failed read changed nothing.
		w.stats.failedReads.Add(1)
		return
	case in.Op == rsmtest.KVGet:
		w.stats.reads.Add(1)
		w.stats.noteOK(node)
		mods[in.Key] = out.Rev
	case errors.Is(err, rsm.ErrNotCommitted):
		w.stats.notCommitted.Add(1)
		return
	case errors.Is(err, rsm.ErrApplicationResultUnavailable):
		w.stats.applied.Add(1)
		out = rsmtest.KVOutput{Unknown: true}
	case err != nil:
		// Anything else may have applied: ErrUnknownOutcome, ErrClosed
		// from a crash, a deadline.
		w.stats.pending.Add(1)
		out, ret = rsmtest.KVOutput{Unknown: true}, rsmtest.Pending
	default:
		w.stats.acked.Add(1)
		w.stats.noteOK(node)
		switch {
		case in.Op == rsmtest.KVDelete:
			mods[in.Key] = 0
		case in.Op == rsmtest.KVPut || out.Found:
			mods[in.Key] = out.Rev
		case in.Op == rsmtest.KVCAS:
			mods[in.Key] = out.Rev // the key's current ModRevision
		}
	}
	w.h.Add(id, in, call, out, ret, meta)
}

// finalReads reads every key through node i, retrying until each read is
// answered or ctx ends, and records the reads as one more client's.
func (w *kvWorkload) finalReads(ctx context.Context, t *testing.T, i int) map[string]rsmtest.KVOutput {
	t.Helper()
	got := map[string]rsmtest.KVOutput{}
	for _, k := range w.keys {
		for {
			n := w.c.Node(i)
			if n == nil {
				t.Fatalf("node %d is down for the final reads", i)
			}
			call := w.h.Now()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			kvv, err := kv.NewClient(n).Get(rctx, k)
			cancel()
			ret := w.h.Now()
			if err == nil || errors.Is(err, kv.ErrNotFound) {
				out := rsmtest.KVOutput{}
				if err == nil {
					out = rsmtest.KVOutput{Found: true, Value: string(kvv.Value), Rev: kvv.ModRevision, Create: kvv.CreateRevision}
				}
				w.h.Add(w.clients+i, rsmtest.KVInput{Op: rsmtest.KVGet, Key: k}, call, out, ret, fmt.Sprintf("final read on node %d", i))
				got[k] = out
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("final read of %q on node %d: %v", k, i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return got
}

// check runs porcupine and the cross-key revision checks on the history.
func (w *kvWorkload) check(t *testing.T) {
	t.Helper()
	rsmtest.CheckKV(t, w.h.Operations(), 60*time.Second)
}
