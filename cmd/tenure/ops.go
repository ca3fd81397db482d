package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// opsStatus is what every long-running command (elect, run, shards, kv
// serve) reports over HTTP, with the same field names in each: /readyz
// answers the summary (200 when Ready, else 503), /status all of it.
type opsStatus struct {
	Command string `json:"command"`
	ID      string `json:"id,omitempty"`
	Ready   bool   `json:"ready"`
	// Reason says why the command is not ready.
	Reason string `json:"reason,omitempty"`
	// Role is starting, stopping, leader, follower (elect, run, kv serve)
	// or member (shards).
	Role   string `json:"role"`
	Leader string `json:"leader,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	// StoreError is the last error of store calls that have been failing.
	StoreError string `json:"storeError,omitempty"`

	// The command's own view, on /status only.
	Election *election.Status `json:"election,omitempty"`
	Shards   *lease.Status    `json:"shards,omitempty"`
	Node     *rsm.Status      `json:"node,omitempty"`
}

// summary is the part /readyz shows, which kv serve answers without
// authentication.
func (s opsStatus) summary() opsStatus {
	s.Election, s.Shards, s.Node = nil, nil, nil
	return s
}

// opsState is what every long-running command's readiness starts from:
// whether it has started, is stopping, and whether its store answers.
// It is safe for concurrent use.
type opsState struct {
	command, id string
	starting    atomic.Pointer[string] // why the command is not running yet; nil once it is
	stopping    atomic.Bool
	health      storeHealth
	view        atomic.Pointer[func(opsStatus) opsStatus] // fills in the running command's view
}

func newOpsState(command, id string) *opsState {
	o := &opsState{command: command, id: id}
	o.starting.Store(ptr("connecting to the store"))
	return o
}

// running installs the command's view: view gets the status with the
// common fields set and Ready true, and fills in its own.
func (o *opsState) running(view func(opsStatus) opsStatus) {
	o.view.Store(&view)
	o.starting.Store(nil)
}

// status is the command's status now.
func (o *opsState) status() opsStatus {
	s := opsStatus{Command: o.command, ID: o.id}
	if err := o.health.err(); err != nil {
		s.StoreError = err.Error()
	}
	view := o.view.Load()
	switch {
	case o.stopping.Load():
		s.Role, s.Reason = "stopping", "shutting down"
	case o.starting.Load() != nil:
		s.Role, s.Reason = "starting", *o.starting.Load()
	case view == nil:
		s.Role, s.Reason = "starting", "starting"
	default:
		s.Ready = true
		s = (*view)(s)
		if s.StoreError != "" {
			// The cause of whatever else the view says.
			s.Ready, s.Reason = false, "store unreachable: "+s.StoreError
		}
	}
	return s
}

// opsMux builds the HTTP endpoint every long-running command serves:
//
//	/livez    200 while the process runs
//	/readyz   200 while it serves (see each command), else 503; the reason
//	          is in the JSON body
//	/healthz  an alias of /readyz
//	/status   the command's status as JSON, always 200
//	/metrics  Prometheus metrics from g
func opsMux(status func() opsStatus, g prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]any{"alive": true})
	})
	ready := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s := status()
		code := http.StatusOK
		if !s.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, s.summary())
	}
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /healthz", ready)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, status())
	})
	mux.Handle("GET /metrics", metricsHandler(g))
	return mux
}

// metricsHandler serves g's metrics in Prometheus's formats.
func metricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// opsPaths are the paths opsMux serves, for the log line.
const opsPaths = "/livez /readyz /healthz /status /metrics"

// processCollectors are the Go runtime and process metrics every
// command's registry holds.
func processCollectors() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

// serveOps serves h on addr (the --http flag) until the returned stop is
// called; stop waits a moment for requests in flight.
func serveOps(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ends with Shutdown
	}()
	log.Info("serving HTTP", "addr", ln.Addr().String(), "paths", opsPaths)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; a failed write has no one to tell
}

// connectStore calls connect until it succeeds, retrying while the store
// does not answer (o reports why meanwhile, and the command is not
// ready). An error the store classifies as permanent, or one that is not
// the store's (a bad URL, a store that ignores conditional writes), is
// returned at once; so is ctx's end.
func connectStore(ctx context.Context, log *slog.Logger, o *opsState, connect func(context.Context) error) error {
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		err := connect(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !storeRetryable(err) {
			return err
		}
		o.starting.Store(ptr("store unreachable: " + err.Error()))
		log.Warn("the store is unreachable; retrying", "err", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// openProbed opens the store at url and checks that it answers and
// enforces conditional writes (one round of store.Probe), so that a
// command can tell a store that is down from one that is misconfigured.
func openProbed(ctx context.Context, url string, opts ...store.Option) (*store.Store, error) {
	st, err := store.Open(ctx, url, opts...)
	if err != nil {
		return nil, err
	}
	// A store that accepts connections and never answers must not hold
	// the command here: the attempt fails and is retried.
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := store.Probe(pctx, st, 1); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// probeTimeout bounds the check of the store at start.
const probeTimeout = 15 * time.Second

// storeRetryable: the store did not answer, or answered that it is busy.
// Anything else needs the operator.
func storeRetryable(err error) bool {
	var se *store.Error
	if !errors.As(err, &se) {
		return false
	}
	return !errors.Is(err, store.ErrPermanent) && !errors.Is(err, store.ErrInvalidArgument) &&
		!errors.Is(err, store.ErrConditionsIgnored) && !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrTooLarge)
}

// storeFailuresUnready is how many store calls in a row must fail before
// readiness says the store is unreachable: one failure is retried.
const storeFailuresUnready = 3

// storeHealth follows the outcome of a command's store calls (fed by
// store.WithObserver).
type storeHealth struct {
	mu    sync.Mutex
	fails int
	last  error
}

func (h *storeHealth) observe(c store.Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Err == nil {
		h.fails, h.last = 0, nil
		return
	}
	switch store.KindOf(c.Err) {
	case driver.Canceled:
		// Our own cancellation says nothing of the store.
	case driver.NotFound, driver.PreconditionFailed, driver.Conflict, driver.InvalidArgument, driver.TooLarge:
		h.fails, h.last = 0, nil // an answer
	default:
		h.fails++
		h.last = c.Err
		if errors.Is(c.Err, context.DeadlineExceeded) {
			// A call that waited out its whole deadline: a store that
			// does not answer (frozen, or black-holed) fails no faster
			// than that, so one such call says it at once.
			h.fails = max(h.fails, storeFailuresUnready)
		}
	}
}

func (h *storeHealth) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fails >= storeFailuresUnready {
		return h.last
	}
	return nil
}

// electionView is the readiness of an election member (tenure elect and
// tenure run): ready while it leads, or follows a leader it knows.
func electionView(el *election.Elector) func(opsStatus) opsStatus {
	return func(s opsStatus) opsStatus { return electionStatusView(el.Status(), el.RecordProblem())(s) }
}

// electionStatusView is electionView of one status and record problem.
func electionStatusView(es election.Status, problem error) func(opsStatus) opsStatus {
	return func(s opsStatus) opsStatus {
		s.Election = &es
		s.Term = es.Term
		switch {
		case es.Leader:
			s.Role, s.Leader = "leader", es.ServerID
		default:
			s.Role = "follower"
			if !es.Released {
				s.Leader = es.LeaderID
			}
		}
		switch {
		case es.DuplicateServerID:
			s.Ready, s.Reason = false, "another process takes part in this election with the same --id"
		case s.Role == "leader":
		case errors.Is(problem, election.ErrForeignRecord):
			// Not a lock at all: no repair replaces it.
			s.Ready, s.Reason = false, "the lock's key holds another kind of record, never taken over or written: "+es.RecordProblem+" (give the lock a key of its own)"
		case es.RecordProblem != "":
			// No member can take the lock over until it is repaired:
			// whoever it names, the group has no leader it can follow.
			s.Ready, s.Reason = false, "the lock cannot be taken over: "+es.RecordProblem+" (an operator runs tenure lock repair --term-floor N LOCK_URL)"
		case es.LeaderNotLeading:
			// The record still names it, but it said it does not lead:
			// no one leads until its lease lapses or it is released.
			s.Ready, s.Reason = false, "no leader: "+s.Leader+" answered that it does not lead; a member takes the lock when its lease lapses"
		case s.Leader == "":
			s.Ready, s.Reason = false, "no leader known"
		case s.Leader == es.ServerID:
			// The record names this member, which does not lead: a
			// lease it lost, not yet taken by anyone.
			s.Ready, s.Reason = false, "no leader known (the lock names this member, whose lease lapsed)"
		}
		return s
	}
}
