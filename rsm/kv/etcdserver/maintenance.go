package etcdserver

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"net"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maintenanceService is etcd's Maintenance service: Status, Alarm (no
// alarms), Defragment (nothing to do) and HashKV are served; the others
// answer Unimplemented.
type maintenanceService struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports the node: the version Kubernetes' checks accept, the
// size of the group's snapshot in the store as the database size (1
// before the first snapshot), the
// leader's member ID, the applied log index and the term.
func (m *maintenanceService) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	// A node that refuses to serve says why at once; another answers
	// once its revision is not behind one it answered before.
	if s.node.Status().Problem == "" {
		if err := s.current(ctx); err != nil {
			return nil, err
		}
	}
	st := s.node.Status()
	s.term.Store(st.Term)
	// At least 1: etcdctl's endpoint status divides by it.
	size := max(int64(st.SnapshotBaseBytes+st.SnapshotSegmentBytes), 1)
	resp := &pb.StatusResponse{
		Header:  &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.member, Revision: apiRev(s.m.ReadView()), RaftTerm: st.Term},
		Version: Version, StorageVersion: Version,
		DbSize: size, DbSizeInUse: size,
		RaftIndex: st.ApplyIndex, RaftAppliedIndex: st.ApplyIndex, RaftTerm: st.Term,
	}
	if st.LeaderID != "" {
		resp.Leader = MemberID(st.Group, st.LeaderID)
	}
	if st.Problem != "" {
		resp.Errors = []string{st.Problem}
	}
	return resp, nil
}

// Alarm answers that there are no alarms: the store has no space quota
// the server could exceed.
func (m *maintenanceService) Alarm(context.Context, *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return &pb.AlarmResponse{Header: m.s.header(apiRev(m.s.m.ReadView()))}, nil
}

// Defragment has nothing to do: the state lives in memory.
func (m *maintenanceService) Defragment(context.Context, *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(apiRev(m.s.m.ReadView()))}, nil
}

// HashKV hashes the live keys at a revision (0: the current one) with
// their values, revisions, versions and leases: equal on every node that
// has applied that revision. It is not etcd's hash (which covers the
// history kept too), so compare it between tenure nodes only.
func (m *maintenanceService) HashKV(_ context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	view := m.s.m.ReadView()
	rev := r.Revision
	if rev == 0 {
		rev = view.Revision()
	}
	resp, err := view.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		return nil, toGRPC(err)
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var b [8]byte
	field := func(p []byte) {
		binary.BigEndian.PutUint64(b[:], uint64(len(p)))
		h.Write(b[:])
		h.Write(p)
	}
	for _, kv := range resp.Kvs {
		field(kv.Key)
		field(kv.Value)
		for _, n := range []int64{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease} {
			binary.BigEndian.PutUint64(b[:], uint64(n))
			h.Write(b[:])
		}
	}
	return &pb.HashKVResponse{Header: m.s.header(apiRev(view)), Hash: h.Sum32(), CompactRevision: view.CompactRevision(), HashRevision: rev}, nil
}

// clusterService is etcd's Cluster service: MemberList. Membership
// changes are the group's own (nodes join by starting), so MemberAdd and
// the others answer Unimplemented.
type clusterService struct {
	pb.UnimplementedClusterServer
	s *Server
}

// MemberList lists every node of the group this node knows of, as
// etcd lists its members: name, peer URL and client URLs. Each node
// publishes its client URLs with the group's heartbeats (rsm.Node.SetMeta,
// nothing written to the store), so every node lists the others' a
// heartbeat or two after they start serving.
func (c *clusterService) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	s := c.s
	st := s.node.Status()
	s.term.Store(st.Term)
	var members []*pb.Member
	seen := map[string]bool{}
	add := func(id, addr string, urls []string) {
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		m := &pb.Member{ID: MemberID(st.Group, id), Name: id, ClientURLs: urls}
		if addr != "" {
			m.PeerURLs = []string{peerURL(addr, st.PeerAuth)}
		}
		members = append(members, m)
	}
	for _, m := range st.Members {
		urls := s.urls
		if m.ID != st.ID {
			urls = splitURLs(m.Meta[clientURLsMeta])
		}
		add(m.ID, m.Addr, urls)
	}
	add(st.ID, "", s.urls) // no leader known: this node only
	return &pb.MemberListResponse{
		Header:  &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.member, Revision: apiRev(s.m.ReadView()), RaftTerm: st.Term},
		Members: members,
	}, nil
}

// clientURLsMeta is the key under which a node publishes its client URLs
// to the group (rsm.Node.SetMeta), comma-separated.
const clientURLsMeta = "etcd-client-urls"

func splitURLs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// peerURL is a peer address as a URL: the group's RPCs are gRPC over TLS,
// or in clear when the group runs with plaintext peers (auth, rsm's
// Status.PeerAuth).
func peerURL(addr, auth string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return addr
	}
	if auth == "plaintext" {
		return "http://" + addr
	}
	return "https://" + addr
}
