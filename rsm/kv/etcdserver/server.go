package etcdserver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// Version is the etcd version the server reports (Status, /version):
// the API it serves is etcd 3.7's, RangeStream included. Kubernetes'
// feature checks read it (progress requests need 3.5.13 or later).
const Version = "3.7.0"

// Defaults of Config.
const (
	// DefaultMinLeaseTTL is etcd's minimum lease TTL with its default
	// election timeout (1.5 × 1 s, rounded up), in seconds.
	DefaultMinLeaseTTL = 2
	// fragmentBytes is the size above which a watch response is split
	// when its watch asked for fragments (etcd's --max-request-bytes).
	fragmentBytes = 3 << 19
)

// ErrConfig matches every error of Config.Validate.
var ErrConfig = errors.New("etcdserver: invalid configuration")

// Config is an etcd front end's configuration. Zero values mean the
// defaults.
type Config struct {
	// Node is the group's node the server serves. Required.
	Node *rsm.Node
	// Machine is the kv machine Node hosts under MachineName. Required:
	// watches and serializable reads read it directly.
	Machine *kv.Machine
	// MachineName is the name Machine is registered under in the group.
	// Default kv.MachineName.
	MachineName string
	// ClientURLs are the URLs clients reach this node at, as MemberList
	// reports them (etcd's --advertise-client-urls).
	ClientURLs []string
	// ProgressNotifyInterval is how often a watch that had no events
	// gets a progress notification (etcd's
	// --experimental-watch-progress-notify-interval). 0: never.
	ProgressNotifyInterval time.Duration
	// MinLeaseTTL is the shortest TTL a lease is granted, in seconds; a
	// shorter request is granted this. Default DefaultMinLeaseTTL.
	MinLeaseTTL int64
	// LeaseCheckInterval is how often the leader looks for lapsed leases
	// (and, once it leads, learns that it does). Default 250 ms.
	LeaseCheckInterval time.Duration
	// Clock times leases. Default the system clock.
	Clock clock.Clock
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every rule c breaks, naming the fields.
func (c Config) Validate() error {
	var errs []string
	if c.Node == nil {
		errs = append(errs, "Node is required")
	}
	if c.Machine == nil {
		errs = append(errs, "Machine is required")
	}
	if c.ProgressNotifyInterval < 0 {
		errs = append(errs, fmt.Sprintf("ProgressNotifyInterval %v is negative", c.ProgressNotifyInterval))
	}
	if c.MinLeaseTTL < 0 || c.MinLeaseTTL > kv.MaxLeaseTTL {
		errs = append(errs, fmt.Sprintf("MinLeaseTTL %d is out of [0, %d]", c.MinLeaseTTL, int64(kv.MaxLeaseTTL)))
	}
	if c.LeaseCheckInterval < 0 {
		errs = append(errs, fmt.Sprintf("LeaseCheckInterval %v is negative", c.LeaseCheckInterval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}

// Server serves etcd's KV, Watch, Lease, Maintenance and Cluster
// services over one node of a group. It is safe for concurrent use.
type Server struct {
	node     *rsm.Node
	m        *kv.Machine
	name     string
	urls     []string
	progress time.Duration
	minTTL   int64
	clock    clock.Clock
	log      *slog.Logger
	cluster  uint64
	member   uint64
	// fragment is the size above which a fragmenting watch's response
	// is split.
	fragment int

	hub    *hub
	leases *keeper
	// caughtUp is set once this node has applied the group's revision
	// as of a read after the server started (current).
	caughtUp atomic.Bool
	// term is the group's term last seen, for headers made where the
	// node may not be asked.
	term atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	// goMu guards closing and the WaitGroup's additions, so that no
	// goroutine is added once Close has begun to wait.
	goMu    sync.Mutex
	closing bool
	wg      sync.WaitGroup
	once    sync.Once
}

// goTracked runs f in a goroutine Close waits for, and reports false,
// running nothing, once Close has begun.
func (s *Server) goTracked(f func()) bool {
	s.goMu.Lock()
	defer s.goMu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// New checks c and returns its server, which watches the machine's
// applied stream and, while the node leads, times the group's leases.
// Close stops both.
func New(c Config) (*Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.MachineName == "" {
		c.MachineName = kv.MachineName
	}
	if c.MinLeaseTTL == 0 {
		c.MinLeaseTTL = DefaultMinLeaseTTL
	}
	if c.LeaseCheckInterval == 0 {
		c.LeaseCheckInterval = 250 * time.Millisecond
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	st := c.Node.Status()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		node: c.Node, m: c.Machine, name: c.MachineName, urls: append([]string(nil), c.ClientURLs...),
		progress: c.ProgressNotifyInterval, minTTL: c.MinLeaseTTL, clock: c.Clock, log: c.Logger,
		cluster: ClusterID(st.Group), member: MemberID(st.Group, st.ID), fragment: fragmentBytes,
		ctx: ctx, cancel: cancel,
	}
	s.term.Store(st.Term)
	if err := c.Node.SetMeta(map[string]string{clientURLsMeta: strings.Join(s.urls, ",")}); err != nil {
		cancel()
		return nil, fmt.Errorf("etcdserver: publishing the client URLs: %w", err)
	}
	s.hub = newHub(s)
	s.leases = newKeeper(s, c.LeaseCheckInterval)
	s.m.SetLeaseObserver(s.leases.granted)
	s.handleCalls(true)
	s.goTracked(func() { s.leases.run(ctx) })
	return s, nil
}

// Close stops the lease timers and ends every watch stream, and waits
// for them. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.goMu.Lock()
		s.closing = true
		s.goMu.Unlock()
		s.m.SetObserver(nil)
		s.m.SetLeaseObserver(nil)
		s.handleCalls(false)
		s.cancel()
		s.hub.close()
	})
	s.wg.Wait()
	return nil
}

// Register registers the services on g: KV, Watch, Lease, Maintenance
// and Cluster. Auth is not registered (its calls answer Unimplemented).
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvService{s: s})
	pb.RegisterWatchServer(g, &watchService{s: s})
	pb.RegisterLeaseServer(g, &leaseService{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceService{s: s})
	pb.RegisterClusterServer(g, &clusterService{s: s})
}

// ClusterID is the cluster ID a group reports in its response headers.
func ClusterID(group string) uint64 { return hashID("tenure-etcd-cluster\x00" + group) }

// MemberID is the member ID node id of group reports: stable across
// restarts, the same on every node.
func MemberID(group, id string) uint64 { return hashID("tenure-etcd-member\x00" + group + "\x00" + id) }

func hashID(s string) uint64 {
	sum := sha256.Sum256([]byte(s))
	if v := binary.BigEndian.Uint64(sum[:8]); v != 0 {
		return v
	}
	return 1
}

// header is a response header at revision rev, with the group's term.
func (s *Server) header(rev int64) *pb.ResponseHeader { return s.headerFunc()(rev) }

// headerFunc returns a function of a revision that makes headers with
// the group's term now. It asks the node: never under the hub's lock,
// which the node's apply may wait for.
func (s *Server) headerFunc() func(rev int64) *pb.ResponseHeader {
	term := s.node.Term()
	s.term.Store(term)
	return func(rev int64) *pb.ResponseHeader {
		return &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.member, Revision: rev, RaftTerm: term}
	}
}

// cachedHeader is a header with the term last seen: for watch events,
// queued from the goroutine that applies.
func (s *Server) cachedHeader(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.member, Revision: rev, RaftTerm: s.term.Load()}
}

// fill completes the header the machine set (its revision only).
func (s *Server) fill(h **pb.ResponseHeader) {
	var rev int64
	if *h != nil {
		rev = (*h).Revision
	}
	*h = s.header(rev)
}

// run submits cmd (made with err) to the group and returns its result,
// a T, with the header header points to filled in.
func run[T any](ctx context.Context, s *Server, cmd []byte, err error, header func(T) **pb.ResponseHeader) (T, error) {
	if err != nil {
		var zero T
		return zero, toGRPC(err)
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := s.node.Command(bctx, s.name, cmd)
	if err != nil {
		var zero T
		return zero, s.toGRPC(bctx, err)
	}
	resp, err := decode(s, res, header)
	if err == nil {
		// The leader acknowledges once the command is in the store; this
		// node may not have applied it yet (a follower). Answer once it
		// has, so that this node's serializable reads and watches from
		// now see the write afterwards, as etcd's do. A node that cannot
		// (it cannot read the log) says so within its request timeout,
		// and that the write was applied.
		if !s.hub.waitRev(bctx, (*header(resp)).Revision) && bctx.Err() != nil {
			var zero T
			if ctx.Err() != nil {
				return zero, toGRPC(ctx.Err())
			}
			return zero, errAppliedNotHere
		}
	}
	return resp, err
}

// errRequestTimeout is the cause of a request's context that reached the
// node's request timeout.
var errRequestTimeout = errors.New("etcdserver: request timed out")

// bound bounds a request's wait on the node by its RequestTimeout, as
// etcd's --request-timeout bounds a member's: a node that cannot reach
// its store or its leader answers within it, and the client can turn to
// another endpoint before its own deadline.
func (s *Server) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.node.RequestTimeout(), errRequestTimeout)
}

// current waits until this node's own state may be answered from
// (Status, serializable reads, a watch's history): until the node has
// caught up with its group since the server started, and with every
// revision the server has handed out, which a deposed leader falls
// below when it empties its state to apply the group's log again. So a
// node that restarts or catches up never answers from a state older
// than one it answered from before: its revision never goes back, as an
// etcd member's does not (its state is on its disk). Past the request
// timeout it answers etcd's request-timed-out error, so that clients
// turn to another endpoint.
func (s *Server) current(ctx context.Context) error {
	bctx, cancel := s.bound(ctx)
	defer cancel()
	rev := s.hub.handedOut()
	if !s.caughtUp.Load() {
		// A cheap linearizable read: its header is the group's revision
		// now, which holds everything this node answered before it
		// restarted.
		q, err := kv.RangeQuery(&pb.RangeRequest{Key: []byte{0}, CountOnly: true})
		if err != nil {
			return toGRPC(err)
		}
		res, err := s.node.Read(bctx, s.name, q)
		if err != nil {
			return s.toGRPC(bctx, err)
		}
		at, err := decode(s, res, func(r *pb.RangeResponse) **pb.ResponseHeader { return &r.Header })
		if err != nil {
			return err
		}
		rev = max(rev, at.Header.Revision)
	}
	if !s.hub.waitApplied(bctx, rev) {
		if err := bctx.Err(); err != nil {
			return s.toGRPC(bctx, err)
		}
		return rpctypes.ErrGRPCStopped
	}
	s.caughtUp.Store(true)
	return nil
}

// toGRPC is toGRPC(err) for an error of a wait under bctx (from bound):
// the request timeout, not the client's deadline, is ErrGRPCTimeout, the
// error etcd answers when its request timeout passes (Unavailable, so
// clients retry a read on another endpoint).
func (s *Server) toGRPC(bctx context.Context, err error) error {
	if errors.Is(context.Cause(bctx), errRequestTimeout) && errors.Is(err, context.DeadlineExceeded) {
		return rpctypes.ErrGRPCTimeout
	}
	return toGRPC(err)
}

// errAppliedNotHere: the group applied a write, but this node did not
// within its request timeout, so it cannot answer it with read-your-writes
// (its serializable reads and watches would not show it yet).
var errAppliedNotHere = status.Error(codes.Unavailable, "etcdserver: request timed out, but it was applied: this member has not applied it yet (a linearizable read shows it)")

// decode decodes a result of the machine, a T, and fills in its header.
func decode[T any](s *Server, res []byte, header func(T) **pb.ResponseHeader) (T, error) {
	var zero T
	v, err := kv.DecodeResult(res)
	if err != nil {
		return zero, toGRPC(err)
	}
	resp, ok := v.(T)
	if !ok {
		return zero, status.Errorf(codes.Internal, "etcdserver: the machine answered %T, want %T", v, zero)
	}
	s.fill(header(resp))
	return resp, nil
}

// errResultUnavailable: rsm applied the command but lost its result.
// etcd has no such outcome; the code is not one clients retry.
var errResultUnavailable = status.Error(codes.Unknown, "etcdserver: request applied, but its result is unavailable (read the keys to see it)")

// toGRPC maps an error of the node or the machine to the gRPC status an
// etcd client recognises (docs/etcd.md lists the mapping):
//
//   - the machine's etcd errors are rpctypes' values already;
//   - rsm.ErrUnknownOutcome is ErrGRPCTimeout, etcd's answer for a
//     proposal that may or may not commit (clients report it and do not
//     retry a write on it);
//   - rsm.ErrNotCommitted is ErrGRPCLeaderChanged (not applied; retry);
//   - rsm.ErrClosed is ErrGRPCStopped, rsm.ErrBusy
//     ErrGRPCRequestTooManyRequests, rsm.ErrTooLarge
//     ErrGRPCRequestTooLarge, rsm.ErrCorrupt ErrGRPCCorrupt, a duplicate
//     node ID or a settings mismatch ErrGRPCUnhealthy;
//   - rsm.ErrApplicationResultUnavailable is codes.Unknown, saying the
//     request was applied;
//   - a cancelled or expired context is ErrGRPCCanceled or
//     ErrGRPCDeadlineExceeded; the node's request timeout (Server.toGRPC)
//     is ErrGRPCTimeout.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, rsm.ErrApplicationResultUnavailable):
		return errResultUnavailable
	case errors.Is(err, rsm.ErrUnknownOutcome):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, rsm.ErrNotCommitted):
		return rpctypes.ErrGRPCLeaderChanged
	case errors.Is(err, rsm.ErrClosed):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, rsm.ErrBusy):
		return rpctypes.ErrGRPCRequestTooManyRequests
	case errors.Is(err, rsm.ErrTooLarge):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, rsm.ErrCorrupt):
		return rpctypes.ErrGRPCCorrupt
	case errors.Is(err, rsm.ErrDuplicateID), errors.Is(err, rsm.ErrSettingsMismatch):
		return rpctypes.ErrGRPCUnhealthy
	case errors.Is(err, kv.ErrInvalidKey), errors.Is(err, kv.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, "etcdserver: "+err.Error())
	case errors.Is(err, kv.ErrMalformed):
		return status.Error(codes.Internal, "etcdserver: "+err.Error())
	}
	return status.Error(codes.Unknown, "etcdserver: "+err.Error())
}

// HTTP serves etcd's /version and /health. /health is healthy when a
// linearizable read through the node succeeds within a second
// (?serializable=true: when the node follows a known leader or leads).
func (s *Server) HTTP() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"etcdserver": Version, "etcdcluster": Version, "storage": Version})
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		ok, reason := s.health(r.Context(), r.URL.Query().Get("serializable") == "true")
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]string{"health": fmt.Sprint(ok), "reason": reason})
	})
	return mux
}

func (s *Server) health(ctx context.Context, serializable bool) (bool, string) {
	st := s.node.Status()
	switch {
	case st.Problem != "":
		return false, "CORRUPT: " + st.Problem
	case st.State != rsm.Joined.String() || st.LeaderID == "":
		return false, "RAFT NO LEADER"
	case serializable:
		return true, ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	q, _ := kv.RangeQuery(&pb.RangeRequest{Key: []byte("health")}) // cannot fail
	if _, err := s.node.Read(ctx, s.name, q); err != nil {
		return false, "QGET ERROR: " + err.Error()
	}
	return true, ""
}

// Mux serves gRPC requests with g and the others with h: one port for
// both, as etcd's client port. Served over TLS, or over plain HTTP/2
// (h2c) and HTTP/1.
func Mux(g, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; a failed write has no one to tell
}

// Handler is the client port's handler: the services on a gRPC server of
// their own (with opts), /version and /health beside them (Mux). stop
// ends every call in flight, and closes s; once it has begun, a gRPC
// call is answered 503 (Unavailable), which clients retry elsewhere.
//
// gRPC served through net/http cannot stop gracefully, and its Stop waits
// for every call's ServeHTTP to return, which a call whose client stopped
// reading does not (HTTP/2 flow control blocks its write). So stop first
// resets every gRPC call's HTTP/2 stream (a write deadline in the past),
// which fails such writes, then stops the gRPC server, which cancels the
// calls, and then closes s, which waits for the calls' goroutines.
//
// h has the method GRPCServer, which gives the gRPC server: a caller that
// owns the port may also serve connections on it with gRPC's own
// transport (grpc.Server.Serve), as etcd serves its port without TLS;
// stop closes those connections too.
func (s *Server) Handler(opts ...grpc.ServerOption) (h http.Handler, stop func()) {
	g := grpc.NewServer(opts...)
	s.Register(g)
	c := &grpcCalls{g: g, ws: map[*http.ResponseWriter]struct{}{}}
	return grpcHandler{Mux(c, s.HTTP()), g}, func() {
		c.stop()
		g.Stop()
		_ = s.Close()
	}
}

// grpcHandler is Handler's handler, which also gives its gRPC server.
type grpcHandler struct {
	http.Handler
	g *grpc.Server
}

// GRPCServer is the gRPC server whose calls the handler serves.
func (h grpcHandler) GRPCServer() *grpc.Server { return h.g }

// grpcCalls serves gRPC calls with g, and knows their response writers,
// to reset them when it stops.
type grpcCalls struct {
	g       *grpc.Server
	mu      sync.Mutex
	stopped bool
	ws      map[*http.ResponseWriter]struct{}
}

func (c *grpcCalls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		http.Error(w, "etcdserver: server stopped", http.StatusServiceUnavailable)
		return
	}
	c.ws[&w] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.ws, &w)
		c.mu.Unlock()
	}()
	c.g.ServeHTTP(w, r)
}

// stop refuses new calls and resets the streams of those in flight.
func (c *grpcCalls) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	past := time.Unix(1, 0)
	for w := range c.ws {
		// A writer that cannot (HTTP/1) never carries gRPC.
		_ = http.NewResponseController(*w).SetWriteDeadline(past)
	}
}

// apiRev is the revision etcd's API answers for view: a group never
// written to is at revision 0 in the machine, and empty at revision 1,
// as an empty etcd is, to etcd's API (see kv's "History and compaction").
func apiRev(view *kv.ReadView) int64 { return max(view.Revision(), 1) }
