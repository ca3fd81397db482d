package rsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// client is a node's client of its group (rule 9): the session its
// commands run under, the sequence numbers given out in it, the answers it
// awaits, and the stream that forwards requests to a leader on another
// node. It is safe for concurrent use. Where a request goes and whether
// the node may serve are the node's (Node.route, Node.waitJoined).
type client struct {
	n *Node

	// mu orders submissions: sequence numbers are assigned and requests
	// sent in the same critical section.
	mu          sync.Mutex
	session     uint64        // the node's client session; 0: none yet
	seq         uint64        // last sequence number given out in session
	awaiting    awaiting      // the numbers in session whose answers are awaited
	registering chan struct{} // closed when the registration in flight ends
	fwd         *forwarder
	fwdCur      atomic.Pointer[forwarder] // fwd, for dropForwarder without mu

	// slots bounds the node's commands numbered and not yet answered to
	// MaxConcurrentRequests, the leader's bound: a command takes a slot
	// before it gets its number, so a burst waits at the node unnumbered
	// instead of being refused BUSY by the leader while later numbers
	// overtake the refused ones.
	slots chan struct{}
}

// submit sends a command or a read to the group's leader (roundTrip),
// within RequestTimeout unless ctx has a deadline.
func (c *client) submit(ctx context.Context, typ rsmpb.RequestType, machine string, data []byte) ([]byte, error) {
	n := c.n
	if n.ctx.Err() != nil {
		return nil, n.stoppedErr()
	}
	if _, ok := n.machines[machine]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMachine, machine)
	}
	if limit := c.maxData(machine); typ == rsmpb.RequestType_COMMAND && len(data) > limit {
		// Its log entry could not be sent to a follower (the leader
		// checks the exact size too).
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), limit)
	} else if len(data) > n.opts.MaxMessageSize-1024 {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), n.opts.MaxMessageSize-1024)
	}
	start := time.Now()
	defer func() { n.m.submit.WithLabelValues(n.group, typ.String()).Observe(time.Since(start).Seconds()) }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.opts.RequestTimeout)
		defer cancel()
	}
	return c.roundTrip(ctx, &rsmpb.StateRequest{Group: n.group, Type: typ, Machine: machine, Data: data})
}

// maxData is the largest command for machine that fits in a log entry
// alone: the entry's room less the command's other fields.
func (c *client) maxData(machine string) int {
	n := c.n
	return entryRoom(n.opts.MaxMessageSize, n.host.cfg.ID, n.group) - len(machine) - 60
}

// roundTrip sends req to the leader until it is answered or ctx ends. A
// command keeps its (session, sequence number) across retries, so the
// group applies it at most once; it is numbered afresh only when no
// attempt can have been applied.
func (c *client) roundTrip(ctx context.Context, req *rsmpb.StateRequest) ([]byte, error) {
	n := c.n
	isCmd := req.Type == rsmpb.RequestType_COMMAND
	maybeApplied := false // an attempt was sent: if ctx ends, the outcome is open
	inDoubt := false      // an attempt's answer was lost: it may have been applied
	var refused error     // the node refuses to serve: an object in the store is corrupt or missing, or its ID is another's
	var last rsmpb.Status // the last retryable answer, for the error at the deadline
	// However it ends, the node awaits this number's answer no longer: the
	// group may forget its result.
	defer func() { c.settle(req.Session, req.Seq) }()
	if isCmd && !req.Register && req.Seq == 0 && c.slots != nil {
		// A command waits for a slot before it is numbered: never sent,
		// it is not committed if ctx ends first.
		select {
		case c.slots <- struct{}{}:
			defer func() { <-c.slots }()
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w (the node awaits %d commands already)", ErrNotCommitted, ctx.Err(), cap(c.slots))
		case <-n.ctx.Done():
			return nil, n.stoppedErr()
		}
	}
	ordered := false   // an out-of-sequence number waited for its predecessor: resend at once
	outOfSequence := 0 // answers REQUEST_OUT_OF_SEQUENCE so far
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !ordered {
			d := min(time.Duration(attempt)*10*time.Millisecond, 500*time.Millisecond)
			if sleepCtx(ctx, store.Jitter(d, 0.5)) != nil {
				break
			}
		}
		if err := n.waitJoined(ctx); err != nil {
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrDuplicateID) {
				refused = err
			}
			break
		}
		if isCmd && !req.Register && req.Seq == 0 {
			if err := c.ensureSession(ctx); err != nil {
				if ctx.Err() != nil || n.ctx.Err() != nil {
					break
				}
				return nil, fmt.Errorf("%w: %w", ErrNotCommitted, err)
			}
		}
		ordered = false
		p, sent := c.send(req)
		if sent && isCmd {
			maybeApplied = true
		}
		var resp *rsmpb.StateResponse
		select {
		case resp = <-p.done:
		case <-ctx.Done():
		case <-n.ctx.Done():
			return nil, n.stoppedErr()
		}
		if resp == nil {
			break
		}
		switch resp.Status {
		case rsmpb.Status_OK:
			return resp.Result, nil
		case rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE:
			return nil, ErrApplicationResultUnavailable
		case rsmpb.Status_UNKNOWN_MACHINE:
			return nil, fmt.Errorf("%w: %q on the leader", ErrUnknownMachine, req.Machine)
		case rsmpb.Status_TOO_LARGE:
			return nil, fmt.Errorf("%w: %s", ErrTooLarge, resp.Message)
		case rsmpb.Status_ERROR:
			return nil, fmt.Errorf("rsm: %s", resp.Message)
		case rsmpb.Status_SESSION_EXPIRED:
			// Refused, not applied. The session is gone for good: a new
			// one is registered (once, however many commands learn it).
			c.dropSession(req.Session)
			if inDoubt {
				// An earlier attempt may have been applied before the
				// group evicted the session; no one can tell now.
				return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrSessionExpired)
			}
			c.settle(req.Session, req.Seq)
			req.Session, req.Seq = 0, 0 // never applied: resubmit under the new session
		case rsmpb.Status_REQUEST_OUT_OF_SEQUENCE:
			outOfSequence++
			if req.Session != 0 && !c.sessionDropped(req.Session) &&
				c.awaitPredecessor(ctx, req.Session, req.Seq, outOfSequence > 1) == nil {
				// A lower number of the session was not applied before
				// this one: resending at once would meet the same
				// refusal. It is resent right after its predecessor's
				// next attempt, so the leader takes them in order,
				// instead of every number behind a refused one retrying
				// in a storm; refused again (the predecessor's attempt
				// was refused too: the leader is full), it waits for
				// the predecessor's answer.
				ordered = true
			}
			if !inDoubt && req.Session != 0 && c.sessionDropped(req.Session) {
				// Held behind a number the node gave up on (its command's
				// outcome was unknown at its deadline): never applied, so
				// it goes under the new session.
				c.settle(req.Session, req.Seq)
				req.Session, req.Seq = 0, 0
			}
		case rsmpb.Status_UNKNOWN_OUTCOME:
			inDoubt = true
		case rsmpb.Status_NOT_LEADER:
			if resp.Term > 0 && resp.LeaderId != "" {
				n.observeLeader(leaderState{Term: resp.Term, LeaderID: resp.LeaderId, LeaderAddr: resp.LeaderAddr})
			}
		}
		// NOT_LEADER, NOT_COMMITTED, UNKNOWN_OUTCOME, BUSY, out of
		// sequence, transport errors: retry with the same sequence number.
		last = resp.Status
		if resp.Status == rsmpb.Status_BUSY {
			_ = sleepCtx(ctx, store.Jitter(n.opts.Retry.BaseDelay, 0.5))
		}
	}
	if n.ctx.Err() != nil {
		return nil, n.stoppedErr()
	}
	cause := ctx.Err()
	if refused != nil {
		cause = refused
	}
	switch last {
	case rsmpb.Status_BUSY:
		cause = fmt.Errorf("%w (last answer: %w)", cause, ErrBusy)
	case rsmpb.Status_REQUEST_OUT_OF_SEQUENCE:
		cause = fmt.Errorf("%w (last answer: %w)", cause, ErrRequestOutOfSequence)
	case rsmpb.Status_SESSION_EXPIRED:
		cause = fmt.Errorf("%w (last answer: %w)", cause, ErrSessionExpired)
	}
	if maybeApplied {
		// This sequence number may never reach the group, and the group
		// applies a session's commands only in order: later commands go
		// under a new session so they are not held behind it.
		c.dropSession(req.Session)
		return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, cause)
	}
	return nil, fmt.Errorf("%w: %w", ErrNotCommitted, cause)
}

// send routes req to the leader: locally, or over the stream to it. Commands
// get their sequence number on first send, under mu, so a node's
// commands reach the leader in order. sent reports whether the request may
// have reached a leader.
func (c *client) send(req *rsmpb.StateRequest) (p *pending, sent bool) {
	n := c.n
	c.mu.Lock()
	defer c.mu.Unlock()
	// A command gets its sequence number when it is first sent, never
	// before: a number that never leaves the node would hold back the
	// node's later commands. Without a session (dropped since the caller
	// checked) it is not sent: the caller registers first.
	number := func() bool {
		if req.Type == rsmpb.RequestType_COMMAND && !req.Register && req.Seq == 0 {
			if c.session == 0 {
				return false
			}
			c.seq++
			req.Session, req.Seq = c.session, c.seq
			req.FirstPending = c.awaiting.add(c.seq)
		}
		return true
	}
	unsent := func(st rsmpb.Status) (*pending, bool) {
		p := &pending{req: req, done: make(chan *rsmpb.StateResponse, 1)}
		p.reply(&rsmpb.StateResponse{Status: st})
		return p, false
	}
	l, leaderAddr := n.route()
	if l != nil {
		if !number() {
			return unsent(rsmpb.Status_SESSION_EXPIRED)
		}
		p := &pending{req: req, start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
		l.enqueue(p)
		if len(p.done) == 0 {
			// Taken (enqueue answers a refusal at once): the numbers
			// waiting for this one's next attempt may follow it.
			c.noteSent(req)
		}
		return p, true
	}
	if leaderAddr == "" {
		return unsent(rsmpb.Status_NOT_LEADER)
	}
	if c.fwd == nil || c.fwd.addr != leaderAddr || c.fwd.broken() {
		if c.fwd != nil {
			c.fwd.close()
		}
		c.fwd = n.host.newForwarder(n.ctx, leaderAddr, n.group)
		c.fwdCur.Store(c.fwd)
	}
	if !number() {
		return unsent(rsmpb.Status_SESSION_EXPIRED)
	}
	c.noteSent(req)
	return c.fwd.send(req), true
}

// noteSent notes an attempt of command req on its way to the leader (under
// mu, in the order they are sent).
func (c *client) noteSent(req *rsmpb.StateRequest) {
	if req.Type == rsmpb.RequestType_COMMAND && req.Seq != 0 && req.Session == c.session {
		c.awaiting.sent(req.Seq)
	}
}

// dropForwarder closes the stream to the leader, if any: its waiting
// requests are answered UNKNOWN_OUTCOME and retried by their callers
// under the same sequence numbers (a duplicate returns the stored
// result). The next send opens a new stream.
func (c *client) dropForwarder() {
	if f := c.fwdCur.Load(); f != nil {
		f.close()
	}
}

// leaderAt closes the stream to the leader if it goes to another address
// than addr, the leader the node now follows (dropForwarder).
func (c *client) leaderAt(addr string) {
	if f := c.fwdCur.Load(); f != nil && f.addr != addr {
		f.close()
	}
}

// close closes the stream to the leader for good: the node has stopped.
func (c *client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fwd != nil {
		c.fwd.close()
		c.fwd = nil
	}
}

// ensureSession returns once the node holds a session, registering one
// through the log if it has none. Concurrent callers share one
// registration.
func (c *client) ensureSession(ctx context.Context) error {
	n := c.n
	for {
		c.mu.Lock()
		if c.session != 0 {
			c.mu.Unlock()
			return nil
		}
		if ch := c.registering; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-n.ctx.Done():
				return n.stoppedErr()
			}
		}
		ch := make(chan struct{})
		c.registering = ch
		c.mu.Unlock()
		id, err := c.register(ctx)
		c.mu.Lock()
		c.registering = nil
		if err == nil {
			c.session, c.seq, c.awaiting = id, 0, awaiting{}
		}
		c.mu.Unlock()
		close(ch)
		return err
	}
}

// register opens a session. Its label, unique to this registration, lets
// a retried registration find the session an earlier attempt opened.
func (c *client) register(ctx context.Context) (uint64, error) {
	n := c.n
	label := n.host.cfg.ID + "#" + newNonceHex()[:12]
	req := &rsmpb.StateRequest{Group: n.group, Type: rsmpb.RequestType_COMMAND, Register: true, Client: label}
	res, err := c.roundTrip(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("rsm: registering a session: %w", err)
	}
	if len(res) != 8 || binary.BigEndian.Uint64(res) == 0 {
		return 0, fmt.Errorf("rsm: registering a session: the leader answered %d bytes, not a session number", len(res))
	}
	return binary.BigEndian.Uint64(res), nil
}

// dropSession forgets session old, if it is still the node's: the next
// command registers a new one. Commands numbered under it that cannot
// have been applied are renumbered by their submitters.
func (c *client) dropSession(old uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old != 0 && c.session == old {
		c.awaiting.clear()
		c.session, c.seq, c.awaiting = 0, 0, awaiting{}
	}
}

// settle notes that the node awaits the answer of command seq of session
// no longer.
func (c *client) settle(session, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq != 0 && session == c.session {
		c.awaiting.remove(seq, c.seq)
	}
}

// awaiting is the set of sequence numbers of a session whose answers its
// node awaits, with the lowest of them: every command carries it
// (Command.first_pending) so that the group keeps the results of the
// commands a retry may ask for again, and forgets the others. Each number
// counts its attempts, so that a number refused out of sequence can be
// resent right behind its predecessor's next attempt.
type awaiting struct {
	set   map[uint64]*attempts
	first uint64 // the lowest number in set; 0 when set is empty
}

// attempts are the sends of one awaited number.
type attempts struct {
	sends    uint64        // attempts sent so far
	predSent uint64        // the predecessor's sends when this number was last sent
	next     chan struct{} // made by a waiter; closed at the next attempt or when the number is no longer awaited
}

// wake closes next, if a waiter made it.
func (at *attempts) wake() {
	if at.next != nil {
		close(at.next)
		at.next = nil
	}
}

// add adds seq, the highest number given out so far, and returns the
// lowest awaited.
func (a *awaiting) add(seq uint64) uint64 {
	if a.set == nil {
		a.set = map[uint64]*attempts{}
	}
	a.set[seq] = &attempts{}
	if a.first == 0 {
		a.first = seq
	}
	return a.first
}

// sent notes an attempt of seq, about to go to the leader.
func (a *awaiting) sent(seq uint64) {
	at := a.set[seq]
	if at == nil {
		return
	}
	at.sends++
	at.predSent = 0
	if pred := a.set[seq-1]; pred != nil {
		at.predSent = pred.sends
	}
	at.wake()
}

// remove removes seq; last is the highest number given out so far.
func (a *awaiting) remove(seq, last uint64) {
	at, ok := a.set[seq]
	if !ok {
		return
	}
	at.wake()
	delete(a.set, seq)
	if seq != a.first {
		return
	}
	a.first = 0
	for s := seq + 1; s <= last && len(a.set) > 0; s++ {
		if _, ok := a.set[s]; ok {
			a.first = s
			return
		}
	}
}

// clear wakes everyone waiting on a number of the set: the session is
// dropped.
func (a *awaiting) clear() {
	for _, at := range a.set {
		at.wake()
	}
}

// awaitPredecessor returns once number seq of session may be resent
// after the leader refused an attempt of it out of sequence: when its
// predecessor has been sent again since seq's last attempt (unless
// answered is set), or is no longer awaited (answered, or given up on),
// or the session is no longer the node's. The leader takes a node's
// requests in the order they are sent, so the two then arrive in order.
func (c *client) awaitPredecessor(ctx context.Context, session, seq uint64, answered bool) error {
	n := c.n
	for {
		c.mu.Lock()
		if c.session != session {
			c.mu.Unlock()
			return nil
		}
		me, pred := c.awaiting.set[seq], c.awaiting.set[seq-1]
		if me == nil || pred == nil || (!answered && pred.sends > me.predSent) {
			c.mu.Unlock()
			return nil
		}
		if pred.next == nil {
			pred.next = make(chan struct{})
		}
		ch := pred.next
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.ctx.Done():
			return n.stoppedErr()
		}
	}
}

// sessionDropped reports whether session s is no longer the node's.
func (c *client) sessionDropped(s uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s != c.session
}
