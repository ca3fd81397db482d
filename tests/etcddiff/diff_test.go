package etcddiff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// What the comparison leaves out, each because it differs between two
// runs of etcd itself, not between etcd and tenure (a RangeStream is
// compared whole, chunk by chunk: etcd's chunk boundaries depend only
// on the keys it reads):
//
//   - A header's cluster_id, member_id and raft_term (each server's own).
//   - A watch's events are compared one by one, not as the responses
//     that carry them: how many events one response carries while a
//     watch catches up, and the revision in that response's header,
//     depend on when etcd's watcher loop runs. Created and canceled
//     responses are compared whole (but for the three header fields,
//     and a created response's revision: see below).
//   - Progress notifications, which the test asks for to know a watch
//     has caught up.
//   - LeaseTimeToLive's TTL left: it counts down on each server's own
//     clock. Whether the lease exists (-1) is compared.
//   - LeaseLeases' order: etcd lists its leases by expiry time; and the
//     order of LeaseTimeToLive's keys, which etcd lists from a map.

// What the workload leaves out, each with the difference it showed:
//
//   - Watches from now (start_revision 0), and the revision in a watch's
//     created response. Now and then (4 times in some 140 seed runs:
//     seeds 2, 10 and 20 twice; never again on replay) a watch created
//     right after a write was acknowledged reported a created revision
//     one off the other server's: tenure's 42 where etcd's was 43 (11
//     for 12, 12 for 13), and once tenure's 54 where etcd's was 53; and
//     once a watch from now had 39 entries in its history on tenure
//     where etcd's had 35: it also delivered the acknowledged write's
//     events. Which server's revision lagged is not known. A watch
//     "from now" asks for the revision after the last acknowledged one,
//     and the created response is compared without its header.
//   - Compaction without physical: etcd then removes the compacted
//     revisions from its backend in the background, and a watch from
//     the compact revision sees that revision's deletes or not
//     depending on whether the backend got there (etcd delivered three
//     deletes at the compact revision 7 that tenure, which compacts at
//     once, did not). Every Compact asks for physical.
//   - Watches, serializable ranges and lease reads go to tenure's
//     leader: a follower may not have applied the last acknowledged
//     write yet, as on an etcd follower (docs/etcd.md). Writes and
//     linearizable ranges go to every node in turn.

// Defaults of the run; TENURE_ETCDDIFF_SEED replays one seed,
// TENURE_ETCDDIFF_SEEDS and TENURE_ETCDDIFF_OPS change the run.
const (
	defaultSeeds = 20
	defaultOps   = 300
)

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// TestDiff runs the seeded workload against embedded etcd and tenure.
func TestDiff(t *testing.T) {
	ops := envInt(t, "TENURE_ETCDDIFF_OPS", defaultOps)
	if s := os.Getenv("TENURE_ETCDDIFF_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_ETCDDIFF_SEED=%q: %v", s, err)
		}
		runSeed(t, seed, ops)
		return
	}
	seeds := envInt(t, "TENURE_ETCDDIFF_SEEDS", defaultSeeds)
	// Deletes a watch from the compact revision saw made at it, over
	// every seed: the default run must reach that case.
	var atCompact atomic.Int64
	t.Cleanup(func() {
		t.Logf("watches from the compact revision saw %d deletes made at it", atCompact.Load())
		if !t.Failed() && seeds >= defaultSeeds && ops >= defaultOps && atCompact.Load() == 0 {
			t.Error("no watch from the compact revision saw a delete made at it: the workload no longer reaches that case")
		}
	})
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed+1), func(t *testing.T) {
			t.Parallel()
			atCompact.Add(runSeed(t, seed+1, ops))
		})
	}
}

// side is one server under test: its clients and its open watches.
type side struct {
	name string
	kv   pb.KVClient
	// leader serves serializable ranges and watches: a follower may not
	// have applied the last write acknowledged yet (as an etcd follower),
	// and a watch from now or its created response would show it.
	leader pb.KVClient
	lease  pb.LeaseClient
	// leaderLease reads leases where they are applied first, for the
	// same reason.
	leaderLease pb.LeaseClient
	watch       pb.WatchClient
	watches     []*watch
}

// runner runs one seed's workload on both sides.
type runner struct {
	t    *testing.T
	ctx  context.Context
	seed uint64
	rnd  *rand.Rand
	etcd *side
	ten  *side
	i    int    // the op being run
	last string // the last op run, as the failure reports it

	// What the workload knows, from etcd's answers.
	rev     int64
	compact int64
	// deleted is the revision of the last DeleteRange that deleted a
	// key: compactions aim at it now and then, and watches start at the
	// compact revision, so that they see a delete kept there.
	deleted  int64
	leases   []int64
	expiries int
}

// runSeed runs one seed's workload on both sides and compares them. It
// returns how many deletes etcd's watches from the compact revision
// delivered at that revision (tenure's delivered the same, or the run
// failed).
func runSeed(t *testing.T, seed uint64, ops int) int64 {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ec := startEtcd(t)
	g := startTenure(t)
	tc := newClient(t, g.addrs...)
	lc := newClient(t, g.addrs[g.c.Leader()])
	r := &runner{
		t: t, ctx: ctx, seed: seed, rnd: rand.New(rand.NewPCG(seed, 0x6574636464696666)),
		etcd: &side{name: "etcd", kv: pb.NewKVClient(ec.ActiveConnection()), leader: pb.NewKVClient(ec.ActiveConnection()), lease: pb.NewLeaseClient(ec.ActiveConnection()), leaderLease: pb.NewLeaseClient(ec.ActiveConnection()), watch: pb.NewWatchClient(ec.ActiveConnection())},
		ten:  &side{name: "tenure", kv: pb.NewKVClient(tc.ActiveConnection()), leader: pb.NewKVClient(lc.ActiveConnection()), lease: pb.NewLeaseClient(tc.ActiveConnection()), leaderLease: pb.NewLeaseClient(lc.ActiveConnection()), watch: pb.NewWatchClient(lc.ActiveConnection())},
	}
	r.do("initial range", func(s *side) (any, error) {
		return s.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	})
	for r.i = 0; r.i < ops; r.i++ {
		r.step()
	}
	r.i = ops
	r.barrier()
	r.compareWatches()
	// Every revision still in history reads the same.
	for rev := max(r.compact, 1); rev <= r.rev; rev++ {
		r.do(fmt.Sprintf("final range at %d", rev), func(s *side) (any, error) {
			return s.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		})
	}
	var atCompact int64
	for _, w := range r.etcd.watches {
		if !w.fromCompact {
			continue
		}
		w.mu.Lock()
		for _, resp := range w.resps {
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision == w.req.StartRevision {
					atCompact++
				}
			}
		}
		w.mu.Unlock()
	}
	return atCompact
}

// fail reports a mismatch with what replays it.
func (r *runner) fail(what string, format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d (replay: TENURE_ETCDDIFF_SEED=%d), op %d, %s: %s", r.seed, r.seed, r.i, what, fmt.Sprintf(format, args...))
}

// do runs f on both sides and compares the normalised answers. It
// returns etcd's.
func (r *runner) do(what string, f func(*side) (any, error)) (any, error) {
	r.t.Helper()
	r.last = fmt.Sprintf("op %d: %s", r.i, what)
	er, eerr := f(r.etcd)
	tr, terr := f(r.ten)
	e, tn := outcome(er, eerr), outcome(tr, terr)
	if e != tn {
		r.fail(what, "\netcd:   %s\ntenure: %s", e, tn)
	}
	if eerr == nil {
		if h := headerOf(er); h != nil && h.Revision > r.rev {
			r.rev = h.Revision
		}
	}
	return er, eerr
}

// outcome is the normalised text of a response or an error.
func outcome(resp any, err error) string {
	if err != nil {
		st, _ := status.FromError(err)
		return fmt.Sprintf("error %s: %q", st.Code(), st.Message())
	}
	normalize(resp)
	return fmt.Sprintf("%T %v", resp, resp)
}

func clearHeader(h *pb.ResponseHeader) {
	if h != nil {
		h.ClusterId, h.MemberId, h.RaftTerm = 0, 0, 0
	}
}

func headerOf(resp any) *pb.ResponseHeader {
	if h, ok := resp.(interface{ GetHeader() *pb.ResponseHeader }); ok {
		return h.GetHeader()
	}
	return nil
}

// normalize clears what legitimately differs between the servers.
func normalize(resp any) {
	clearHeader(headerOf(resp))
	switch r := resp.(type) {
	case *pb.TxnResponse:
		for _, op := range r.Responses {
			switch x := op.Response.(type) {
			case *pb.ResponseOp_ResponseRange:
				normalize(x.ResponseRange)
			case *pb.ResponseOp_ResponsePut:
				normalize(x.ResponsePut)
			case *pb.ResponseOp_ResponseDeleteRange:
				normalize(x.ResponseDeleteRange)
			case *pb.ResponseOp_ResponseTxn:
				normalize(x.ResponseTxn)
			}
		}
	case *pb.LeaseTimeToLiveResponse:
		if r.TTL > 0 {
			r.TTL = 1 // counts down on each server's clock
		}
		slices.SortFunc(r.Keys, bytes.Compare) // etcd's are in map order
	case *pb.LeaseLeasesResponse:
		slices.SortFunc(r.Leases, func(a, b *pb.LeaseStatus) int { return int(min(max(a.ID-b.ID, -1), 1)) })
	}
}

// The key space: few enough keys that ops meet, prefixes to range over.
var keyspace = func() []string {
	var ks []string
	for _, p := range []string{"a/", "b/"} {
		for i := range 8 {
			ks = append(ks, p+strconv.Itoa(i))
		}
	}
	return append(ks, "c", "d", "e", "f")
}()

func (r *runner) key() []byte { return []byte(keyspace[r.rnd.IntN(len(keyspace))]) }

func (r *runner) value() []byte {
	return []byte(strings.Repeat("v", r.rnd.IntN(3)) + strconv.Itoa(r.rnd.IntN(100)))
}

// interval is a key and range end of one of etcd's shapes: a key, a
// range, a prefix, from a key, every key, and rarely an empty range.
func (r *runner) interval() (key, end []byte) {
	switch n := r.rnd.IntN(20); {
	case n < 8:
		return r.key(), nil
	case n < 12:
		a, b := r.key(), r.key()
		if string(a) > string(b) && r.rnd.IntN(4) != 0 {
			a, b = b, a
		}
		return a, b
	case n < 16:
		p := []string{"a/", "b/", "a", "", "c"}[r.rnd.IntN(5)]
		if p == "" {
			return []byte{0}, []byte{0}
		}
		end := []byte(p)
		end[len(end)-1]++
		return []byte(p), end
	case n < 19:
		return r.key(), []byte{0}
	default:
		return nil, nil // empty key: refused
	}
}

// pastRev is a revision around the history: compacted, in it, current,
// future.
func (r *runner) pastRev() int64 {
	lo := max(r.compact-2, 1)
	return lo + r.rnd.Int64N(r.rev+3-lo)
}

func (r *runner) leaseID() int64 {
	if len(r.leases) > 0 && r.rnd.IntN(5) != 0 {
		return r.leases[r.rnd.IntN(len(r.leases))]
	}
	return 1 + r.rnd.Int64N(40)
}

func (r *runner) putReq() *pb.PutRequest {
	p := &pb.PutRequest{Key: r.key(), Value: r.value(), PrevKv: r.rnd.IntN(3) == 0}
	if r.rnd.IntN(5) == 0 {
		p.Lease = r.leaseID()
	}
	if r.rnd.IntN(12) == 0 {
		p.IgnoreValue = true
		if r.rnd.IntN(3) != 0 {
			p.Value = nil
		}
	}
	if r.rnd.IntN(12) == 0 {
		p.IgnoreLease = true
		if r.rnd.IntN(3) != 0 {
			p.Lease = 0
		}
	}
	if r.rnd.IntN(50) == 0 {
		p.Key = nil
	}
	return p
}

func (r *runner) deleteReq() *pb.DeleteRangeRequest {
	k, e := r.interval()
	return &pb.DeleteRangeRequest{Key: k, RangeEnd: e, PrevKv: r.rnd.IntN(2) == 0}
}

func (r *runner) rangeReq(inTxn bool) *pb.RangeRequest {
	k, e := r.interval()
	q := &pb.RangeRequest{Key: k, RangeEnd: e}
	if r.rnd.IntN(3) == 0 {
		q.Limit = r.rnd.Int64N(5)
	}
	if !inTxn && r.rnd.IntN(3) == 0 {
		q.Revision = r.pastRev()
	}
	if r.rnd.IntN(2) == 0 {
		q.SortOrder = pb.RangeRequest_SortOrder(r.rnd.IntN(3))
		q.SortTarget = pb.RangeRequest_SortTarget(r.rnd.IntN(5))
	}
	q.KeysOnly = r.rnd.IntN(8) == 0
	q.CountOnly = r.rnd.IntN(8) == 0
	if r.rnd.IntN(8) == 0 {
		q.MinModRevision = r.pastRev()
	}
	if r.rnd.IntN(8) == 0 {
		q.MaxModRevision = r.pastRev()
	}
	if r.rnd.IntN(8) == 0 {
		q.MinCreateRevision = r.pastRev()
	}
	if r.rnd.IntN(8) == 0 {
		q.MaxCreateRevision = r.pastRev()
	}
	q.Serializable = r.rnd.IntN(3) == 0
	return q
}

// rangeStreamReq is a Range for RangeStream: mostly of the shapes it
// serves (key order, no revision filters), with limits below, at and
// past its first chunk's 10 keys; now and then one it refuses.
func (r *runner) rangeStreamReq() *pb.RangeRequest {
	q := r.rangeReq(false)
	if r.rnd.IntN(8) != 0 {
		q.SortOrder, q.SortTarget = pb.RangeRequest_NONE, pb.RangeRequest_SortTarget(r.rnd.IntN(5))
		if r.rnd.IntN(4) == 0 {
			q.SortOrder, q.SortTarget = pb.RangeRequest_ASCEND, pb.RangeRequest_KEY
		}
		q.MinModRevision, q.MaxModRevision, q.MinCreateRevision, q.MaxCreateRevision = 0, 0, 0, 0
	}
	if r.rnd.IntN(3) == 0 {
		q.Limit = []int64{0, 3, 9, 10, 11, 15, 20, -1}[r.rnd.IntN(8)]
	}
	if r.rnd.IntN(2) == 0 {
		q.Key, q.RangeEnd = []byte{0}, []byte{0} // every key: more than a chunk
	}
	return q
}

// streamChunks is a RangeStream's chunks in order, as compared: each
// chunk whole, chunk boundaries included (etcd's depend only on the
// keys read, so the servers must agree on them).
type streamChunks []*pb.RangeResponse

func (c streamChunks) String() string {
	var b strings.Builder
	for i, ch := range c {
		normalize(ch)
		fmt.Fprintf(&b, "\n  chunk %d: %v", i, ch)
	}
	return b.String()
}

func rangeStream(ctx context.Context, kv pb.KVClient, q *pb.RangeRequest) (any, error) {
	stream, err := kv.RangeStream(ctx, q)
	if err != nil {
		return nil, err
	}
	var chunks streamChunks
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, resp.RangeResponse)
	}
}

func (r *runner) compare() *pb.Compare {
	k, e := r.interval()
	if r.rnd.IntN(3) != 0 {
		e = nil
	}
	c := &pb.Compare{Key: k, RangeEnd: e, Result: pb.Compare_CompareResult(r.rnd.IntN(4))}
	switch r.rnd.IntN(5) {
	case 0:
		c.Target = pb.Compare_VALUE
		c.TargetUnion = &pb.Compare_Value{Value: r.value()}
	case 1:
		c.Target = pb.Compare_VERSION
		c.TargetUnion = &pb.Compare_Version{Version: r.rnd.Int64N(4)}
	case 2:
		c.Target = pb.Compare_CREATE
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: r.pastRev()}
	case 3:
		c.Target = pb.Compare_MOD
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: r.pastRev()}
	default:
		c.Target = pb.Compare_LEASE
		id := int64(0)
		if r.rnd.IntN(2) == 0 {
			id = r.leaseID()
		}
		c.TargetUnion = &pb.Compare_Lease{Lease: id}
	}
	return c
}

func (r *runner) txnOps(depth int) []*pb.RequestOp {
	var ops []*pb.RequestOp
	for range r.rnd.IntN(4) {
		switch n := r.rnd.IntN(10); {
		case n < 3:
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r.rangeReq(true)}})
		case n < 6:
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r.putReq()}})
		case n < 8:
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r.deleteReq()}})
		default:
			if depth < 2 {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r.txnReq(depth + 1)}})
			}
		}
	}
	return ops
}

func (r *runner) txnReq(depth int) *pb.TxnRequest {
	q := &pb.TxnRequest{}
	for range r.rnd.IntN(4) {
		q.Compare = append(q.Compare, r.compare())
	}
	q.Success, q.Failure = r.txnOps(depth), r.txnOps(depth)
	return q
}

// step runs one random op on both sides.
func (r *runner) step() {
	ctx := r.ctx
	switch n := r.rnd.IntN(1000); {
	case n < 250:
		q := r.putReq()
		r.do(fmt.Sprintf("put %v", q), func(s *side) (any, error) { return s.kv.Put(ctx, q) })
	case n < 350:
		q := r.deleteReq()
		resp, err := r.do(fmt.Sprintf("delete %v", q), func(s *side) (any, error) { return s.kv.DeleteRange(ctx, q) })
		if err == nil && resp.(*pb.DeleteRangeResponse).Deleted > 0 {
			r.deleted = r.rev
		}
	case n < 520:
		q := r.rangeReq(false)
		r.do(fmt.Sprintf("range %v", q), func(s *side) (any, error) {
			if q.Serializable {
				return s.leader.Range(ctx, q)
			}
			return s.kv.Range(ctx, q)
		})
	case n < 600:
		q := r.rangeStreamReq()
		r.do(fmt.Sprintf("range stream %v", q), func(s *side) (any, error) {
			if q.Serializable {
				return rangeStream(ctx, s.leader, q)
			}
			return rangeStream(ctx, s.kv, q)
		})
	case n < 800:
		q := r.txnReq(0)
		r.do(fmt.Sprintf("txn %v", q), func(s *side) (any, error) { return s.kv.Txn(ctx, q) })
	case n < 820:
		// A compaction cancels the watches still catching up from before
		// it, and removes the values their prev_kv would read: let every
		// watch catch up first, as a client that watches does.
		r.barrier()
		q := &pb.CompactionRequest{Revision: max(r.compact-1, 1) + r.rnd.Int64N(r.rev+2-max(r.compact-1, 1)), Physical: true}
		if r.deleted > r.compact && r.rnd.IntN(2) == 0 {
			q.Revision = r.deleted // a delete at the compact revision
		}
		if _, err := r.do(fmt.Sprintf("compact %v", q), func(s *side) (any, error) { return s.kv.Compact(ctx, q) }); err == nil {
			r.compact = q.Revision
		}
	case n < 870:
		q := &pb.LeaseGrantRequest{ID: r.leaseID(), TTL: 3600}
		switch r.rnd.IntN(20) {
		case 0:
			q.TTL = 9_000_000_001 // too large
		case 1:
			q.ID = -q.ID
		}
		if _, err := r.do(fmt.Sprintf("lease grant %v", q), func(s *side) (any, error) { return s.lease.LeaseGrant(ctx, q) }); err == nil {
			r.leases = append(r.leases, q.ID)
		}
	case n < 900:
		q := &pb.LeaseRevokeRequest{ID: r.leaseID()}
		if _, err := r.do(fmt.Sprintf("lease revoke %v", q), func(s *side) (any, error) { return s.lease.LeaseRevoke(ctx, q) }); err == nil {
			r.leases = slices.DeleteFunc(r.leases, func(id int64) bool { return id == q.ID })
		}
	case n < 920:
		q := &pb.LeaseTimeToLiveRequest{ID: r.leaseID(), Keys: r.rnd.IntN(2) == 0}
		r.do(fmt.Sprintf("lease ttl %v", q), func(s *side) (any, error) { return s.leaderLease.LeaseTimeToLive(ctx, q) })
	case n < 930:
		r.do("lease leases", func(s *side) (any, error) { return s.leaderLease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{}) })
	case n < 990:
		if len(r.etcd.watches) >= 12 {
			return
		}
		k, e := r.interval()
		if k == nil {
			k = []byte("a/0")
		}
		q := &pb.WatchCreateRequest{Key: k, RangeEnd: e, PrevKv: r.rnd.IntN(3) == 0}
		switch r.rnd.IntN(3) {
		case 0:
			q.StartRevision = r.rev + 1 // from now; see the exclusions above
		default:
			q.StartRevision = r.pastRev()
			if r.compact > 0 && r.rnd.IntN(3) == 0 {
				q.StartRevision = r.compact // with the deletes made there
			}
		}
		if r.rnd.IntN(8) == 0 {
			q.Filters = append(q.Filters, pb.WatchCreateRequest_FilterType(r.rnd.IntN(2)))
		}
		r.openWatch(q)
	default:
		if r.expiries < 1 {
			r.expiries++
			r.expire()
		}
	}
}

// expire grants a lease of the shortest TTL, puts keys on it, and waits
// until it has expired on both sides. Nothing else runs meanwhile: when
// a lease lapses is each server's own timing.
func (r *runner) expire() {
	ctx := r.ctx
	id := int64(1000 + r.i)
	q := &pb.LeaseGrantRequest{ID: id, TTL: 1}
	if _, err := r.do(fmt.Sprintf("lease grant %v", q), func(s *side) (any, error) { return s.lease.LeaseGrant(ctx, q) }); err != nil {
		return
	}
	for range 1 + r.rnd.IntN(3) {
		p := &pb.PutRequest{Key: r.key(), Value: r.value(), Lease: id}
		r.do(fmt.Sprintf("put %v", p), func(s *side) (any, error) { return s.kv.Put(ctx, p) })
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range []*side{r.etcd, r.ten} {
		for {
			resp, err := s.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
			if err == nil && resp.TTL == -1 {
				break
			}
			if time.Now().After(deadline) {
				r.fail("lease expiry", "lease %d has not expired on %s after 20s: %v %v", id, s.name, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The expiry's revision, if it deleted keys.
	r.do("range after expiry", func(s *side) (any, error) {
		return s.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	})
}

// watch is one watch on its own stream, with every response it got.
type watch struct {
	op     int // the op that opened it
	req    *pb.WatchCreateRequest
	stream pb.Watch_WatchClient
	// fromCompact: it started at the compact revision of its time.
	fromCompact bool

	mu       sync.Mutex
	resps    []*pb.WatchResponse
	err      error
	canceled bool
	// progress is the highest revision a progress notification reported.
	progress int64
	changed  chan struct{}
}

func (w *watch) recv() {
	for {
		resp, err := w.stream.Recv()
		w.mu.Lock()
		if err != nil {
			w.err = err
		} else if isProgress(resp) {
			w.progress = max(w.progress, resp.Header.Revision)
		} else {
			w.resps = append(w.resps, resp)
			w.canceled = w.canceled || resp.Canceled
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func isProgress(r *pb.WatchResponse) bool {
	return len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0
}

func (r *runner) openWatch(q *pb.WatchCreateRequest) {
	desc := fmt.Sprintf("watch %v", q)
	for _, s := range []*side{r.etcd, r.ten} {
		stream, err := s.watch.Watch(r.ctx)
		if err != nil {
			r.fail(desc, "%s: %v", s.name, err)
		}
		w := &watch{op: r.i, req: q, stream: stream, fromCompact: r.compact > 0 && q.StartRevision == r.compact, changed: make(chan struct{})}
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: q}}); err != nil {
			r.fail(desc, "%s: %v", s.name, err)
		}
		if testing.Verbose() {
			r.t.Logf("op %d opens a watch after %s", r.i, r.last)
		}
		go w.recv()
		s.watches = append(s.watches, w)
	}
}

// barrier waits until every live watch on both sides has every event up
// to the current revision: a progress notification at or after it
// follows them on the stream.
func (r *runner) barrier() {
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range []*side{r.etcd, r.ten} {
		for i, w := range s.watches {
			if w.req.StartRevision > r.rev {
				continue // nothing to see yet
			}
			for {
				w.mu.Lock()
				done, err, ch := w.canceled || w.progress >= r.rev, w.err, w.changed
				w.mu.Unlock()
				if done {
					break
				}
				if err != nil {
					r.fail(fmt.Sprintf("watch %d %v", i, w.req), "%s: %v", s.name, err)
				}
				if time.Now().After(deadline) {
					r.fail(fmt.Sprintf("watch %d %v", i, w.req), "%s: no progress to revision %d within 20s; got %v", s.name, r.rev, w.history())
				}
				// etcd answers a progress request only when the stream's
				// watches have caught up: ask again until it does.
				_ = w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
				select {
				case <-ch:
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

// history is a watch's responses as compared: events one a line, and
// the created and canceled responses whole.
func (w *watch) history() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, resp := range w.resps {
		if len(resp.Events) > 0 && !resp.Created && !resp.Canceled && resp.CompactRevision == 0 {
			for _, ev := range resp.Events {
				out = append(out, fmt.Sprintf("watch %d: %s", resp.WatchId, ev.String()))
			}
			continue
		}
		c := proto.Clone(resp).(*pb.WatchResponse)
		clearHeader(c.Header)
		if c.Created {
			c.Header.Revision = 0 // see the exclusions above
		}
		out = append(out, c.String())
	}
	return out
}

func (r *runner) compareWatches() {
	for i, ew := range r.etcd.watches {
		tw := r.ten.watches[i]
		eh, th := ew.history(), tw.history()
		if !slices.Equal(eh, th) {
			n := 0
			for n < len(eh) && n < len(th) && eh[n] == th[n] {
				n++
			}
			r.fail(fmt.Sprintf("watch %d opened by op %d %v", i, ew.op, ew.req), "histories differ at entry %d\netcd (%d):\n  %s\ntenure (%d):\n  %s",
				n, len(eh), strings.Join(eh, "\n  "), len(th), strings.Join(th, "\n  "))
		}
	}
}
