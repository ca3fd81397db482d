package robustness

import (
	"bytes"
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/tests/v3/robustness/model"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
)

// PersistedRequests returns the requests group applied, in order, as
// etcd's checker reads them from etcd's WAL (report.PersistedRequests):
// the group's log is replayed from st (rsm.Replay) and every command the
// kv machine applied is decoded back into the etcd request it carries. A
// lease expiry is the LeaseRevoke etcd's leader proposes. The group must
// not have snapshotted: the history before a snapshot is not in the log.
func PersistedRequests(ctx context.Context, st *store.Store, group string) ([]model.EtcdRequest, error) {
	rec := &recorder{Machine: kv.New()}
	if _, err := rsm.Replay(ctx, st, group, map[string]rsm.StateMachine{kv.MachineName: rec}); err != nil {
		return nil, err
	}
	out := make([]model.EtcdRequest, 0, len(rec.cmds))
	for i, cmd := range rec.cmds {
		r, err := etcdRequest(cmd)
		if err != nil {
			return nil, fmt.Errorf("command %d of group %q: %w", i, group, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// recorder is the kv machine keeping a copy of every command applied.
type recorder struct {
	*kv.Machine
	cmds [][]byte
}

func (r *recorder) Apply(cmd []byte) []byte {
	r.cmds = append(r.cmds, bytes.Clone(cmd))
	return r.Machine.Apply(cmd)
}

// etcdRequest is the checker's form of one command of the log, as
// report.parseEntryNormal gives it for a WAL entry.
func etcdRequest(cmd []byte) (model.EtcdRequest, error) {
	req, _, err := kv.DecodeEtcdCommand(cmd)
	if err != nil {
		return model.EtcdRequest{}, err
	}
	switch r := req.(type) {
	case *pb.PutRequest:
		return model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{
			OperationsOnSuccess: []model.EtcdOperation{{Type: model.PutOperation, Put: putOptions(r)}},
		}}, nil
	case *pb.DeleteRangeRequest:
		if len(r.RangeEnd) > 0 {
			return model.EtcdRequest{}, fmt.Errorf("a DeleteRange of a range, which the checker's model does not have: %v", r)
		}
		return model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{
			OperationsOnSuccess: []model.EtcdOperation{{Type: model.DeleteOperation, Delete: model.DeleteOptions{Key: string(r.Key)}}},
		}}, nil
	case *pb.TxnRequest:
		return txnRequest(r)
	case *pb.CompactionRequest:
		return model.EtcdRequest{Type: model.Compact, Compact: &model.CompactRequest{Revision: r.Revision}}, nil
	case *pb.LeaseGrantRequest:
		return model.EtcdRequest{Type: model.LeaseGrant, LeaseGrant: &model.LeaseGrantRequest{LeaseID: r.ID}}, nil
	case *pb.LeaseRevokeRequest:
		return model.EtcdRequest{Type: model.LeaseRevoke, LeaseRevoke: &model.LeaseRevokeRequest{LeaseID: r.ID}}, nil
	}
	return model.EtcdRequest{}, fmt.Errorf("request %T", req)
}

func putOptions(r *pb.PutRequest) model.PutOptions {
	return model.PutOptions{Key: string(r.Key), Value: model.ToValueOrHash(string(r.Value)), LeaseID: r.Lease}
}

func txnRequest(r *pb.TxnRequest) (model.EtcdRequest, error) {
	txn := &model.TxnRequest{Conditions: []model.EtcdCondition{}, OperationsOnSuccess: []model.EtcdOperation{}, OperationsOnFailure: []model.EtcdOperation{}}
	for _, c := range r.Compare {
		switch {
		case c.Result == pb.Compare_EQUAL && c.Target == pb.Compare_VERSION:
			txn.Conditions = append(txn.Conditions, model.EtcdCondition{Key: string(c.Key), ExpectedVersion: c.GetVersion()})
		case c.Result == pb.Compare_EQUAL && c.Target == pb.Compare_MOD:
			txn.Conditions = append(txn.Conditions, model.EtcdCondition{Key: string(c.Key), ExpectedRevision: c.GetModRevision()})
		default:
			return model.EtcdRequest{}, fmt.Errorf("a Txn comparison the checker's model does not have: %v", c)
		}
	}
	for _, branch := range []struct {
		ops []*pb.RequestOp
		to  *[]model.EtcdOperation
	}{{r.Success, &txn.OperationsOnSuccess}, {r.Failure, &txn.OperationsOnFailure}} {
		for _, op := range branch.ops {
			o, err := operation(op)
			if err != nil {
				return model.EtcdRequest{}, err
			}
			*branch.to = append(*branch.to, o)
		}
	}
	return model.EtcdRequest{Type: model.Txn, Txn: txn}, nil
}

func operation(op *pb.RequestOp) (model.EtcdOperation, error) {
	switch {
	case op.GetRequestRange() != nil:
		r := op.GetRequestRange()
		return model.EtcdOperation{Type: model.RangeOperation, Range: model.RangeOptions{
			Start: string(r.Key), End: string(r.RangeEnd), Limit: r.Limit, KeysOnly: r.KeysOnly,
		}}, nil
	case op.GetRequestPut() != nil:
		return model.EtcdOperation{Type: model.PutOperation, Put: putOptions(op.GetRequestPut())}, nil
	case op.GetRequestDeleteRange() != nil:
		r := op.GetRequestDeleteRange()
		if len(r.RangeEnd) > 0 {
			return model.EtcdOperation{}, fmt.Errorf("a delete of a range in a Txn, which the checker's model does not have: %v", r)
		}
		return model.EtcdOperation{Type: model.DeleteOperation, Delete: model.DeleteOptions{Key: string(r.Key)}}, nil
	}
	return model.EtcdOperation{}, fmt.Errorf("a Txn operation the checker's model does not have: %v", op)
}
