// Package opsserver is what every long-running tenure command (elect, run,
// shards, kv serve) serves for its operators, the same way in each: the
// probes (/livez, /readyz, /healthz), /status and /metrics, and readiness
// from whether the command has started, is stopping, and whether its
// store answers. It also opens a command's store at start, retrying while
// the store does not answer.
//
// It holds no policy of a command's own: each command gives its view of
// its state and its Prometheus registry. It imports neither election nor
// lease, so that a kv server, which serves it, links neither: an election
// member's view and a shard member's are their commands'.
package opsserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Status is what every long-running command (elect, run, shards, kv
// serve) reports over HTTP, with the same field names in each: /readyz
// answers the summary (200 when Ready, else 503), /status all of it.
type Status struct {
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

	// The command's own view, on /status only: Election is an election
	// member's *election.Status (elect, run), Shards a shard member's
	// *lease.Status (shards). Their commands set them; decoded, they are
	// the JSON's maps.
	Election any         `json:"election,omitempty"`
	Shards   any         `json:"shards,omitempty"`
	Node     *rsm.Status `json:"node,omitempty"`
}

// Summary is the part /readyz shows, which kv serve answers without
// authentication.
func (s Status) Summary() Status {
	s.Election, s.Shards, s.Node = nil, nil, nil
	return s
}

// State is what every long-running command's readiness starts from:
// whether it has started, is stopping, and whether its store answers.
// It is safe for concurrent use.
type State struct {
	command, id string
	starting    atomic.Pointer[string] // why the command is not running yet; nil once it is
	stopping    atomic.Bool
	health      StoreHealth
	view        atomic.Pointer[func(Status) Status] // fills in the running command's view
}

// NewState is the state of the command (its name, as Status.Command
// says it) with the given ID, connecting to its store.
func NewState(command, id string) *State {
	o := &State{command: command, id: id}
	o.SetStarting("connecting to the store")
	return o
}

// Command is the command's name.
func (o *State) Command() string { return o.command }

// ID is the command's ID.
func (o *State) ID() string { return o.id }

// SetStarting says why the command is not running yet.
func (o *State) SetStarting(reason string) { o.starting.Store(&reason) }

// Starting says why the command is not running yet; ok is false once it
// runs.
func (o *State) Starting() (reason string, ok bool) {
	if p := o.starting.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// Started says the command runs, though it gives no view (it reports
// its status itself); Running does it too.
func (o *State) Started() { o.starting.Store(nil) }

// SetStopping says the command is shutting down, for good.
func (o *State) SetStopping() { o.stopping.Store(true) }

// Stopping reports whether the command is shutting down.
func (o *State) Stopping() bool { return o.stopping.Load() }

// Health is the health of the command's store: feed it every store call
// (store.WithObserver).
func (o *State) Health() *StoreHealth { return &o.health }

// Running installs the command's view: view gets the status with the
// common fields set and Ready true, and fills in its own.
func (o *State) Running(view func(Status) Status) {
	o.view.Store(&view)
	o.starting.Store(nil)
}

// Status is the command's status now.
func (o *State) Status() Status {
	s := Status{Command: o.command, ID: o.id}
	if err := o.health.Err(); err != nil {
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

// Mux builds the HTTP endpoint every long-running command serves:
//
//	/livez    200 while the process runs
//	/readyz   200 while it serves (see each command), else 503; the reason
//	          is in the JSON body
//	/healthz  an alias of /readyz
//	/status   the command's status as JSON, always 200
//	/metrics  Prometheus metrics from g
func Mux(status func() Status, g prometheus.Gatherer) *http.ServeMux {
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
		writeJSON(w, code, s.Summary())
	}
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /healthz", ready)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, status())
	})
	mux.Handle("GET /metrics", MetricsHandler(g))
	return mux
}

// MetricsHandler serves g's metrics in Prometheus's formats.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// paths are the paths Mux serves, for the log line.
const paths = "/livez /readyz /healthz /status /metrics"

// ProcessCollectors are the Go runtime and process metrics every
// command's registry holds.
func ProcessCollectors() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

// Serve serves h on ln until the returned stop is called; stop waits a
// moment for requests in flight, and closes ln.
func Serve(ln net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ends with Shutdown
	}()
	log.Info("serving HTTP", "addr", ln.Addr().String(), "paths", paths)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; a failed write has no one to tell
}

// ConnectStore calls connect until it succeeds, retrying while the store
// does not answer (o reports why meanwhile, and the command is not
// ready). An error the store classifies as permanent, or one that is not
// the store's (a bad URL, a store that ignores conditional writes), is
// returned at once; so is ctx's end.
func ConnectStore(ctx context.Context, log *slog.Logger, o *State, connect func(context.Context) error) error {
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		err := connect(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !StoreRetryable(err) {
			return err
		}
		o.SetStarting("store unreachable: " + err.Error())
		log.Warn("the store is unreachable; retrying", "err", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// OpenProbed opens the store at url and checks that it answers and
// enforces conditional writes (one round of store.Probe), so that a
// command can tell a store that is down from one that is misconfigured.
func OpenProbed(ctx context.Context, url string, opts ...store.Option) (*store.Store, error) {
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

// StoreRetryable reports whether err says the store did not answer, or
// answered that it is busy. Anything else needs the operator.
func StoreRetryable(err error) bool {
	var se *store.Error
	if !errors.As(err, &se) {
		return false
	}
	return !errors.Is(err, store.ErrPermanent) && !errors.Is(err, store.ErrInvalidArgument) &&
		!errors.Is(err, store.ErrConditionsIgnored) && !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrTooLarge)
}

// StoreFailuresUnready is how many store calls in a row must fail before
// readiness says the store is unreachable: one failure is retried.
const StoreFailuresUnready = 3

// StoreHealth follows the outcome of a command's store calls (fed by
// store.WithObserver). It is safe for concurrent use.
type StoreHealth struct {
	mu    sync.Mutex
	fails int
	last  error
}

// Observe records the outcome of one store call.
func (h *StoreHealth) Observe(c store.Call) {
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
			h.fails = max(h.fails, StoreFailuresUnready)
		}
	}
}

// Err is the last error of the store's calls once StoreFailuresUnready
// of them in a row have failed, else nil.
func (h *StoreHealth) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fails >= StoreFailuresUnready {
		return h.last
	}
	return nil
}

// StoreMetrics count the store calls of one command, fed by
// store.WithObserver: the store package's series (store.Metrics), for the
// command's registry. It is safe for concurrent use.
type StoreMetrics struct {
	m *store.Metrics
}

// NewStoreMetrics returns the metrics, not registered anywhere yet.
func NewStoreMetrics() *StoreMetrics {
	// Without a Registerer, NewMetrics cannot fail.
	m, _ := store.NewMetrics(nil, nil)
	return &StoreMetrics{m: m}
}

// Collectors are the collectors to register.
func (m *StoreMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.m}
}

// Observe records one call; result is "ok" or the error's kind.
func (m *StoreMetrics) Observe(c store.Call) { m.m.Observe(c) }
