package etcdserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// keeper times the group's leases on the leader, as etcd's lessor does:
// on taking leadership every lease gets its full TTL from then; a lease
// gets its TTL from the grant's apply on the leader, and from each
// keep-alive (forwarded by the other nodes); one that lapses is
// expired by a command (kv.LeaseExpireCommand) the leader proposes, so
// that every replica deletes its keys at the same revision. A follower
// times nothing. It is safe for concurrent use.
type keeper struct {
	s     *Server
	every time.Duration

	mu sync.Mutex
	// term is the term this node leads, 0 while it does not.
	term uint64
	// deadlines are the leases' deadlines on the clock, while leading.
	deadlines map[int64]time.Time
}

func newKeeper(s *Server, every time.Duration) *keeper {
	return &keeper{s: s, every: every}
}

// run checks the leases every k.every until ctx ends.
func (k *keeper) run(ctx context.Context) {
	t := k.s.clock.NewTimer(k.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		k.check(ctx)
		t.Reset(k.every)
	}
}

// leading reports the term this node leads, 0 if none.
func (k *keeper) leading() uint64 {
	st := k.s.node.Status()
	if st.State == rsm.Joined.String() && st.Role == rsm.Leader.String() {
		return st.Term
	}
	return 0
}

// sync brings the deadlines in line with the node's role and the
// machine's leases, and returns the leases lapsed at now. Under k.mu.
func (k *keeper) sync(term uint64, now time.Time) (lapsed []int64) {
	if term == 0 {
		k.term, k.deadlines = 0, nil
		return nil
	}
	leases := k.s.m.ReadView().Leases()
	if term != k.term {
		// A new leader gives every lease its full TTL, as etcd's does on
		// promotion: the old leader's deadlines are unknown here.
		k.term, k.deadlines = term, make(map[int64]time.Time, len(leases))
	}
	seen := make(map[int64]bool, len(leases))
	for _, l := range leases {
		seen[l.ID] = true
		d, ok := k.deadlines[l.ID]
		if !ok {
			d = now.Add(ttlDuration(l.TTL))
			k.deadlines[l.ID] = d
		}
		if !now.Before(d) {
			lapsed = append(lapsed, l.ID)
		}
	}
	for id := range k.deadlines {
		if !seen[id] {
			delete(k.deadlines, id)
		}
	}
	return lapsed
}

func ttlDuration(ttl int64) time.Duration {
	if ttl > int64(time.Duration(1<<62)/time.Second) {
		return time.Duration(1 << 62)
	}
	return time.Duration(ttl) * time.Second
}

// check expires the lapsed leases, while leading.
func (k *keeper) check(ctx context.Context) {
	term := k.leading()
	k.mu.Lock()
	lapsed := k.sync(term, k.s.clock.Now())
	k.mu.Unlock()
	for _, id := range lapsed {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := run(cctx, k.s, kv.LeaseExpireCommand(id), nil, func(r *pb.LeaseRevokeResponse) **pb.ResponseHeader { return &r.Header })
		cancel()
		if err != nil {
			// Retried at the next check, while the lease still lapses.
			k.s.log.Warn("expiring a lease", "lease", id, "err", err)
			continue
		}
		k.mu.Lock()
		delete(k.deadlines, id)
		k.mu.Unlock()
	}
}

// keepAlive renews lease id on the leader: its TTL counts from now. ttl
// is 0 if the lease does not exist. On a node that does not lead it
// fails with an *rsm.NotLeaderError, which has the call asked again of
// the leader.
func (k *keeper) keepAlive(id int64) (ttl int64, err error) {
	term := k.leading()
	if term == 0 {
		return 0, &rsm.NotLeaderError{}
	}
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lead(term, now)
	ttl, ok := k.s.m.ReadView().LeaseTTL(id)
	if !ok {
		return 0, nil
	}
	if !now.Before(k.deadline(id, ttl, now)) {
		return 0, nil // lapsed: its expiry is proposed, or will be
	}
	k.deadlines[id] = now.Add(ttlDuration(ttl))
	return ttl, nil
}

// lead starts timing every lease afresh when this node began to lead term
// (sync); otherwise a keep-alive or a time-to-live looks at its own lease
// only, so that its cost does not grow with the number of leases: check
// drops the deadlines of leases that are gone. Under k.mu.
func (k *keeper) lead(term uint64, now time.Time) {
	if term != k.term {
		k.sync(term, now)
	}
}

// deadline is lease id's deadline, which starts now, with its full TTL,
// if the lease has none yet (granted while this node did not look), as
// sync would give it. Under k.mu, while leading.
func (k *keeper) deadline(id, ttl int64, now time.Time) time.Time {
	d, ok := k.deadlines[id]
	if !ok {
		d = now.Add(ttlDuration(ttl))
		k.deadlines[id] = d
	}
	return d
}

// granted starts lease id's TTL now, if this node leads: the machine
// tells it of each grant it applies (kv.LeaseObserver), on the goroutine
// that applies, so it does not ask the node. A node that just began to
// lead and has not looked yet gives every lease its full TTL when it
// does.
func (k *keeper) granted(id, ttl int64) {
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term == 0 {
		return
	}
	k.deadlines[id] = now.Add(ttlDuration(ttl))
}

// timeToLive is lease id as the leader sees it, its TTL left on the
// leader's timer. On a node that does not lead it fails with an
// *rsm.NotLeaderError.
func (k *keeper) timeToLive(id int64, withKeys bool) (ttlAnswer, error) {
	term := k.leading()
	if term == 0 {
		return ttlAnswer{}, &rsm.NotLeaderError{}
	}
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lead(term, now)
	l, keys, ok := k.s.m.ReadView().Lease(id)
	if !ok {
		return ttlAnswer{}, nil
	}
	a := ttlAnswer{Found: true, Granted: l.TTL, TTL: 0}
	if d := k.deadline(id, l.TTL, now); now.Before(d) {
		a.TTL = int64((d.Sub(now) + time.Second - 1) / time.Second)
	}
	if withKeys {
		a.Keys = make([][]byte, len(keys))
		for i, key := range keys {
			a.Keys[i] = []byte(key)
		}
	}
	return a, nil
}

// ttlAnswer is the leader's answer to a LeaseTimeToLive, as a call
// carries it.
type ttlAnswer struct {
	Found   bool     `json:"found"`
	Granted int64    `json:"granted"`
	TTL     int64    `json:"ttl"`
	Keys    [][]byte `json:"keys,omitempty"`
}

// Names of the calls the leader answers (rsm.Node.CallLeader), under the
// machine's name: several etcd front ends may share a group.
func (s *Server) keepAliveCall() string  { return "etcd/" + s.name + "/lease-keepalive" }
func (s *Server) timeToLiveCall() string { return "etcd/" + s.name + "/lease-timetolive" }

// handleCalls registers the leader's side of the forwarded lease calls
// on the node (nil on close).
func (s *Server) handleCalls(on bool) {
	if !on {
		s.node.HandleCall(s.keepAliveCall(), nil)
		s.node.HandleCall(s.timeToLiveCall(), nil)
		return
	}
	s.node.HandleCall(s.keepAliveCall(), func(_ context.Context, req []byte) ([]byte, error) {
		if len(req) != 8 {
			return nil, fmt.Errorf("etcdserver: a keep-alive call of %d bytes, want 8", len(req))
		}
		ttl, err := s.leases.keepAlive(int64(binary.BigEndian.Uint64(req)))
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.AppendUint64(nil, uint64(ttl)), nil
	})
	s.node.HandleCall(s.timeToLiveCall(), func(_ context.Context, req []byte) ([]byte, error) {
		if len(req) != 9 {
			return nil, fmt.Errorf("etcdserver: a time-to-live call of %d bytes, want 9", len(req))
		}
		a, err := s.leases.timeToLive(int64(binary.BigEndian.Uint64(req)), req[8] == 1)
		if err != nil {
			return nil, err
		}
		return json.Marshal(a)
	})
}

// forwardTimeout bounds a lease call forwarded to the leader, across
// leader changes: etcd's request timeout with its default election
// timeout (5 s + 2 × 1 s).
const forwardTimeout = 7 * time.Second

// callLeader makes a lease call on the leader (this node, if it leads),
// and maps its failure to the error etcd answers: ErrGRPCNoLeader if no
// leader was known by the deadline, ErrGRPCTimeout if none answered,
// ErrGRPCStopped once the node left.
func (s *Server) callLeader(ctx context.Context, name string, req []byte) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	res, err := s.node.CallLeader(cctx, name, req)
	if err == nil {
		return res, nil
	}
	var nl *rsm.NotLeaderError
	switch {
	case ctx.Err() != nil:
		return nil, toGRPC(ctx.Err())
	case errors.Is(err, rsm.ErrClosed):
		return nil, rpctypes.ErrGRPCStopped
	case errors.As(err, &nl) && nl.Leader == "":
		return nil, rpctypes.ErrGRPCNoLeader
	case errors.Is(err, context.DeadlineExceeded):
		return nil, rpctypes.ErrGRPCTimeout
	}
	return nil, toGRPC(err)
}

// renew renews lease id on the leader and returns its TTL, 0 if it does
// not exist.
func (s *Server) renew(ctx context.Context, id int64) (int64, error) {
	res, err := s.callLeader(ctx, s.keepAliveCall(), binary.BigEndian.AppendUint64(nil, uint64(id)))
	if err != nil {
		return 0, err
	}
	if len(res) != 8 {
		return 0, status.Errorf(codes.Internal, "etcdserver: the leader answered a keep-alive with %d bytes", len(res))
	}
	return int64(binary.BigEndian.Uint64(res)), nil
}

// leaseService is etcd's Lease service.
type leaseService struct {
	pb.UnimplementedLeaseServer
	s *Server
}

// newLeaseID is a random positive lease ID: the proposer chooses it, so
// that every replica grants the same.
func newLeaseID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
			return id
		}
	}
}

func (l *leaseService) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	s := l.s
	req := &pb.LeaseGrantRequest{TTL: r.TTL, ID: r.ID}
	if req.TTL > kv.MaxLeaseTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	if req.TTL < s.minTTL {
		req.TTL = s.minTTL
	}
	chosen := req.ID == 0
	for attempt := 0; ; attempt++ {
		if chosen {
			req.ID = newLeaseID()
		}
		cmd, err := kv.LeaseGrantCommand(req)
		resp, err := run(ctx, s, cmd, err, func(r *pb.LeaseGrantResponse) **pb.ResponseHeader { return &r.Header })
		if chosen && attempt < 3 && errors.Is(err, rpctypes.ErrGRPCLeaseExist) {
			continue // an ID we chose was taken: choose another
		}
		if err != nil {
			return nil, err
		}
		return resp, nil // the leader timed it from its apply
	}
}

func (l *leaseService) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	cmd, err := kv.LeaseRevokeCommand(r)
	return run(ctx, l.s, cmd, err, func(r *pb.LeaseRevokeResponse) **pb.ResponseHeader { return &r.Header })
}

// LeaseTimeToLive asks the leader, as etcd does: the TTL left is the
// leader's timer, the lease and its keys the leader's state. A lease
// that does not exist has TTL -1, as in etcd.
func (l *leaseService) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s := l.s
	req := binary.BigEndian.AppendUint64(nil, uint64(r.ID))
	if r.Keys {
		req = append(req, 1)
	} else {
		req = append(req, 0)
	}
	res, err := s.callLeader(ctx, s.timeToLiveCall(), req)
	if err != nil {
		return nil, err
	}
	var a ttlAnswer
	if err := json.Unmarshal(res, &a); err != nil {
		return nil, status.Errorf(codes.Internal, "etcdserver: the leader's answer to a time-to-live: %v", err)
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: s.header(apiRev(s.m.ReadView())), ID: r.ID, TTL: -1}
	if a.Found {
		resp.GrantedTTL, resp.TTL, resp.Keys = a.Granted, a.TTL, a.Keys
	}
	return resp, nil
}

func (l *leaseService) LeaseLeases(context.Context, *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	view := l.s.m.ReadView()
	resp := &pb.LeaseLeasesResponse{Header: l.s.header(apiRev(view))}
	for _, lease := range view.Leases() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: lease.ID})
	}
	return resp, nil
}

// LeaseKeepAlive renews leases on the leader: a node that does not lead
// forwards each keep-alive to the leader over the group's peer
// connection and answers with the leader's answer, as etcd does; across
// a leader change it asks the new leader. A lease that does not exist
// is answered with TTL 0, as etcd answers.
func (l *leaseService) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	s := l.s
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ttl, err := s.renew(stream.Context(), req.ID)
		if err != nil {
			return err
		}
		resp := &pb.LeaseKeepAliveResponse{Header: s.header(apiRev(s.m.ReadView())), ID: req.ID, TTL: ttl}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("etcdserver: keep-alive of lease %d: %w", req.ID, err)
		}
	}
}
