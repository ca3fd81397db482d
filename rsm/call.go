package rsm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// CallHandler answers a call another node of the group (or this one)
// made with Node.CallLeader. It runs on the leader, outside the log:
// what it does is not replicated, so it suits what only the leader
// keeps (timers, as the etcd front end's lease keep-alives). It returns
// an error matching *NotLeaderError when this node turns out not to
// lead: the caller then asks the leader again. It must be safe for
// concurrent use.
type CallHandler func(ctx context.Context, req []byte) ([]byte, error)

// CallError is an error a leader's CallHandler returned to
// Node.CallLeader: its text only, since it may have crossed the network.
type CallError struct {
	Name    string // the call's name
	Message string
}

func (e *CallError) Error() string {
	return fmt.Sprintf("rsm: call %q on the leader: %s", e.Name, e.Message)
}

// callAttempt bounds one attempt of a call to the leader, so that a
// leader that stopped answering is asked again once another leads,
// within the caller's deadline.
const callAttempt = 2 * time.Second

// callRetry is the pause between attempts while no leader answers.
const callRetry = 50 * time.Millisecond

// calls are a node's call handlers by name.
type calls struct {
	mu sync.Mutex
	h  map[string]CallHandler
}

func (c *calls) get(name string) CallHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h[name]
}

// HandleCall registers h to answer the calls named name made to this
// node while it leads (Node.CallLeader); nil removes the handler. Every
// node of a group that may lead should register the same handlers.
// Calls come only from members of the group, authenticated as its other
// RPCs are (docs/security.md).
func (n *Node) HandleCall(name string, h CallHandler) {
	n.calls.mu.Lock()
	defer n.calls.mu.Unlock()
	if h == nil {
		delete(n.calls.h, name)
		return
	}
	if n.calls.h == nil {
		n.calls.h = map[string]CallHandler{}
	}
	n.calls.h[name] = h
}

// CallLeader runs the handler registered under name on the group's
// leader with req and returns its answer: on this node if it leads,
// else over the peer connection to the leader. Across a leader change it
// asks the new leader, until ctx ends; the handler may thus run more
// than once for one call (on an old leader whose answer was lost, then
// on the new one). It returns a *CallError for the handler's error;
// once ctx ends without an answer, an error wrapping ctx.Err() and the
// last failure (a *NotLeaderError with no Leader while none is known);
// ErrClosed once the node left.
func (n *Node) CallLeader(ctx context.Context, name string, req []byte) ([]byte, error) {
	var last error
	for {
		res, retry, err := n.callOnce(ctx, name, req)
		if !retry {
			return res, err
		}
		if last == nil || ctx.Err() == nil {
			last = err // not the attempt the deadline cut short
		}
		t := time.NewTimer(callRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("rsm: call %q on the leader: %w: %w", name, ctx.Err(), last)
		case <-n.ctx.Done():
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
	}
}

// callOnce asks the leader known now; retry says that no leader
// answered (err says why) and the call may be made again.
func (n *Node) callOnce(ctx context.Context, name string, req []byte) (res []byte, retry bool, err error) {
	if n.ctx.Err() != nil {
		return nil, false, ErrClosed
	}
	l, addr := n.route()
	if l != nil {
		h := n.calls.get(name)
		if h == nil {
			return nil, false, &CallError{Name: name, Message: "no handler of that name on the leader"}
		}
		res, err := h(ctx, req)
		var nl *NotLeaderError
		switch {
		case errors.As(err, &nl):
			return nil, true, err
		case err != nil && ctx.Err() != nil:
			return nil, true, err // ended by the caller: the loop reports it
		case err != nil:
			return nil, false, &CallError{Name: name, Message: err.Error()}
		}
		return res, false, nil
	}
	st := n.Status()
	if addr == "" || st.LeaderID == "" {
		return nil, true, &NotLeaderError{Term: st.Term}
	}
	actx, cancel := context.WithTimeout(ctx, callAttempt)
	defer cancel()
	c, err := n.host.client(actx, addr, n.group)
	if err != nil {
		return nil, true, fmt.Errorf("rsm: reaching the leader %s at %s: %w", st.LeaderID, addr, err)
	}
	resp, err := c.Call(actx, &rsmpb.CallRequest{Group: n.group, NodeId: n.host.cfg.ID, Name: name, Data: req})
	if err != nil {
		if s, ok := status.FromError(err); ok && (s.Code() == codes.PermissionDenied || s.Code() == codes.Unauthenticated) {
			// A node that just restarted publishes its key: ask again.
			return nil, true, fmt.Errorf("rsm: the leader %s at %s refused the call: %w", st.LeaderID, addr, err)
		}
		return nil, true, fmt.Errorf("rsm: calling the leader %s at %s: %w", st.LeaderID, addr, err)
	}
	switch resp.Status {
	case rsmpb.Status_OK:
		return resp.Result, false, nil
	case rsmpb.Status_ERROR:
		return nil, false, &CallError{Name: name, Message: resp.Message}
	case rsmpb.Status_TOO_LARGE:
		return nil, false, fmt.Errorf("%w: %s", ErrTooLarge, resp.Message)
	case rsmpb.Status_NOT_LEADER:
		if resp.LeaderId != "" && resp.Term > st.Term {
			n.observeLeader(leaderState{Term: resp.Term, LeaderID: resp.LeaderId, LeaderAddr: resp.LeaderAddr})
		}
		return nil, true, &NotLeaderError{Leader: resp.LeaderId, Addr: resp.LeaderAddr, Term: resp.Term}
	}
	return nil, true, fmt.Errorf("rsm: the leader %s at %s answered the call %s %s", st.LeaderID, addr, resp.Status, resp.Message)
}

// handleCall serves a Call from another node of the group.
func (n *Node) handleCall(ctx context.Context, req *rsmpb.CallRequest) *rsmpb.CallResponse {
	n.mu.Lock()
	l, role := n.leader, n.role
	resp := &rsmpb.CallResponse{Status: rsmpb.Status_NOT_LEADER, LeaderId: n.fc.leaderID, LeaderAddr: n.fc.leaderAddr, Term: n.fc.term}
	n.mu.Unlock()
	if l == nil || role != Leader {
		return resp
	}
	h := n.calls.get(req.Name)
	if h == nil {
		return &rsmpb.CallResponse{Status: rsmpb.Status_ERROR, Message: "no handler of that name on the leader"}
	}
	res, err := h(ctx, req.Data)
	var nl *NotLeaderError
	switch {
	case errors.As(err, &nl):
		return resp
	case err != nil:
		return &rsmpb.CallResponse{Status: rsmpb.Status_ERROR, Message: err.Error()}
	}
	return &rsmpb.CallResponse{Status: rsmpb.Status_OK, Result: res}
}

// Call serves Node.CallLeader for the host's groups; only members of the
// group, authenticated as the caller the request names, may call.
func (s *rpcServer) Call(ctx context.Context, req *rsmpb.CallRequest) (*rsmpb.CallResponse, error) {
	n := s.h.node(req.Group)
	if n == nil {
		s.h.m.unknownGroup.Inc()
		return &rsmpb.CallResponse{Status: rsmpb.Status_UNKNOWN_GROUP}, nil
	}
	if _, err := s.h.authorizeAs(ctx, n, req.NodeId); err != nil {
		return nil, err
	}
	if len(req.Data) > n.opts.MaxMessageSize {
		return &rsmpb.CallResponse{Status: rsmpb.Status_TOO_LARGE, Message: fmt.Sprintf("request of %d bytes, limit %d", len(req.Data), n.opts.MaxMessageSize)}, nil
	}
	return n.handleCall(ctx, req), nil
}
