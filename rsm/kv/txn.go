package kv

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// writer applies the writes of one command: they share the main
// revision rev (the current one plus one) and take sub revisions in
// order. The revision moves only if something was written (done).
type writer struct {
	s    *state
	rev  uint64
	subs uint32
	// evs collects the writes' events when the machine has an observer.
	evs     []*mvccpb.Event
	observe bool
	// legacy: the legacy era's writes (Client's commands only), which
	// keep no history: a put replaces the key's version at Version 1, a
	// delete removes the key, and the compact revision follows the
	// current one.
	legacy bool
}

func newWriter(s *state, observe bool) *writer {
	return &writer{s: s, rev: s.rev + 1, observe: observe}
}

// cur is the revision reads in the command see: the one its writes so
// far make.
func (w *writer) cur() uint64 {
	if w.subs > 0 {
		return w.rev
	}
	return w.rev - 1
}

// done ends the command, moving the revision if it wrote.
func (w *writer) done() {
	if w.subs > 0 {
		w.s.rev = w.rev
	}
	if w.legacy {
		w.s.compact = w.s.rev
	}
}

// put writes value (which the machine keeps) under key, attached to
// lease (0 for none), detaching the key from the lease it had.
func (w *writer) put(key string, value []byte, lease int64) {
	s := w.s
	nv := version{value: value, create: w.rev, mod: w.rev, sub: w.subs, ver: 1, lease: lease}
	var oldLease int64
	// One search for a new key, a second for one that exists (its
	// create revision, version and history go on).
	if old, ok := s.tree.ReplaceOrInsert(entry{key: key, version: nv}); ok {
		// The key's string the entry had: a restore allocates the keys in
		// their order, and a tree whose neighbouring keys lie together in
		// memory is searched with fewer cache misses.
		key = old.key
		if old.tomb {
			s.live++
		} else {
			nv.create, nv.ver, oldLease = old.create, old.ver+1, old.lease
		}
		prev := old.version
		nv.prev = &prev
		stored := nv
		if w.legacy { // the event's PrevKv is still the version replaced
			nv.ver, stored.ver, stored.prev = 1, 1, nil
		}
		s.tree.ReplaceOrInsert(entry{key: key, version: stored})
	} else {
		s.live++
	}
	if oldLease != lease {
		if oldLease != 0 {
			s.leases.Delete(leaseItem{id: oldLease, key: key})
		}
		if lease != 0 {
			s.leases.ReplaceOrInsert(leaseItem{id: lease, key: key})
		}
	}
	if w.observe {
		w.evs = append(w.evs, eventOf(key, &nv))
	}
	w.subs++
}

// del deletes the live key of e, leaving a tombstone.
func (w *writer) del(e entry) {
	s := w.s
	prev := e.version
	nv := version{mod: w.rev, sub: w.subs, tomb: true, prev: &prev}
	if w.legacy {
		s.tree.Delete(entry{key: e.key})
	} else {
		s.tree.ReplaceOrInsert(entry{key: e.key, version: nv})
	}
	s.live--
	if prev.lease != 0 {
		s.leases.Delete(leaseItem{id: prev.lease, key: e.key})
	}
	if w.observe {
		w.evs = append(w.evs, eventOf(e.key, &nv))
	}
	w.subs++
}

// liveIn lists the live entries of a range now.
func (s *state) liveIn(kr keyRange) []entry {
	var es []entry
	s.ascend(kr, func(e *entry) bool {
		if !e.tomb {
			es = append(es, *e)
		}
		return true
	})
	return es
}

func (w *writer) putReq(p *pb.PutRequest) *pb.PutResponse {
	key := string(p.Key)
	_, prev := w.s.get(key)
	value, lease := p.Value, p.Lease
	if value == nil {
		value = []byte{}
	}
	if prev != nil {
		if p.IgnoreValue {
			value = prev.value
		}
		if p.IgnoreLease {
			lease = prev.lease
		}
	}
	resp := &pb.PutResponse{}
	if p.PrevKv && prev != nil {
		resp.PrevKv = kvOf(key, prev)
	}
	w.put(key, value, lease)
	resp.Header = &pb.ResponseHeader{Revision: int64(w.rev)}
	return resp
}

func (w *writer) deleteReq(d *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	es := w.s.liveIn(rangeOf(d.Key, d.RangeEnd))
	resp := &pb.DeleteRangeResponse{Deleted: int64(len(es))}
	if d.PrevKv {
		resp.PrevKvs = make([]*mvccpb.KeyValue, len(es))
		for i := range es {
			resp.PrevKvs[i] = kvOf(es[i].key, &es[i].version)
		}
	}
	for _, e := range es {
		w.del(e)
	}
	resp.Header = &pb.ResponseHeader{Revision: int64(w.cur())}
	return resp
}

// branch is the ops a Txn runs given its comparisons' outcome.
func branch(t *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return t.Success
	}
	return t.Failure
}

func nestedTxn(op *pb.RequestOp) *pb.TxnRequest {
	if tv, ok := op.Request.(*pb.RequestOp_RequestTxn); ok {
		if tv.RequestTxn == nil {
			return &pb.TxnRequest{}
		}
		return tv.RequestTxn
	}
	return nil
}

// comparePath evaluates a Txn's comparisons and those of the nested Txns
// its chosen branches hold, before any of its writes, in the order etcd
// does (pre-order).
func (s *state) comparePath(t *pb.TxnRequest) []bool {
	ok := true
	for _, c := range t.Compare {
		if !s.compare(c) {
			ok = false
			break
		}
	}
	path := []bool{ok}
	for _, op := range branch(t, ok) {
		if n := nestedTxn(op); n != nil {
			path = append(path, s.comparePath(n)...)
		}
	}
	return path
}

// compare is one comparison against the keys of its range now: all of
// them must satisfy it; with none, a value comparison fails and the
// others compare against zero values.
func (s *state) compare(c *pb.Compare) bool {
	found, all := false, true
	s.ascend(rangeOf(c.Key, c.RangeEnd), func(e *entry) bool {
		if e.tomb {
			return true
		}
		found = true
		if !compareKV(c, kvOf(e.key, &e.version)) {
			all = false
			return false
		}
		return true
	})
	if !found {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	return all
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = compareInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = compareInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = compareInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = compareInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTxnState checks the ops of the branches path chooses against the
// state before the Txn, as etcd does: a range's revision, a put's lease,
// and that a put that keeps the key's value or lease finds the key. It
// returns how much of path the Txn used.
func (s *state) checkTxnState(t *pb.TxnRequest, path []bool) (int, error) {
	used := 1
	for _, op := range branch(t, path[0]) {
		switch tv := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if r := tv.RequestRange; r != nil && r.Revision != 0 {
				if r.Revision > int64(s.rev) {
					return 0, errFutureRev
				}
				if r.Revision < int64(s.compact) {
					return 0, errCompacted
				}
			}
		case *pb.RequestOp_RequestPut:
			if err := s.checkTxnPut(tv.RequestPut); err != nil {
				return 0, err
			}
		case *pb.RequestOp_RequestTxn:
			n, err := s.checkTxnState(nestedTxn(op), path[used:])
			if err != nil {
				return 0, err
			}
			used += n
		}
	}
	return used, nil
}

// checkPutState checks a put against the state: its lease must exist,
// and a put keeping the value or lease needs the key.
func (s *state) checkPutState(p *pb.PutRequest) error {
	if p == nil {
		return nil
	}
	if p.Lease != 0 {
		if _, ok := s.leaseOf(p.Lease); !ok {
			return errLeaseNotFound
		}
	}
	if p.IgnoreValue || p.IgnoreLease {
		if _, v := s.get(string(p.Key)); v == nil {
			return errKeyNotFound
		}
	}
	return nil
}

// checkTxnPut checks a put of a Txn against the state, in etcd's order
// for a Txn: a put keeping the value or lease needs the key before its
// lease must exist (a Put alone checks the lease first).
func (s *state) checkTxnPut(p *pb.PutRequest) error {
	if p != nil && (p.IgnoreValue || p.IgnoreLease) {
		if _, v := s.get(string(p.Key)); v == nil {
			return errKeyNotFound
		}
	}
	return s.checkPutState(p)
}

// execTxn runs the branch path chooses and returns its response and how
// much of path it used. Every check passed before: nothing fails.
func (w *writer) execTxn(t *pb.TxnRequest, path []bool) (*pb.TxnResponse, int) {
	ok := path[0]
	used := 1
	ops := branch(t, ok)
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops)), Header: &pb.ResponseHeader{}}
	for i, op := range ops {
		switch tv := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			r, err := w.s.rangeAt(tv.RequestRange, w.cur())
			if err != nil {
				r = &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: int64(w.cur())}}
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}}
		case *pb.RequestOp_RequestPut:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: w.putReq(tv.RequestPut)}}
		case *pb.RequestOp_RequestDeleteRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: w.deleteReq(tv.RequestDeleteRange)}}
		case *pb.RequestOp_RequestTxn:
			sub, n := w.execTxn(nestedTxn(op), path[used:])
			used += n
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}}
		default:
			resp.Responses[i] = &pb.ResponseOp{}
		}
	}
	return resp, used
}

// MaxTxnOps is the most comparisons, or ops in one branch, a Txn may
// hold (etcd's default --max-txn-ops; a group's replicas must agree, so
// it is not configurable).
const MaxTxnOps = 128

// checkTxnRequest checks a Txn's shape as etcd's gRPC layer does.
func checkTxnRequest(r *pb.TxnRequest, maxOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxOps {
		return errTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return errEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, u := range ops {
			if err := checkRequestOp(u, maxOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRequestOp(u *pb.RequestOp, maxOps int) error {
	switch uv := u.Request.(type) {
	case *pb.RequestOp_RequestRange:
		return checkRangeRequest(uv.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPutRequest(uv.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		if uv.RequestDeleteRange == nil || len(uv.RequestDeleteRange.Key) == 0 {
			return errEmptyKey
		}
		return nil
	case *pb.RequestOp_RequestTxn:
		return checkTxnRequest(nestedTxn(u), maxOps)
	}
	return errKeyNotFound
}

func checkRangeRequest(r *pb.RangeRequest) error {
	if r == nil || len(r.Key) == 0 {
		return errEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return errInvalidSort
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return errInvalidSort
	}
	return nil
}

func checkPutRequest(r *pb.PutRequest) error {
	switch {
	case r == nil || len(r.Key) == 0:
		return errEmptyKey
	case len(r.Key) > MaxKeySize:
		return errKeyTooLong
	case r.IgnoreValue && len(r.Value) != 0:
		return errValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return errLeaseProvided
	}
	return nil
}

// interval is a DeleteRange's keys as etcd's duplicate check sees them:
// [key, end), or the key alone when end is empty. An end of "\x00" makes
// an interval no key is in, as it does in etcd.
type interval struct{ key, end string }

func (iv interval) has(k string) bool {
	if iv.end == "" {
		return k == iv.key
	}
	return iv.key <= k && k < iv.end
}

func hits(dels []interval, k string) bool {
	for _, iv := range dels {
		if iv.has(k) {
			return true
		}
	}
	return false
}

// checkIntervals refuses a branch that puts a key twice or puts a key it
// also deletes, with etcd's rules for nested Txns (a key put in both
// branches of one nested Txn is one put).
func checkIntervals(reqs []*pb.RequestOp) (map[string]bool, []interval, error) {
	var dels []interval
	for _, req := range reqs {
		if tv, ok := req.Request.(*pb.RequestOp_RequestDeleteRange); ok && tv.RequestDeleteRange != nil {
			dels = append(dels, interval{string(tv.RequestDeleteRange.Key), string(tv.RequestDeleteRange.RangeEnd)})
		}
	}
	puts := map[string]bool{}
	for _, req := range reqs {
		n := nestedTxn(req)
		if n == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(n.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := checkIntervals(n.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if puts[k] || hits(dels, k) {
				return nil, nil, errDuplicateKey
			}
			puts[k] = true
		}
		for k := range putsElse {
			if puts[k] && !putsThen[k] {
				return nil, nil, errDuplicateKey
			}
			if hits(dels, k) {
				return nil, nil, errDuplicateKey
			}
			puts[k] = true
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, req := range reqs {
		tv, ok := req.Request.(*pb.RequestOp_RequestPut)
		if !ok || tv.RequestPut == nil {
			continue
		}
		k := string(tv.RequestPut.Key)
		if puts[k] || hits(dels, k) {
			return nil, nil, errDuplicateKey
		}
		puts[k] = true
	}
	return puts, dels, nil
}
