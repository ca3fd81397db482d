package rsm

import (
	"encoding/binary"
	"strconv"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Simulated clients: client.go's registration, commands under (session,
// sequence number) with their retries, and reads, sent to whichever node
// the client believes leads, over a network that delays and drops.

// send delivers f from node a to node b after a delay, unless the link is
// cut or the message dropped.
func (s *sim) send(a, b int, f func()) {
	if a == b {
		s.after(0, f)
		return
	}
	if s.cut[[2]int{min(a, b), max(a, b)}] || s.chance(s.cfg.dropRate) {
		return
	}
	s.after(s.between(1, 8), f)
}

// simCall is one request attempt of a client.
type simCall struct {
	s       *sim
	from    int
	req     *rsmpb.StateRequest
	cmdID   uint64
	resp    *rsmpb.StateResponse
	wake    func()
	replied bool
}

func (c *simCall) answer(at int, r *rsmpb.StateResponse) {
	if c.replied {
		return
	}
	c.replied = true
	c.s.send(at, c.from, func() {
		if c.resp == nil {
			c.resp = r
			if c.wake != nil {
				c.wake()
			}
		}
	})
}

// simClient is a node's user: commands under a session (the node's
// session logic, client.go), and reads.
type simClient struct {
	n       *simNode
	session uint64
	seq     uint64
	left    int
	current uint64 // command in progress
}

// call sends req to the node the client takes for the leader and waits
// for the answer, or gives up after a timeout (nil).
func (c *simClient) call(p *simProc, req *rsmpb.StateRequest, cmdID uint64) *rsmpb.StateResponse {
	s, n := c.n.s, c.n
	target := n.hint
	if target < 0 || s.chance(0.1) {
		target = s.rng.IntN(s.cfg.nodes)
	}
	call := &simCall{s: s, from: n.idx, req: req, cmdID: cmdID}
	p.block(func(wake func()) {
		call.wake = wake
		s.send(n.idx, target, func() {
			t := s.nodes[target]
			if !t.alive || t.lead == nil {
				call.answer(target, &rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER})
				return
			}
			t.lead.enqueue(call)
		})
		s.after(150, wake)
	})
	call.wake = nil
	if call.resp == nil {
		call.resp = &rsmpb.StateResponse{Status: -1} // timed out; later answers are dropped
		n.hint = -1
		return nil
	}
	if call.resp.Status == rsmpb.Status_NOT_LEADER {
		n.hint = -1
	}
	return call.resp
}

func (c *simClient) run(p *simProc) {
	s := c.n.s
	for c.left > 0 {
		p.sleep(s.between(0, 30))
		c.left--
		if s.chance(0.2) {
			c.read(p)
		} else {
			c.command(p)
		}
	}
}

func (c *simClient) read(p *simProc) {
	s := c.n.s
	call := s.now
	for {
		r := c.call(p, &rsmpb.StateRequest{Type: rsmpb.RequestType_READ, Machine: simMachine}, 0)
		if r != nil && r.Status == rsmpb.Status_OK {
			s.reads = append(s.reads, simRead{call: call, ret: s.now, v: binary.BigEndian.Uint64(r.Result)})
			return
		}
		p.sleep(s.between(1, 10))
	}
}

func (c *simClient) register(p *simProc) {
	s := c.n.s
	s.labels++
	label := c.n.id + "#" + strconv.Itoa(s.labels)
	for c.session == 0 {
		r := c.call(p, &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Register: true, Client: label}, 0)
		if r != nil && r.Status == rsmpb.Status_OK && len(r.Result) == 8 {
			c.session, c.seq = binary.BigEndian.Uint64(r.Result), 0
			return
		}
		p.sleep(s.between(1, 10))
	}
}

func (c *simClient) command(p *simProc) {
	s := c.n.s
	s.nextID++
	id := s.nextID
	s.invokedAt[id] = s.now
	c.current = id
	defer func() { c.current = 0 }()
	maybe := false
	var session, seq uint64
	for {
		if session == 0 {
			if c.session == 0 {
				c.register(p)
			}
			c.seq++
			session, seq = c.session, c.seq
		}
		req := &rsmpb.StateRequest{Type: rsmpb.RequestType_COMMAND, Machine: simMachine, Session: session, Seq: seq,
			Data: binary.BigEndian.AppendUint64(nil, id)}
		r := c.call(p, req, id)
		if r == nil {
			maybe = true
			continue
		}
		switch r.Status {
		case rsmpb.Status_OK:
			total := binary.BigEndian.Uint64(r.Result)
			if other, ok := s.totals[total]; ok && other != id {
				s.failf("exactly-once: commands %d and %d both returned total %d", other, id, total)
			}
			s.totals[total] = id
			s.ackRecv[id] = s.now
			s.cover.acked++
			return
		case rsmpb.Status_UNKNOWN_OUTCOME:
			maybe = true
		case rsmpb.Status_SESSION_EXPIRED:
			s.cover.expired++
			if c.session == session {
				c.session = 0
			}
			if maybe {
				s.unknownID[id] = true
				s.cover.unknown++
				return
			}
			session = 0 // cannot have been applied: renumber under a new session
		case rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE:
			s.unknownID[id] = true
			s.cover.unknown++
			if c.session == session {
				c.session = 0
			}
			return
		case rsmpb.Status_REQUEST_OUT_OF_SEQUENCE:
			s.failf("client %s: command %d (session %d, seq %d) refused as out of sequence", c.n.id, id, session, seq)
			return
		}
		p.sleep(s.between(1, 10))
	}
}
