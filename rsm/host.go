package rsm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	"github.com/tenure-io/tenure/internal/peerkey"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// protocolVersion is checked by the handshake. 2: client sessions.
const protocolVersion = 2

// Host is one node's RPC server and store client, shared by every group it
// joins. It is safe for concurrent use.
type Host struct {
	st  *store.Store
	cfg HostConfig
	log *slog.Logger
	m   *metrics
	lis net.Listener
	srv *grpc.Server
	wg  sync.WaitGroup

	mu     sync.Mutex
	groups map[string]*Node
	conns  map[string]*grpc.ClientConn
	shaken map[string]bool // addr|group handshakes done
	closed bool

	// noPacks makes this host's Follow requests say its version reads no
	// packed log, as versions without packs do (set by tests).
	noPacks bool

	// Peer authentication (peerauth.go): the mode, this host's ephemeral
	// identity and its fingerprint (in mutual TLS, the client
	// certificate's, if it has one), and the peer records read.
	mode  peerMode
	ident tls.Certificate
	key   string
	trust peerTrust
}

// NewHost probes the store, starts the RPC server and returns the host.
func NewHost(ctx context.Context, st *store.Store, cfg HostConfig) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("rsm: NewHost needs a store")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxPendingPerClient == 0 {
		cfg.MaxPendingPerClient = DefaultMaxPendingPerClient
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer, cfg.ID)
	if err != nil {
		return nil, err
	}
	if !cfg.SkipProbe {
		res, err := store.Probe(ctx, st, 1)
		if err != nil {
			return nil, fmt.Errorf("rsm: store probe: %w", err)
		}
		if !res.OK() {
			return nil, fmt.Errorf("rsm: the store does not honour conditional writes (create-if-absent %v, if-match %v): refusing to serve", res.CreateIfAbsent, res.IfMatch)
		}
	}
	lis := cfg.Listener
	if lis == nil {
		lis, err = net.Listen("tcp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("rsm: listen on %s: %w", cfg.Addr, err)
		}
	}
	h := &Host{st: st, cfg: cfg, log: log.With("host", cfg.ID), m: m, lis: lis,
		groups: map[string]*Node{}, conns: map[string]*grpc.ClientConn{}, shaken: map[string]bool{}}
	switch {
	case cfg.PlaintextLoopback:
		h.mode = peerPlain
	case cfg.ServerTLS != nil:
		h.mode, h.key = peerCA, peerkey.Configured(cfg.ClientTLS)
	default:
		if h.ident, h.key, err = peerkey.New(cfg.ID); err != nil {
			if cfg.Listener == nil {
				_ = lis.Close()
			}
			return nil, fmt.Errorf("rsm: %w", err)
		}
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxServerMessage),
		grpc.MaxSendMsgSize(maxServerMessage),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
	}
	if creds := h.serverCreds(); creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	h.srv = grpc.NewServer(opts...)
	rsmpb.RegisterReplicaServer(h.srv, &rpcServer{h: h})
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.m.serverReady.Set(1)
		if err := h.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			h.log.Error("RPC server stopped", "err", err)
		}
		h.m.serverReady.Set(0)
	}()
	return h, nil
}

// redialWait bounds how long a call waits for a connection redialed after
// a failure: a reachable peer answers a dial in far less; an unreachable
// one costs each call this much before it fails.
const redialWait = 100 * time.Millisecond

// maxServerMessage is the transport's hard limit; each group enforces its
// own MaxMessageSize on what it accepts and sends.
const maxServerMessage = 64 << 20

// Addr is the address the host's RPC server listens on.
func (h *Host) Addr() net.Addr { return h.lis.Addr() }

// Join starts this host's node in group with the given machines, creating
// the group if it does not exist. The node joins in the background; calls
// on it wait until it has joined or their ctx ends.
func (h *Host) Join(ctx context.Context, group string, machines map[string]StateMachine, opts Options) (*Node, error) {
	n, err := newNode(h, group, machines, opts)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		n.rep.close()
		return nil, ErrClosed
	}
	if h.groups[group] != nil {
		n.rep.close()
		return nil, fmt.Errorf("rsm: this host already joined group %q", group)
	}
	h.groups[group] = n
	n.start()
	return n, nil
}

func (h *Host) removeGroup(n *Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.groups[n.group] == n {
		delete(h.groups, n.group)
	}
}

func (h *Host) node(group string) *Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[group]
}

// Close leaves every group, stops the RPC server and waits for every
// goroutine. It does not close the store. Calls after it return ErrClosed.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	nodes := make([]*Node, 0, len(h.groups))
	for _, n := range h.groups {
		nodes = append(nodes, n)
	}
	h.mu.Unlock()
	for _, n := range nodes {
		_ = n.Leave(context.Background())
	}
	h.srv.Stop()
	h.wg.Wait()
	h.mu.Lock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = map[string]*grpc.ClientConn{}
	h.mu.Unlock()
	return nil
}

// client returns a connection to addr, handshaking for group once.
func (h *Host) client(ctx context.Context, addr, group string) (rsmpb.ReplicaClient, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	conn := h.conns[addr]
	if conn == nil {
		creds := h.clientCreds(addr)
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxServerMessage), grpc.MaxCallSendMsgSize(maxServerMessage)),
		}
		if h.cfg.Dialer != nil {
			opts = append(opts, grpc.WithContextDialer(h.cfg.Dialer))
		}
		var err error
		conn, err = grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			h.mu.Unlock()
			return nil, fmt.Errorf("rsm: connect to %s: %w", addr, err)
		}
		h.conns[addr] = conn
	}
	done := h.shaken[addr+"|"+group]
	h.mu.Unlock()
	// gRPC waits between connection attempts with a backoff that grows
	// to seconds over a long partition (1 s, 1.6 s, 2.6 s… up to 2 min),
	// failing calls at once meanwhile: a peer back after a heal would stay
	// unreached that long. The node calls only when its own schedule,
	// bounded by heartbeats, says so: a call is an attempt. The call waits
	// briefly for the new connection, which the call would otherwise fail
	// before (gRPC reports the failure until a connection is ready).
	if conn.GetState() == connectivity.TransientFailure {
		conn.ResetConnectBackoff()
		wctx, cancel := context.WithTimeout(ctx, redialWait)
		for st := conn.GetState(); st != connectivity.Ready && conn.WaitForStateChange(wctx, st); st = conn.GetState() {
		}
		cancel()
	}
	c := rsmpb.NewReplicaClient(conn)
	if done {
		return c, nil
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, h.cfg.HandshakeTimeout)
	defer cancel()
	var p peer.Peer
	resp, err := c.Handshake(hctx, &rsmpb.HandshakeRequest{Group: group, NodeId: h.cfg.ID, Addr: h.cfg.Addr, Protocol: protocolVersion}, grpc.Peer(&p))
	h.m.handshake.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("rsm: handshake with %s (peer authentication: %s; see docs/security.md): %w", addr, h.mode, err)
	}
	if err := h.checkServer(hctx, group, addr, &p); err != nil {
		return nil, err
	}
	if resp.Status != rsmpb.Status_OK {
		return nil, &handshakeRefused{addr: addr, resp: resp}
	}
	h.mu.Lock()
	h.shaken[addr+"|"+group] = true
	h.mu.Unlock()
	return c, nil
}

// handshakeRefused is a handshake the node at addr answered, refusing it.
type handshakeRefused struct {
	addr string
	resp *rsmpb.HandshakeResponse
}

func (e *handshakeRefused) Error() string {
	return fmt.Sprintf("rsm: handshake with %s refused: %s %s", e.addr, e.resp.Status, e.resp.Message)
}

// answersAs reports whether a process answers at addr under this host's
// ID (its handshake refuses our ID as its own): another live process
// started with the same ID.
func (h *Host) answersAs(ctx context.Context, addr, group string) bool {
	if addr == h.cfg.Addr {
		return false // we would ask ourselves
	}
	_, err := h.client(ctx, addr, group)
	var r *handshakeRefused
	return errors.As(err, &r) && r.resp.NodeId == h.cfg.ID
}

func (h *Host) follow(ctx context.Context, addr string, req *rsmpb.FollowRequest) (*rsmpb.FollowResponse, error) {
	c, err := h.client(ctx, addr, req.Group)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.ConnectTimeout)
	defer cancel()
	return c.Follow(cctx, req)
}

// rpcServer serves the Replica service for every group of the host.
type rpcServer struct {
	rsmpb.UnimplementedReplicaServer
	h *Host
}

func (s *rpcServer) Handshake(ctx context.Context, req *rsmpb.HandshakeRequest) (*rsmpb.HandshakeResponse, error) {
	resp := &rsmpb.HandshakeResponse{NodeId: s.h.cfg.ID, Protocol: protocolVersion}
	if n := s.h.node(req.Group); n != nil {
		if _, err := s.h.authorizeAs(ctx, n, req.NodeId); err != nil {
			return nil, err
		}
	}
	switch {
	case req.Protocol != protocolVersion:
		s.h.m.badHandshakes.Inc()
		resp.Status, resp.Message = rsmpb.Status_ERROR, fmt.Sprintf("protocol %d, this node speaks %d", req.Protocol, protocolVersion)
	case req.NodeId == "" || req.NodeId == s.h.cfg.ID:
		s.h.m.badHandshakes.Inc()
		resp.Status, resp.Message = rsmpb.Status_ERROR, fmt.Sprintf("node ID %q is empty or this node's own (IDs must be unique)", req.NodeId)
	case s.h.node(req.Group) == nil:
		s.h.m.unknownGroup.Inc()
		resp.Status, resp.Message = rsmpb.Status_UNKNOWN_GROUP, fmt.Sprintf("this node does not serve group %q", req.Group)
	}
	return resp, nil
}

func (s *rpcServer) Follow(ctx context.Context, req *rsmpb.FollowRequest) (*rsmpb.FollowResponse, error) {
	n := s.h.node(req.Group)
	if n == nil {
		s.h.m.unknownGroup.Inc()
		return &rsmpb.FollowResponse{Status: rsmpb.Status_UNKNOWN_GROUP}, nil
	}
	if _, err := s.h.authorizeAs(ctx, n, req.NodeId); err != nil {
		return nil, err
	}
	return n.handleFollow(ctx, req), nil
}

func (s *rpcServer) Synchronize(ctx context.Context, req *rsmpb.SynchronizeRequest) (*rsmpb.SynchronizeResponse, error) {
	n := s.h.node(req.Group)
	if n == nil {
		s.h.m.unknownGroup.Inc()
		return &rsmpb.SynchronizeResponse{Status: rsmpb.Status_UNKNOWN_GROUP}, nil
	}
	c, err := s.h.authorizeAs(ctx, n, req.LeaderId)
	if err != nil {
		return nil, err
	}
	return n.handleSynchronize(ctx, req, c), nil
}

// Submit reads state requests in order and hands each to its group's
// leader; responses go back as they complete. At most MaxPendingPerClient
// requests of one stream are pending: beyond that the stream is not read,
// which pushes back on the sender through gRPC flow control.
func (s *rpcServer) Submit(stream rsmpb.Replica_SubmitServer) error {
	h := s.h
	h.m.activeClients.Inc()
	defer h.m.activeClients.Dec()
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	tokens := make(chan struct{}, h.cfg.MaxPendingPerClient)
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				h.m.ioErrors.Inc()
			}
			return nil
		}
		start := time.Now()
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		h.m.backpressure.Observe(time.Since(start).Seconds())
		var p *pending
		n := h.node(req.Group)
		if n != nil {
			if _, err := h.authorize(ctx, n); err != nil {
				<-tokens
				return err
			}
		}
		switch {
		case n == nil:
			h.m.unknownGroup.Inc()
			p = &pending{req: req, done: make(chan *rsmpb.StateResponse, 1)}
			p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_GROUP, Message: fmt.Sprintf("this node does not serve group %q", req.Group)})
		case len(req.Data) > n.opts.MaxMessageSize:
			p = &pending{req: req, done: make(chan *rsmpb.StateResponse, 1)}
			p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_TOO_LARGE, Message: fmt.Sprintf("request of %d bytes, limit %d", len(req.Data), n.opts.MaxMessageSize)})
		default:
			p = n.accept(req)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-tokens }()
			var resp *rsmpb.StateResponse
			select {
			case resp = <-p.done:
			case <-ctx.Done():
				return
			}
			sendMu.Lock()
			err := stream.Send(resp)
			sendMu.Unlock()
			if err != nil {
				h.m.ioErrors.Inc()
			}
		}()
	}
}

// forwarder is one node's ordered stream of state requests to the leader.
type forwarder struct {
	addr   string
	cancel context.CancelFunc

	mu        sync.Mutex
	stream    rsmpb.Replica_SubmitClient
	err       error
	nextID    uint64
	ready     chan struct{} // closed once the stream is open or failed
	readyOnce sync.Once
	waiting   map[uint64]*pending
}

func (h *Host) newForwarder(ctx context.Context, addr, group string) *forwarder {
	ctx, cancel := context.WithCancel(ctx)
	f := &forwarder{addr: addr, cancel: cancel, waiting: map[uint64]*pending{}, ready: make(chan struct{})}
	go func() {
		c, err := h.client(ctx, addr, group)
		if err == nil {
			var st rsmpb.Replica_SubmitClient
			st, err = c.Submit(ctx)
			if err == nil {
				f.mu.Lock()
				f.stream = st
				f.mu.Unlock()
				f.readyOnce.Do(func() { close(f.ready) })
				f.recv(st)
				return
			}
		}
		f.fail(err)
	}()
	return f
}

func (f *forwarder) recv(st rsmpb.Replica_SubmitClient) {
	for {
		resp, err := st.Recv()
		if err != nil {
			f.fail(err)
			return
		}
		f.mu.Lock()
		p := f.waiting[resp.Id]
		delete(f.waiting, resp.Id)
		f.mu.Unlock()
		if p != nil {
			id := p.req.Id
			resp.Id = id
			select {
			case p.done <- resp:
			default:
			}
		}
	}
}

// fail answers every waiting request: the stream is gone, so their
// outcome is unknown and their nodes retry them.
func (f *forwarder) fail(err error) {
	if err == nil {
		err = errors.New("stream closed")
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
		f.readyOnce.Do(func() { close(f.ready) })
	}
	w := f.waiting
	f.waiting = map[uint64]*pending{}
	f.mu.Unlock()
	for _, p := range w {
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_UNKNOWN_OUTCOME, Message: "stream to the leader broke: " + err.Error()})
	}
}

func (f *forwarder) broken() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

func (f *forwarder) close() {
	f.cancel()
	f.fail(errors.New("forwarder closed"))
}

// send queues req on the stream. Sends happen under the caller's subMu,
// so requests keep their order.
func (f *forwarder) send(req *rsmpb.StateRequest) *pending {
	p := &pending{req: req, start: time.Now(), done: make(chan *rsmpb.StateResponse, 1)}
	select {
	case <-f.ready:
	case <-time.After(5 * time.Second):
	}
	f.mu.Lock()
	st, err := f.stream, f.err
	if err != nil || st == nil {
		f.mu.Unlock()
		msg := "stream to the leader did not open"
		if err != nil {
			msg = err.Error()
		}
		p.reply(&rsmpb.StateResponse{Status: rsmpb.Status_NOT_LEADER, Message: msg})
		return p
	}
	f.nextID++
	id := f.nextID
	f.waiting[id] = p
	f.mu.Unlock()
	wire := &rsmpb.StateRequest{Group: req.Group, Id: id, Type: req.Type, Machine: req.Machine, Data: req.Data, Client: req.Client, Seq: req.Seq,
		Session: req.Session, Register: req.Register, FirstPending: req.FirstPending}
	if err := st.Send(wire); err != nil {
		f.fail(err)
	}
	return p
}
