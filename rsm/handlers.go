package rsm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// handleFollow serves a Follow request.
func (n *Node) handleFollow(ctx context.Context, req *rsmpb.FollowRequest) *rsmpb.FollowResponse {
	n.mu.Lock()
	l := n.leader
	resp := &rsmpb.FollowResponse{Term: n.fc.term, LeaderId: n.fc.leaderID, LeaderAddr: n.fc.leaderAddr}
	n.mu.Unlock()
	// A leader still taking over has its run already: the request waits
	// for the run's loop (addFollower), or fails when the takeover does. A
	// refusal would cost the follower a heartbeat interval.
	if l == nil || (req.Term != 0 && req.Term != l.term) {
		resp.Status = rsmpb.Status_NOT_LEADER
		return resp
	}
	confirmed, err := l.addFollower(ctx, followerInfo{ID: req.NodeId, Addr: req.Addr, ApplyIndex: req.ApplyIndex}, req.Incarnation, req.ReadsPacks)
	var dup *DuplicateIDError
	if errors.As(err, &dup) {
		resp.Status, resp.Message = rsmpb.Status_DUPLICATE_ID, err.Error()
		resp.OtherAddr, resp.OtherIncarnation = dup.Addr, dup.Incarnation
		return resp
	}
	if err != nil {
		resp.Status, resp.Message = rsmpb.Status_NOT_LEADER, err.Error()
		return resp
	}
	resp.CommitIndex = confirmed
	resp.Status = rsmpb.Status_OK
	return resp
}

// handleSynchronize applies committed entries from the leader, in order
// (rule 2, docs/rsm.md: at a gap it stops, and the leader resends from the
// follower's index): only from the leader leader_state.json names for the
// request's term (c is the authenticated caller).
func (n *Node) handleSynchronize(ctx context.Context, req *rsmpb.SynchronizeRequest, c caller) *rsmpb.SynchronizeResponse {
	n.mu.Lock()
	stale, term := n.fc.stale(req.Term), n.fc.term
	n.mu.Unlock()
	if stale {
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_STALE_TERM, Message: fmt.Sprintf("term %d is behind %d", req.Term, term)}
	}
	if err := n.fromLeader(ctx, req, c); err != nil {
		n.m.syncs.WithLabelValues(n.group, "refused").Inc()
		n.log.Warn("refused a Synchronize", "err", err)
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_NOT_LEADER, Message: err.Error()}
	}
	n.mu.Lock()
	if n.fc.stale(req.Term) {
		term := n.fc.term
		n.mu.Unlock()
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_STALE_TERM, Message: fmt.Sprintf("term %d is behind %d", req.Term, term)}
	}
	if l := n.leader; l != nil {
		if req.Term > l.term {
			// The store names another leader of a higher term: we are
			// deposed (by leader_state.json, not by the request's word).
			l.depose(fmt.Errorf("%w: leader_state.json names %s leader of term %d", errDeposed, req.LeaderId, req.Term))
		}
		n.mu.Unlock()
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_NOT_LEADER, Message: "this node leads or led term " + fmt.Sprint(l.term)}
	}
	n.fc.heard(req)
	n.leaderMeta = req.LeaderMeta
	n.mu.Unlock()
	// The leader lists what this node publishes as it last heard it:
	// answer with ours while that differs.
	var meta map[string]string
	if mine := n.metaNow(); len(mine) > 0 {
		i := slices.IndexFunc(req.Followers, func(f *rsmpb.FollowerInfo) bool { return f.Id == n.host.cfg.ID })
		if i < 0 || !maps.Equal(req.Followers[i].Meta, mine) {
			meta = mine
		}
	}
	select {
	case n.heard <- struct{}{}:
	default:
	}
	var applied uint64
	if !n.rep.do(func(r *replica) {
		for _, e := range req.Entries {
			if e.Index <= r.applied {
				continue
			}
			if e.Index != r.applied+1 {
				break // a gap: the leader resends from our index
			}
			r.apply(e)
		}
		applied = r.applied
		n.m.applyIndex.WithLabelValues(n.group).Set(float64(applied))
	}) {
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_NOT_LEADER, Message: ErrClosed.Error()}
	}
	n.m.syncs.WithLabelValues(n.group, "OK").Inc()
	return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_OK, ApplyIndex: applied, EnqueuedIndex: applied, Meta: meta}
}

// accept takes a state request from another node's stream.
func (n *Node) accept(req *rsmpb.StateRequest) *pending {
	p := &pending{req: req, start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
	n.mu.Lock()
	l, role := n.leader, n.role
	resp := &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER, LeaderId: n.fc.leaderID, LeaderAddr: n.fc.leaderAddr, Term: n.fc.term}
	n.mu.Unlock()
	if l == nil || role != Leader {
		p.reply(resp)
		return p
	}
	if req.Register {
		if req.Type != rsmpb.RequestType_COMMAND || req.Client == "" || req.Session != 0 || req.Seq != 0 {
			p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_ERROR, Message: "a registration carries a label and no session or sequence number"})
			return p
		}
		l.enqueue(p)
		return p
	}
	if _, ok := n.machines[req.Machine]; !ok {
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_MACHINE, Message: req.Machine})
		return p
	}
	if req.Type == rsmpb.RequestType_COMMAND && (req.Session == 0 || req.Seq == 0) {
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_ERROR, Message: "command without session or sequence number"})
		return p
	}
	l.enqueue(p)
	return p
}
