package election

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/internal/promshare"
)

// collector holds the election families of one Registerer. It is
// registered once: the Electors that follow find it (Register answers
// AlreadyRegisteredError with it) and add their series to it, each
// labelled by lock and id, so that any number of Electors can share a
// Registerer without a conflict, and a new Elector for the same lock and
// ServerID (after a Stop, say) takes over its predecessor's series instead
// of failing to register. Two running Electors with the same lock and
// ServerID (on two stores) are refused: one would hide the other.
type collector struct {
	transitions  *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	renewSeconds *prometheus.HistogramVec

	isLeader, term, problem *prometheus.Desc

	mu      sync.Mutex
	members map[memberKey]*Elector
}

type memberKey struct{ lock, id string }

var memberLabels = []string{"lock", "id"}

func newCollector() *collector {
	return &collector{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_election_transitions_total", Help: "Leadership transitions of this member, by kind (started, stopped).",
		}, append(memberLabels, "kind")),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_election_renewals_total", Help: "Renewals of the lock by its leader, by result: ok, lost (another member holds it), error (retried until the renew deadline).",
		}, append(memberLabels, "result")),
		renewSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_election_renew_duration_seconds", Help: "Latency of successful writes of the lock that renew or take it, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, memberLabels),
		isLeader: prometheus.NewDesc("tenure_election_is_leader",
			"1 while this member leads, computed against its renew deadline at scrape time.", memberLabels, nil),
		term: prometheus.NewDesc("tenure_election_term",
			"This member's term while it leads, else the highest term it has seen.", memberLabels, nil),
		problem: prometheus.NewDesc("tenure_election_record_problem",
			"1 while the lock record cannot be taken over: its term cannot be read or is at its maximum (repair it with tenure lock repair), or it is another kind of record (give the election a key of its own).", memberLabels, nil),
		members: map[memberKey]*Elector{},
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.transitions.Describe(ch)
	c.renewals.Describe(ch)
	c.renewSeconds.Describe(ch)
	ch <- c.isLeader
	ch <- c.term
	ch <- c.problem
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.transitions.Collect(ch)
	c.renewals.Collect(ch)
	c.renewSeconds.Collect(ch)
	c.mu.Lock()
	members := make(map[memberKey]*Elector, len(c.members))
	for k, e := range c.members {
		members[k] = e
	}
	c.mu.Unlock()
	for k, e := range members {
		ch <- prometheus.MustNewConstMetric(c.isLeader, prometheus.GaugeValue, b2f(e.IsLeader()), k.lock, k.id)
		ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(e.Term()), k.lock, k.id)
		ch <- prometheus.MustNewConstMetric(c.problem, prometheus.GaugeValue, b2f(e.RecordProblem() != nil), k.lock, k.id)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metrics are one Elector's series. A nil *metrics records nothing.
type metrics struct {
	started, stopped            prometheus.Counter
	renewOK, renewLost, renewEr prometheus.Counter
	renew                       prometheus.Observer
}

// registerMetrics adds e's series to reg's election collector, registering
// it if reg has none yet.
func registerMetrics(reg prometheus.Registerer, e *Elector) (*metrics, error) {
	c, err := promshare.Register(reg, newCollector())
	if err != nil {
		return nil, fmt.Errorf("election: register metrics: %w", err)
	}
	k := memberKey{lock: e.cfg.LockfilePath, id: e.cfg.ServerID}
	c.mu.Lock()
	if prev := c.members[k]; prev != nil && prev.running() {
		c.mu.Unlock()
		// Two live Electors cannot share one set of series (on two
		// stores, say): one would hide the other.
		return nil, fmt.Errorf("election: register metrics: an Elector for lock %q with ServerID %q is running on this Registerer already; give one of them a Registerer of its own", k.lock, k.id)
	}
	c.members[k] = e
	c.mu.Unlock()
	// Every series exists from the start, at zero, so that a rate or an
	// alert on it has data before the first event.
	return &metrics{
		started:   c.transitions.WithLabelValues(k.lock, k.id, "started"),
		stopped:   c.transitions.WithLabelValues(k.lock, k.id, "stopped"),
		renewOK:   c.renewals.WithLabelValues(k.lock, k.id, "ok"),
		renewLost: c.renewals.WithLabelValues(k.lock, k.id, "lost"),
		renewEr:   c.renewals.WithLabelValues(k.lock, k.id, "error"),
		renew:     c.renewSeconds.WithLabelValues(k.lock, k.id),
	}, nil
}

func (m *metrics) transition(started bool) {
	switch {
	case m == nil:
	case started:
		m.started.Inc()
	default:
		m.stopped.Inc()
	}
}

// wrote records the outcome of a write of op that took seconds.
func (m *metrics) wrote(op opKind, err error, lost bool, seconds float64) {
	if m == nil {
		return
	}
	if op == opRenew {
		switch {
		case err == nil:
			m.renewOK.Inc()
		case lost:
			m.renewLost.Inc()
		default:
			m.renewEr.Inc()
		}
	}
	if err == nil && (op == opRenew || op == opAcquire) {
		m.renew.Observe(seconds)
	}
}
