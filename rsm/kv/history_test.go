package kv

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Every command of etcd's API decodes back to its request; a lease's
// expiry is told apart from a revoke; Client's commands are not etcd's.
func TestDecodeEtcdCommand(t *testing.T) {
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_MOD, TargetUnion: &pb.Compare_ModRevision{ModRevision: 3}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}},
	}
	for _, tc := range []struct {
		name    string
		cmd     []byte
		want    proto.Message
		expired bool
	}{
		{"put", must(PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 7})), &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 7}, false},
		{"delete", must(DeleteRangeCommand(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")})), &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}, false},
		{"txn", must(TxnCommand(txn)), txn, false},
		{"compact", must(CompactCommand(&pb.CompactionRequest{Revision: 9})), &pb.CompactionRequest{Revision: 9}, false},
		{"lease grant", must(LeaseGrantCommand(&pb.LeaseGrantRequest{ID: 5, TTL: 10})), &pb.LeaseGrantRequest{ID: 5, TTL: 10}, false},
		{"lease revoke", must(LeaseRevokeCommand(&pb.LeaseRevokeRequest{ID: 5})), &pb.LeaseRevokeRequest{ID: 5}, false},
		{"lease expiry", LeaseExpireCommand(5), &pb.LeaseRevokeRequest{ID: 5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, expired, err := DecodeEtcdCommand(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tc.want) || expired != tc.expired {
				t.Fatalf("decoded %v (expired %v), want %v (expired %v)", got, expired, tc.want, tc.expired)
			}
		})
	}
	for _, cmd := range [][]byte{nil, command{op: tagPut, key: "k", value: []byte("v")}.encode(), {tagEtcdPut, 0xff}} {
		if _, _, err := DecodeEtcdCommand(cmd); !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeEtcdCommand(%x): %v, want ErrMalformed", cmd, err)
		}
	}
}

func FuzzDecodeEtcdCommand(f *testing.F) {
	put, _ := PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	f.Add(put)
	f.Add(LeaseExpireCommand(3))
	f.Add([]byte{tagEtcdTxn, 0x0a, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, _, err := DecodeEtcdCommand(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		if req == nil {
			t.Fatal("no request and no error")
		}
	})
}
