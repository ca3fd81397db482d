package kvserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
)

// NodeConfig is a kv node as tenure kv serve runs it: a member of one
// group on one store, serving the HTTP API.
type NodeConfig struct {
	// Server is the policy of the node's two ports (see Config). Its
	// Peer is the node's host: Peer.Listener is required, and Peer.Logger
	// and Peer.Registerer are Run's. Ops and NotReady are Run's too.
	Server Config
	// StoreURL is the store the group lives in. Required.
	StoreURL string
	// Group is the group's name: the prefix of its objects. Required.
	Group string
	// Options are the node's rsm options, validated by the caller.
	Options rsm.Options
	// MaxValueSize is the largest value the API accepts, in bytes.
	MaxValueSize int
	// MetricsAddr, if set, also serves /metrics there: plain HTTP,
	// without token or client certificate.
	MetricsAddr string
	// Logger receives the node's log. Default: slog.Default().
	Logger *slog.Logger
	// TuneGC sets the Go collector's policy for the node's state, for
	// the whole process, while Run runs: the heap may grow 10% above the
	// live heap (25% from 512 MiB of it) and at least 16 MiB, and while the
	// node loads a snapshot the collector waits under a memory limit
	// instead (see gc.go).
	TuneGC bool
	// OnServing, if set, is called once the API serves, with its URL.
	OnServing func(apiURL string)
	// Command names the command in /status. Default "kv serve".
	Command string
	// API, if set, makes the API the node serves instead of the kv HTTP
	// API (tenure etcd serve serves etcd's): given the joined node, the
	// kv machine it hosts and the API's URL, it returns the handler and
	// a function that stops what it started. Run calls that as it stops
	// serving, before it lets other requests finish: a gRPC API's
	// streams would hold the port open, so its calls in flight end. The
	// API port then also speaks HTTP/2, over TLS and in clear (h2c), as
	// gRPC needs. If h has a method GRPCServer() *grpc.Server and the
	// port is plain HTTP, the connections that open with HTTP/2's preface
	// once the API serves go to that server's own transport, as etcd
	// serves its port without TLS (gRPC through net/http costs about
	// twice the CPU a call); stop must stop that server.
	API func(node *rsm.Node, m *kv.Machine, apiURL string) (h http.Handler, stop func(), err error)
}

// Run runs the node until ctx ends or it fails. The probes answer from
// the start (not ready while the store is unreachable, which is retried);
// the API once the node has joined its group. At the end it stops
// serving, lets requests in flight finish, and leaves the group (a leader
// steps down so that another node takes over at once). It returns nil when
// ctx ends, also before the node has joined; its errors name the fields
// as c.Server.Names does.
func Run(ctx context.Context, c NodeConfig) error {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	names := c.Server
	// The node, once joined: the collector's policy reads its loads.
	var joined atomic.Pointer[rsm.Node]
	if c.TuneGC {
		gctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tuneGC(gctx, kvGCEvery, func() rsm.Restore {
				if n := joined.Load(); n != nil {
					return n.Restoring()
				}
				return rsm.Restore{}
			})
		}()
		defer func() { stop(); <-done }()
	}
	// The rsm metrics have their own registry: readiness reads the
	// corrupt-object count from it.
	reg, rsmReg, sm := prometheus.NewRegistry(), prometheus.NewRegistry(), opsserver.NewStoreMetrics()
	reg.MustRegister(sm.Collectors()...)
	reg.MustRegister(opsserver.ProcessCollectors()...)
	gatherers := prometheus.Gatherers{reg, rsmReg}
	hcfg := c.Server.Peer
	hcfg.Logger, hcfg.Registerer = log, rsmReg
	command := c.Command
	if command == "" {
		command = "kv serve"
	}
	ops := opsserver.NewState(command, hcfg.ID)
	ko := &nodeOps{ops: ops}
	scfg := c.Server
	scfg.Peer, scfg.Ops, scfg.NotReady = hcfg, opsserver.Mux(ko.status, gatherers), ko.notReady
	ks, err := New(scfg)
	if err != nil {
		return err
	}
	if err := hcfg.Validate(); err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", c.Server.HTTPAddr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", names.name("HTTPAddr"), c.Server.HTTPAddr, err)
	}
	defer httpLn.Close()
	var metricsLn net.Listener
	if c.MetricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", c.MetricsAddr); err != nil {
			return fmt.Errorf("%s %s: %w", names.name("MetricsAddr"), c.MetricsAddr, err)
		}
		defer metricsLn.Close()
	}

	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	srv := &http.Server{Handler: ks, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	apiTLS := c.Server.TLS
	if c.API != nil {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		if apiTLS != nil {
			apiTLS = apiTLS.Clone()
			apiTLS.NextProtos = []string{"h2", "http/1.1"}
		}
	}
	apiLn, scheme := httpLn, "http"
	var split *splitListener
	switch {
	case apiTLS != nil:
		apiLn, scheme = tls.NewListener(httpLn, apiTLS), "https"
	case c.API != nil:
		split = newSplitListener(httpLn)
		apiLn = split
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(apiLn) }()
	var msrv *http.Server
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", opsserver.MetricsHandler(gatherers))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
		go func() { serveErr <- msrv.Serve(metricsLn) }()
		log.Info("serving /metrics", "addr", metricsLn.Addr().String())
	}
	apiURL := scheme + "://" + httpLn.Addr().String()
	// The probes answer from here on (not ready while the store is
	// unreachable); the banner waits for the group, so that a start that
	// fails (a missing bucket, a bad group name) never announces an API.
	log.Info("connecting to the store; the probes are served", "http", apiURL)
	var stopAPI func()
	stopHTTP := func() {
		ops.SetStopping()
		if split != nil {
			// The port takes no new connection from here on. A client
			// whose connection the API's stop below closes dials again
			// at once; accepted now, its HTTP/2 connection would go to
			// the HTTP server, whose Shutdown tells only the connections
			// it has registered to go away, and waits for the others
			// until its deadline (golang/go#81153): a SIGTERM would take
			// the request timeout instead of a moment.
			_ = split.Close()
		}
		if stopAPI != nil {
			stopAPI()
		}
		// Let requests in flight finish (each is bounded by RequestTimeout).
		sctx, cancel := context.WithTimeout(context.Background(), c.Options.RequestTimeout+time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		if msrv != nil {
			_ = msrv.Close()
		}
	}

	st, host, err := connect(ctx, log, ops, c.StoreURL, hcfg, func(c store.Call) { sm.Observe(c); ops.Health().Observe(c) })
	if err != nil || ctx.Err() != nil {
		stopHTTP()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	defer host.Close()
	machine := kv.New()
	node, err := host.Join(ctx, c.Group, map[string]rsm.StateMachine{kv.MachineName: machine}, c.Options)
	if err != nil {
		stopHTTP()
		return err
	}
	joined.Store(node)
	var h http.Handler
	if c.API != nil {
		h, stopAPI, err = c.API(node, machine, apiURL)
	} else {
		h, err = kv.NewHandler(kv.NewClient(node), kv.HandlerOptions{MaxValueSize: c.MaxValueSize, Status: node.Status})
	}
	if err != nil {
		stopHTTP()
		return err
	}
	if gs, ok := h.(interface{ GRPCServer() *grpc.Server }); ok && split != nil {
		grpcDone := make(chan struct{})
		go func() {
			defer close(grpcDone)
			_ = gs.GRPCServer().Serve(split.h2()) // ends when stopAPI stops it
		}()
		defer func() { <-grpcDone }()
	}
	status := node.Status
	ko.node.Store(&status)
	ks.SetAPI(h)
	if c.OnServing != nil {
		c.OnServing(apiURL)
	}
	compactCtx, stopCompacting := context.WithCancel(ctx)
	compacting := make(chan struct{})
	go func() {
		defer close(compacting)
		compactHistory(compactCtx, nodeHistory(node, machine), compactEvery)
	}()
	ops.Started()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("HTTP server: %w", err)
	case <-node.Done():
		// The node stopped on its own: it refused to join (its options
		// disagree with the group's settings, which the error names).
		runErr = fmt.Errorf("group %q: %w", c.Group, node.Err())
	}
	stopHTTP()
	stopCompacting()
	<-compacting
	// Leave: a leader steps down so another node takes over at once.
	lctx, cancel := context.WithTimeout(context.Background(), c.Options.RequestTimeout+time.Second)
	defer cancel()
	if err := node.Leave(lctx); err != nil {
		log.Warn("leaving the group", "err", err)
	}
	if err := host.Close(); err != nil {
		log.Warn("closing the host", "err", err)
	}
	return runErr
}

// connect opens the store and starts the host, retrying while the store
// does not answer (see opsserver.ConnectStore).
func connect(ctx context.Context, log *slog.Logger, o *opsserver.State, storeURL string, hcfg rsm.HostConfig, observe func(store.Call)) (*store.Store, *rsm.Host, error) {
	var (
		st   *store.Store
		host *rsm.Host
	)
	err := opsserver.ConnectStore(ctx, log, o, func(ctx context.Context) error {
		var err error
		if st, err = store.Open(ctx, storeURL, store.WithObserver(observe), store.WithLogger(log)); err != nil {
			return err
		}
		if host, err = rsm.NewHost(ctx, st, hcfg); err != nil {
			st.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return st, host, nil
}

// nodeOps is what a kv node reports on /readyz and /status. It is safe
// for concurrent use.
type nodeOps struct {
	ops  *opsserver.State
	node atomic.Pointer[func() rsm.Status] // the node's, once joined
}

// notReady says why the API is not served yet.
func (s *nodeOps) notReady() string {
	reason, _ := s.ops.Starting()
	return reason
}

// status is the node's status in the form every command reports.
func (s *nodeOps) status() opsserver.Status {
	h := s.health()
	st := opsserver.Status{Command: s.ops.Command(), ID: s.ops.ID()}
	st.Ready, st.Reason = Readiness(h)
	if h.StoreErr != nil {
		st.StoreError = h.StoreErr.Error()
	}
	switch {
	case h.Stopping:
		st.Role = "stopping"
	case h.Starting != "":
		st.Role = "starting"
	default:
		node := h.Status
		st.Node = &node
		st.ID, st.Role, st.Leader, st.Term = node.ID, strings.ToLower(node.Role), node.LeaderID, node.Term
	}
	return st
}

func (s *nodeOps) health() Health {
	h := Health{Stopping: s.ops.Stopping(), StoreErr: s.ops.Health().Err()}
	h.Starting, _ = s.ops.Starting()
	if f := s.node.Load(); f != nil {
		h.Status = (*f)()
	} else if h.Starting == "" {
		h.Starting = "starting"
	}
	return h
}
