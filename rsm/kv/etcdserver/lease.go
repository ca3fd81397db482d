package etcdserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
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
// granted or kept alive gets its TTL from then; one that lapses is
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

// errNotLeader answers a keep-alive on a node that does not lead: the
// code is one the etcd client retries on (a new stream, maybe to another
// endpoint).
func errNotLeader(leader string) error {
	if leader == "" {
		return rpctypes.ErrGRPCNoLeader
	}
	return status.Errorf(codes.Unavailable, "etcdserver: not leader (lease keep-alives are served by the group's leader, %s)", leader)
}

// keepAlive renews lease id on the leader: its TTL counts from now. ttl
// is 0 if the lease does not exist.
func (k *keeper) keepAlive(id int64) (ttl int64, err error) {
	term := k.leading()
	if term == 0 {
		return 0, errNotLeader(k.s.node.Status().LeaderID)
	}
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sync(term, now)
	l, _, ok := k.s.m.ReadView().Lease(id)
	if !ok {
		return 0, nil
	}
	if d, ok := k.deadlines[id]; ok && !now.Before(d) {
		return 0, nil // lapsed: its expiry is proposed, or will be
	}
	k.deadlines[id] = now.Add(ttlDuration(l.TTL))
	return l.TTL, nil
}

// granted starts lease id's TTL now, if this node leads.
func (k *keeper) granted(id, ttl int64) {
	term := k.leading()
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if term == 0 || term != k.term {
		return // the next check starts it
	}
	k.deadlines[id] = now.Add(ttlDuration(ttl))
}

// remaining is lease id's time left in seconds, rounded up, and whether
// this node times it (it leads).
func (k *keeper) remaining(id int64) (int64, bool) {
	now := k.s.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	d, ok := k.deadlines[id]
	if !ok || k.term == 0 {
		return 0, false
	}
	left := d.Sub(now)
	if left <= 0 {
		return 0, true
	}
	return int64((left + time.Second - 1) / time.Second), true
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
		s.leases.granted(resp.ID, resp.TTL)
		return resp, nil
	}
}

func (l *leaseService) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	cmd, err := kv.LeaseRevokeCommand(r)
	return run(ctx, l.s, cmd, err, func(r *pb.LeaseRevokeResponse) **pb.ResponseHeader { return &r.Header })
}

// LeaseTimeToLive reads the lease on this node's state. Its TTL left is
// the leader's timer; a follower, which times nothing, reports the
// granted TTL. A lease that does not exist has TTL -1, as in etcd.
func (l *leaseService) LeaseTimeToLive(_ context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s := l.s
	view := s.m.ReadView()
	lease, keys, ok := view.Lease(r.ID)
	resp := &pb.LeaseTimeToLiveResponse{Header: s.header(apiRev(view)), ID: r.ID, TTL: -1}
	if !ok {
		return resp, nil
	}
	resp.GrantedTTL, resp.TTL = lease.TTL, lease.TTL
	if left, timed := s.leases.remaining(r.ID); timed {
		resp.TTL = left
	}
	if r.Keys {
		resp.Keys = make([][]byte, len(keys))
		for i, k := range keys {
			resp.Keys[i] = []byte(k)
		}
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

// LeaseKeepAlive renews leases on the leader. A follower answers with
// an Unavailable status naming the leader: the etcd client then opens a
// new stream (to another endpoint, if it has several). Forwarding to the
// leader is not done yet.
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
		ttl, err := s.leases.keepAlive(req.ID)
		if err != nil {
			return err
		}
		resp := &pb.LeaseKeepAliveResponse{Header: s.header(apiRev(s.m.ReadView())), ID: req.ID, TTL: ttl}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("etcdserver: keep-alive of lease %d: %w", req.ID, err)
		}
	}
}
