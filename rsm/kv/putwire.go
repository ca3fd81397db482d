package kv

import (
	"bytes"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// etcdPut is a PutRequest's fields as the machine reads them.
type etcdPut struct {
	key, value                       []byte // slices of the decoded bytes
	lease                            int64
	prevKV, ignoreValue, ignoreLease bool
}

// PutRequest's field numbers.
const (
	putKey         protowire.Number = 1
	putValue       protowire.Number = 2
	putLease       protowire.Number = 3
	putPrevKV      protowire.Number = 4
	putIgnoreValue protowire.Number = 5
	putIgnoreLease protowire.Number = 6
)

// parsePut reads a PutRequest's wire encoding as proto.Unmarshal does,
// without copying or allocating: the key and the value are slices of b. A
// field repeated takes its last value; a field of another number, or of a
// known number with another wire type, is skipped, as proto.Unmarshal
// keeps it among the message's unknown fields, which the machine never
// reads. It reports false exactly where proto.Unmarshal fails.
func parsePut(b []byte) (p etcdPut, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber || typ == protowire.EndGroupType {
			return etcdPut{}, false
		}
		b = b[n:]
		switch {
		case (num == putKey || num == putValue) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return etcdPut{}, false
			}
			if num == putKey {
				p.key = v
			} else {
				p.value = v
			}
			b = b[n:]
		case num >= putLease && num <= putIgnoreLease && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return etcdPut{}, false
			}
			switch num {
			case putLease:
				p.lease = int64(v)
			case putPrevKV:
				p.prevKV = v != 0
			case putIgnoreValue:
				p.ignoreValue = v != 0
			case putIgnoreLease:
				p.ignoreLease = v != 0
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return etcdPut{}, false
			}
			b = b[n:]
		}
	}
	return p, true
}

// decodePut is parsePut with the error unmarshal gives where it fails:
// the error is part of the command's result, which every node must
// compute alike.
func decodePut(body []byte) (etcdPut, error) {
	if p, ok := parsePut(body); ok {
		return p, nil
	}
	if err := unmarshal(&pb.PutRequest{}, body); err != nil {
		return etcdPut{}, err
	}
	return etcdPut{}, fmt.Errorf("%w: an invalid PutRequest", ErrMalformed)
}

// check is checkPutRequest.
func (p *etcdPut) check() error {
	switch {
	case len(p.key) == 0:
		return errEmptyKey
	case len(p.key) > MaxKeySize:
		return errKeyTooLong
	case p.ignoreValue && len(p.value) != 0:
		return errValueProvided
	case p.ignoreLease && p.lease != 0:
		return errLeaseProvided
	}
	return nil
}

// fill sets r to the PutRequest p holds, its value copied (the machine
// keeps it) and its key a slice of the command (the machine copies what
// it keeps of the key).
func (p *etcdPut) fill(r *pb.PutRequest) {
	r.Key, r.Value, r.Lease = p.key, bytes.Clone(p.value), p.lease
	r.PrevKv, r.IgnoreValue, r.IgnoreLease = p.prevKV, p.ignoreValue, p.ignoreLease
}
