package robustness

import (
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/tests/v3/robustness/model"

	"github.com/tenure-io/tenure/rsm/kv"
)

// Each command of the log becomes the request etcd's checker reads from
// etcd's WAL for the same client call; a lease's expiry is the revoke
// etcd's leader proposes.
func TestEtcdRequest(t *testing.T) {
	put := func(k, v string, lease int64) model.EtcdOperation {
		return model.EtcdOperation{Type: model.PutOperation, Put: model.PutOptions{Key: k, Value: model.ToValueOrHash(v), LeaseID: lease}}
	}
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		cmd  []byte
		want model.EtcdRequest
	}{
		{"put", must(kv.PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 3})),
			model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{OperationsOnSuccess: []model.EtcdOperation{put("k", "v", 3)}}}},
		{"delete", must(kv.DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("k")})),
			model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{OperationsOnSuccess: []model.EtcdOperation{{Type: model.DeleteOperation, Delete: model.DeleteOptions{Key: "k"}}}}}},
		{"txn", must(kv.TxnCommand(&pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_MOD, TargetUnion: &pb.Compare_ModRevision{ModRevision: 7}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("w")}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}},
		})), model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{
			Conditions:          []model.EtcdCondition{{Key: "k", ExpectedRevision: 7}},
			OperationsOnSuccess: []model.EtcdOperation{put("k", "w", 0)},
			OperationsOnFailure: []model.EtcdOperation{{Type: model.RangeOperation, Range: model.RangeOptions{Start: "k"}}},
		}}},
		{"compact", must(kv.CompactCommand(&pb.CompactionRequest{Revision: 9})), model.EtcdRequest{Type: model.Compact, Compact: &model.CompactRequest{Revision: 9}}},
		{"lease grant", must(kv.LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 5, TTL: 60})), model.EtcdRequest{Type: model.LeaseGrant, LeaseGrant: &model.LeaseGrantRequest{LeaseID: 5}}},
		{"lease revoke", must(kv.LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 5})), model.EtcdRequest{Type: model.LeaseRevoke, LeaseRevoke: &model.LeaseRevokeRequest{LeaseID: 5}}},
		{"lease expiry", kv.LeaseExpireCommand(5), model.EtcdRequest{Type: model.LeaseRevoke, LeaseRevoke: &model.LeaseRevokeRequest{LeaseID: 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := etcdRequest(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// A range delete has no place in the checker's model: refused, not
	// taken for a delete of its first key.
	if _, err := etcdRequest(must(kv.DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}))); err == nil {
		t.Fatal("a range delete was converted")
	}
}
