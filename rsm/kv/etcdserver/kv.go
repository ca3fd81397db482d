package etcdserver

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// kvService is etcd's KV service: writes are the machine's commands
// through the node (acknowledged once in the store), linearizable ranges
// the node's reads, serializable ranges this node's state.
type kvService struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k *kvService) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	s := k.s
	if r.Serializable {
		if err := s.current(ctx); err != nil {
			return nil, err
		}
		resp, err := s.m.ReadView().Range(r)
		if err != nil {
			return nil, toGRPC(err)
		}
		s.fill(&resp.Header) // the response is new; only its values are the view's
		return resp, nil
	}
	if len(r.RangeEnd) > 0 && !r.CountOnly {
		// A list: only its count is read on the leader (localRange).
		return k.localRange(ctx, r)
	}
	q, err := kv.RangeQuery(r)
	if err != nil {
		return nil, toGRPC(err)
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := s.node.Read(bctx, s.name, q)
	if errors.Is(err, rsm.ErrTooLarge) {
		return k.localRange(ctx, r)
	}
	if err != nil {
		return nil, s.toGRPC(bctx, err)
	}
	return decode(s, res, func(r *pb.RangeResponse) **pb.ResponseHeader { return &r.Header })
}

// localRange answers a linearizable Range over a key range, or one whose
// answer is larger than the group carries (its MaxMessageSize, set by
// --max-request-bytes), as etcd answers a linearizable read: its count
// only is read on the leader, which gives the revision that holds every
// write acknowledged before (and the Range's errors: a compacted or
// future revision); once this node has applied that revision, it
// answers from its own state. The leader's loop, which computes the
// answers of the group's reads between its writes, counts the keys
// instead of copying their values, and a follower's list does not cross
// the peer connection.
func (k *kvService) localRange(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	s := k.s
	c := proto.Clone(r).(*pb.RangeRequest)
	c.CountOnly, c.KeysOnly, c.Limit = true, false, 0
	q, err := kv.RangeQuery(c)
	if err != nil {
		return nil, toGRPC(err)
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := s.node.Read(bctx, s.name, q)
	if err != nil {
		return nil, s.toGRPC(bctx, err)
	}
	count, err := decode(s, res, func(r *pb.RangeResponse) **pb.ResponseHeader { return &r.Header })
	if err != nil {
		return nil, err
	}
	rev := count.Header.Revision
	s.hub.waitRev(bctx, rev)
	view := s.m.ReadView()
	if apiRev(view) < rev {
		if err := bctx.Err(); err != nil {
			return nil, s.toGRPC(bctx, err)
		}
		return nil, rpctypes.ErrGRPCStopped
	}
	resp, err := view.Range(r)
	if err != nil {
		return nil, toGRPC(err)
	}
	s.fill(&resp.Header) // the response is new; only its values are the view's
	return resp, nil
}

func (k *kvService) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	cmd, err := kv.PutCommand(r)
	return run(ctx, k.s, cmd, err, func(r *pb.PutResponse) **pb.ResponseHeader { return &r.Header })
}

func (k *kvService) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	cmd, err := kv.DeleteRangeCommand(r)
	return run(ctx, k.s, cmd, err, func(r *pb.DeleteRangeResponse) **pb.ResponseHeader { return &r.Header })
}

// Txn proposes a Txn that writes as a command. One that only reads (no
// put or delete in any branch, nested Txns included) is a linearizable
// read instead, as a linearizable Range is: the same answer at the same
// revision, without a write to the log. etcd's Txn has no serializable
// flag.
func (k *kvService) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if kv.ReadOnlyTxn(r) {
		resp, err := k.readTxn(ctx, r)
		if !errors.Is(err, errNeedsCommand) {
			return resp, err
		}
	}
	cmd, err := kv.TxnCommand(r)
	resp, err := run(ctx, k.s, cmd, err, func(r *pb.TxnResponse) **pb.ResponseHeader { return &r.Header })
	if err != nil {
		return nil, err
	}
	fillTxn(resp, resp.Header.RaftTerm, k.s)
	return resp, nil
}

// errNeedsCommand: the read-only Txn is to be proposed as a command.
var errNeedsCommand = errors.New("etcdserver: a command")

// readTxn answers a read-only Txn by the node's linearizable read. It
// returns errNeedsCommand, for the Txn to be proposed as before, when
// the group has had no etcd write yet (the command starts history),
// when the leader's version does not read Txns (kv.ErrMalformed), and
// when the answer is larger than a read carries.
func (k *kvService) readTxn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	s := k.s
	q, err := kv.TxnQuery(r)
	if err != nil {
		return nil, toGRPC(err)
	}
	res, err := s.node.Read(ctx, s.name, q)
	if errors.Is(err, rsm.ErrTooLarge) {
		return nil, errNeedsCommand
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	v, err := kv.DecodeResult(res)
	if errors.Is(err, kv.ErrNeedsCommand) || errors.Is(err, kv.ErrMalformed) {
		return nil, errNeedsCommand
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	resp, ok := v.(*pb.TxnResponse)
	if !ok {
		return nil, status.Errorf(codes.Internal, "etcdserver: the machine answered %T, want %T", v, resp)
	}
	fillTxn(resp, s.headerFunc()(0).RaftTerm, s)
	return resp, nil
}

// fillTxn fills the headers of a Txn's response and of its ops', with
// the group's term.
func fillTxn(resp *pb.TxnResponse, term uint64, s *Server) {
	if resp == nil {
		return
	}
	fill := func(h **pb.ResponseHeader) {
		var rev int64
		if *h != nil {
			rev = (*h).Revision
		}
		*h = &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.member, Revision: rev, RaftTerm: term}
	}
	fill(&resp.Header)
	for _, op := range resp.Responses {
		switch r := op.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			if r.ResponseRange != nil {
				fill(&r.ResponseRange.Header)
			}
		case *pb.ResponseOp_ResponsePut:
			if r.ResponsePut != nil {
				fill(&r.ResponsePut.Header)
			}
		case *pb.ResponseOp_ResponseDeleteRange:
			if r.ResponseDeleteRange != nil {
				fill(&r.ResponseDeleteRange.Header)
			}
		case *pb.ResponseOp_ResponseTxn:
			fillTxn(r.ResponseTxn, term, s)
		}
	}
}

// Compact compacts history up to r.Revision when the command is
// applied: a physical compaction is done by then too.
func (k *kvService) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	cmd, err := kv.CompactCommand(r)
	return run(ctx, k.s, cmd, err, func(r *pb.CompactionResponse) **pb.ResponseHeader { return &r.Header })
}

// RangeStream serves etcd 3.7's streamed range: the chunks of
// kv.ReadView.RangeStream, all read from one view. A serializable stream
// reads this node's state; a linearizable one first reads the group's
// revision through the node, as Range does, and then this node's state
// once it has applied that revision.
func (k *kvService) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	s := k.s
	ctx := stream.Context()
	if err := kv.CheckRangeStream(r); err != nil {
		return toGRPC(err)
	}
	if r.Serializable {
		if err := s.current(ctx); err != nil {
			return err
		}
	}
	view := s.m.ReadView()
	if !r.Serializable {
		// The key alone, counted: a cheap linearizable read whose
		// header is the group's revision now. Once this node has
		// applied it, its state holds every write acknowledged before.
		q, err := kv.RangeQuery(&pb.RangeRequest{Key: r.Key, CountOnly: true})
		if err != nil {
			return toGRPC(err)
		}
		bctx, cancel := s.bound(ctx)
		defer cancel()
		res, err := s.node.Read(bctx, s.name, q)
		if err != nil {
			return s.toGRPC(bctx, err)
		}
		at, err := decode(s, res, func(r *pb.RangeResponse) **pb.ResponseHeader { return &r.Header })
		if err != nil {
			return err
		}
		rev := at.Header.Revision
		s.hub.waitRev(bctx, rev)
		if view = s.m.ReadView(); apiRev(view) < rev {
			if err := bctx.Err(); err != nil {
				return s.toGRPC(bctx, err)
			}
			return rpctypes.ErrGRPCStopped
		}
	}
	err := view.RangeStream(r, s.fragment, func(out *pb.RangeResponse) error {
		if out.Header != nil {
			s.fill(&out.Header)
		}
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: out})
	})
	return toGRPC(err)
}
