package kv

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Type bytes of the messages of etcd's API: the type byte, then the
// request or response marshalled as etcd's own protobuf message.
const (
	tagEtcdPut     byte = 0x04 // PutRequest
	tagEtcdDelete  byte = 0x05 // DeleteRangeRequest
	tagEtcdTxn     byte = 0x06 // TxnRequest
	tagCompact     byte = 0x07 // CompactionRequest
	tagLeaseGrant  byte = 0x08 // LeaseGrantRequest, its ID chosen by the proposer
	tagLeaseRevoke byte = 0x09 // LeaseRevokeRequest
	tagLeaseExpire byte = 0x0A // LeaseRevokeRequest, proposed by the leader when the lease lapses

	tagRange byte = 0x13 // RangeRequest
	tagTxn   byte = 0x14 // TxnRequest, read-only

	tagEtcdPutResult     byte = 0x24 // PutResponse
	tagEtcdDeleteResult  byte = 0x25 // DeleteRangeResponse
	tagEtcdTxnResult     byte = 0x26 // TxnResponse
	tagCompactResult     byte = 0x27 // CompactionResponse
	tagLeaseGrantResult  byte = 0x28 // LeaseGrantResponse
	tagLeaseRevokeResult byte = 0x29 // LeaseRevokeResponse, of a revoke or an expiry
	tagRangeResult       byte = 0x33 // RangeResponse
)

// MaxLeaseTTL is the longest TTL a lease may be granted, in seconds
// (etcd's).
const MaxLeaseTTL = 9_000_000_000

// marshalOptions encode etcd's messages as the machine stores and
// answers them: deterministically, with the size just computed.
var marshalOptions = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

func tagged(tag byte, m proto.Message) ([]byte, error) {
	b := make([]byte, 1, 1+proto.Size(m))
	b[0] = tag
	b, err := marshalOptions.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("kv: encoding message 0x%02x: %w", tag, err)
	}
	return b, nil
}

// PutCommand is the command that applies an etcd Put.
func PutCommand(r *pb.PutRequest) ([]byte, error) { return tagged(tagEtcdPut, r) }

// DeleteRangeCommand is the command that applies an etcd DeleteRange.
func DeleteRangeCommand(r *pb.DeleteRangeRequest) ([]byte, error) { return tagged(tagEtcdDelete, r) }

// TxnCommand is the command that applies an etcd Txn (a read-only one
// too: it is then answered at the revision it is applied at).
func TxnCommand(r *pb.TxnRequest) ([]byte, error) { return tagged(tagEtcdTxn, r) }

// CompactCommand is the command that compacts history up to r.Revision.
// Physical is ignored: compaction is done when the command is applied.
func CompactCommand(r *pb.CompactionRequest) ([]byte, error) { return tagged(tagCompact, r) }

// LeaseGrantCommand is the command that grants a lease. r.ID must not be
// 0: the proposer chooses the ID, so that every replica grants the same.
func LeaseGrantCommand(r *pb.LeaseGrantRequest) ([]byte, error) { return tagged(tagLeaseGrant, r) }

// LeaseRevokeCommand is the command that revokes a lease, deleting its
// keys.
func LeaseRevokeCommand(r *pb.LeaseRevokeRequest) ([]byte, error) {
	return tagged(tagLeaseRevoke, r)
}

// LeaseExpireCommand is the command a leader proposes when lease id
// lapses: as a revoke, except that a lease already gone is not an error.
func LeaseExpireCommand(id int64) []byte {
	b, _ := tagged(tagLeaseExpire, &pb.LeaseRevokeRequest{ID: id}) // cannot fail
	return b
}

// DecodeEtcdCommand decodes a command of etcd's API as the group's log
// holds it: the request of PutCommand, DeleteRangeCommand, TxnCommand,
// CompactCommand, LeaseGrantCommand or LeaseRevokeCommand, as a
// *pb.PutRequest, *pb.DeleteRangeRequest, *pb.TxnRequest,
// *pb.CompactionRequest, *pb.LeaseGrantRequest or *pb.LeaseRevokeRequest;
// expired is true for the *pb.LeaseRevokeRequest of LeaseExpireCommand,
// the leader's when a lease lapses. It is for tools that read a group's
// history (rsm.Replay). A command of Client's (put, delete, compare-and-
// swap) or one that does not decode is ErrMalformed.
func DecodeEtcdCommand(cmd []byte) (req proto.Message, expired bool, err error) {
	if len(cmd) == 0 || !isEtcdCommand(cmd[0]) {
		return nil, false, fmt.Errorf("%w: not a command of etcd's API", ErrMalformed)
	}
	switch cmd[0] {
	case tagEtcdPut:
		req = &pb.PutRequest{}
	case tagEtcdDelete:
		req = &pb.DeleteRangeRequest{}
	case tagEtcdTxn:
		req = &pb.TxnRequest{}
	case tagCompact:
		req = &pb.CompactionRequest{}
	case tagLeaseGrant:
		req = &pb.LeaseGrantRequest{}
	case tagLeaseRevoke, tagLeaseExpire:
		req, expired = &pb.LeaseRevokeRequest{}, cmd[0] == tagLeaseExpire
	}
	if err := unmarshal(req, cmd[1:]); err != nil {
		return nil, false, fmt.Errorf("decoding command 0x%02x: %w", cmd[0], err)
	}
	return req, expired, nil
}

// RangeQuery is the query that answers an etcd Range at the revision the
// node reads at.
func RangeQuery(r *pb.RangeRequest) ([]byte, error) { return tagged(tagRange, r) }

// TxnQuery is the query that answers a read-only etcd Txn (ReadOnlyTxn)
// at the revision the node reads at, as the command would have been
// answered applied there. Until the group's first etcd write the
// machine answers ErrNeedsCommand: the Txn is then to be proposed as a
// command, which starts history (see "History and compaction").
func TxnQuery(r *pb.TxnRequest) ([]byte, error) { return tagged(tagTxn, r) }

// ReadOnlyTxn reports whether r neither puts nor deletes in any branch,
// nested Txns included, so that it can be answered by a read.
func ReadOnlyTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch tv := op.Request.(type) {
			case nil, *pb.RequestOp_RequestRange:
			case *pb.RequestOp_RequestTxn:
				if tv.RequestTxn != nil && !ReadOnlyTxn(tv.RequestTxn) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// DecodeResult decodes the result of a command or query of etcd's API:
// a *pb.PutResponse, *pb.DeleteRangeResponse, *pb.TxnResponse,
// *pb.CompactionResponse, *pb.LeaseGrantResponse, *pb.LeaseRevokeResponse
// or *pb.RangeResponse; or the error the machine answered, one of
// rpctypes' ErrGRPC errors (ErrGRPCCompacted, ErrGRPCFutureRev, ...) or
// ErrMalformed, ErrInvalidKey or ErrInvalidArgument.
func DecodeResult(res []byte) (any, error) {
	if len(res) == 0 {
		return nil, fmt.Errorf("%w: empty result", ErrMalformed)
	}
	var m proto.Message
	switch res[0] {
	case tagError:
		r, err := decodeReply(res)
		if err != nil {
			return nil, err
		}
		return nil, errorOf(r.code, r.msg)
	case tagEtcdPutResult:
		m = &pb.PutResponse{}
	case tagEtcdDeleteResult:
		m = &pb.DeleteRangeResponse{}
	case tagEtcdTxnResult:
		m = &pb.TxnResponse{}
	case tagCompactResult:
		m = &pb.CompactionResponse{}
	case tagLeaseGrantResult:
		m = &pb.LeaseGrantResponse{}
	case tagLeaseRevokeResult:
		m = &pb.LeaseRevokeResponse{}
	case tagRangeResult:
		m = &pb.RangeResponse{}
	default:
		return nil, fmt.Errorf("%w: result type 0x%02x is not of etcd's API", ErrMalformed, res[0])
	}
	if err := proto.Unmarshal(res[1:], m); err != nil {
		return nil, fmt.Errorf("%w: result 0x%02x: %v", ErrMalformed, res[0], err)
	}
	return m, nil
}

func result(tag byte, m proto.Message) []byte {
	b, err := tagged(tag, m)
	if err != nil {
		return errorReply(err)
	}
	return b
}

// unmarshal decodes body into m, which the machine then owns: protobuf
// copies byte fields, so nothing of the command is kept.
func unmarshal(m proto.Message, body []byte) error {
	if err := proto.Unmarshal(body, m); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// isEtcdCommand reports whether tag is a command of etcd's API.
func isEtcdCommand(tag byte) bool { return tag >= tagEtcdPut && tag <= tagLeaseExpire }

// applyEtcd applies a command of etcd's API. Under the write lock, with
// no put deferred. It returns the result and the events of the revision
// it made, if any and if observed.
func (m *Machine) applyEtcd(cmd []byte) ([]byte, []*mvccpb.Event) {
	tag, body := cmd[0], cmd[1:]
	observe := m.observer != nil
	switch tag {
	case tagEtcdPut:
		p, err := decodePut(body)
		if err == nil {
			err = p.check()
		}
		if err != nil {
			return errorReply(err), nil
		}
		var r pb.PutRequest
		p.fill(&r)
		if err := m.checkPutState(&r); err != nil {
			return errorReply(err), nil
		}
		w := newWriter(&m.state, observe)
		resp := w.putReq(&r)
		w.done()
		return result(tagEtcdPutResult, resp), w.evs
	case tagEtcdDelete:
		var r pb.DeleteRangeRequest
		if err := unmarshal(&r, body); err != nil {
			return errorReply(err), nil
		}
		if len(r.Key) == 0 {
			return errorReply(errEmptyKey), nil
		}
		w := newWriter(&m.state, observe)
		resp := w.deleteReq(&r)
		w.done()
		return result(tagEtcdDeleteResult, resp), w.evs
	case tagEtcdTxn:
		var r pb.TxnRequest
		if err := unmarshal(&r, body); err != nil {
			return errorReply(err), nil
		}
		if err := checkTxnRequest(&r, MaxTxnOps); err != nil {
			return errorReply(err), nil
		}
		for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
			if _, _, err := checkIntervals(ops); err != nil {
				return errorReply(err), nil
			}
		}
		path := m.comparePath(&r)
		if _, err := m.checkTxnState(&r, path); err != nil {
			return errorReply(err), nil
		}
		w := newWriter(&m.state, observe)
		resp, _ := w.execTxn(&r, path)
		resp.Header.Revision = int64(w.cur())
		w.done()
		return result(tagEtcdTxnResult, resp), w.evs
	case tagCompact:
		var r pb.CompactionRequest
		if err := unmarshal(&r, body); err != nil {
			return errorReply(err), nil
		}
		if err := m.compactTo(r.Revision); err != nil {
			return errorReply(err), nil
		}
		return result(tagCompactResult, &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: int64(m.rev)}}), nil
	case tagLeaseGrant:
		var r pb.LeaseGrantRequest
		if err := unmarshal(&r, body); err != nil {
			return errorReply(err), nil
		}
		switch _, exists := m.leaseOf(r.ID); {
		case r.ID == 0:
			return errorReply(fmt.Errorf("%w: lease ID 0 (the proposer chooses the ID)", ErrInvalidArgument)), nil
		case r.TTL > MaxLeaseTTL:
			return errorReply(errLeaseTTLLarge), nil
		case exists:
			return errorReply(errLeaseExist), nil
		}
		m.leases.ReplaceOrInsert(leaseItem{id: r.ID, ttl: r.TTL})
		resp := &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: int64(m.rev)}, ID: r.ID, TTL: r.TTL}
		m.granted = resp
		return result(tagLeaseGrantResult, resp), nil
	default: // tagLeaseRevoke, tagLeaseExpire
		var r pb.LeaseRevokeRequest
		if err := unmarshal(&r, body); err != nil {
			return errorReply(err), nil
		}
		if _, ok := m.leaseOf(r.ID); !ok {
			if tag == tagLeaseExpire {
				return result(tagLeaseRevokeResult, &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: int64(m.rev)}}), nil
			}
			return errorReply(errLeaseNotFound), nil
		}
		w := newWriter(&m.state, observe)
		for _, k := range m.leaseKeys(r.ID) {
			if e, ok := m.tree.Get(entry{key: k}); ok && !e.tomb {
				w.del(e)
			}
		}
		w.done()
		for _, k := range m.leaseKeys(r.ID) { // none left but in a corrupt state
			m.leases.Delete(leaseItem{id: r.ID, key: k})
		}
		m.leases.Delete(leaseItem{id: r.ID})
		return result(tagLeaseRevokeResult, &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: int64(m.rev)}}), w.evs
	}
}

// compactTo drops the history before rev, as etcd 3.7's compaction does:
// each key keeps its versions after rev and its latest at or before rev
// unless that is a delete made before rev (compactChain). Reads and
// watches from before rev then fail with ErrCompacted. It walks every
// key, on the goroutine that applies.
//
// Builds before etcd 3.7's rule dropped a delete made at rev too, and
// the command is the same: a group whose replicas run both builds
// during an upgrade may differ only in those deletes (tombstones, and in
// a Txn that deleted a key and put it again at rev, the delete before
// the put). Reads at every revision, counts, HashKV, leases and every
// event after rev are alike; a watch from exactly rev served by an
// older replica misses the deletes made at rev, as it always did. The
// snapshot format holds either state, and every build reads a key whose
// oldest version, or only one, is a delete; the next compaction, which
// drops those deletes everywhere, makes the states equal again. So the
// rule needs neither a new command nor a new snapshot version.
func (m *Machine) compactTo(rev int64) error {
	switch {
	case rev <= int64(m.compact):
		return errCompacted
	case rev > int64(m.rev):
		return errFutureRev
	}
	at := uint64(rev)
	var repl []entry
	var drop []string
	m.tree.Ascend(func(e entry) bool {
		if !e.tomb && e.prev == nil {
			return true
		}
		v, keep, changed := compactChain(&e, at)
		switch {
		case !changed:
		case keep:
			repl = append(repl, entry{key: e.key, version: v})
		default:
			drop = append(drop, e.key)
		}
		return true
	})
	for _, e := range repl {
		m.tree.ReplaceOrInsert(e)
	}
	for _, k := range drop {
		m.tree.Delete(entry{key: k})
	}
	m.compact = at
	return nil
}

// queryTxn answers a read-only Txn query on the current state, as
// applyEtcd answers the Txn as a command that writes nothing.
func (s *state) queryTxn(body []byte) []byte {
	var r pb.TxnRequest
	if err := unmarshal(&r, body); err != nil {
		return errorReply(err)
	}
	if !ReadOnlyTxn(&r) {
		return errorReply(fmt.Errorf("%w: a Txn query that writes", ErrInvalidArgument))
	}
	if err := checkTxnRequest(&r, MaxTxnOps); err != nil {
		return errorReply(err)
	}
	path := s.comparePath(&r)
	if _, err := s.checkTxnState(&r, path); err != nil {
		return errorReply(err)
	}
	w := newWriter(s, false)
	resp, _ := w.execTxn(&r, path)
	resp.Header.Revision = int64(w.cur())
	return result(tagEtcdTxnResult, resp)
}

// queryRange answers an etcd Range query on the current state.
func (s *state) queryRange(body []byte) []byte {
	var r pb.RangeRequest
	if err := unmarshal(&r, body); err != nil {
		return errorReply(err)
	}
	if err := checkRangeRequest(&r); err != nil {
		return errorReply(err)
	}
	resp, err := s.rangeAt(&r, s.rev)
	if err != nil {
		return errorReply(err)
	}
	return result(tagRangeResult, resp)
}
