package election_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/memstore"
)

func Example() {
	ctx := context.Background()
	st, err := store.Open(ctx, "mem://example")
	if err != nil {
		panic(err)
	}
	defer st.Close()

	working := make(chan uint64)
	var e *election.Elector
	e, err = election.New(ctx, election.Config{
		Store:        st,
		LockfilePath: "leader/scheduler.json",
		ServerID:     "scheduler-1",
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnStartedLeading: func(ctx context.Context) {
			// Lead until ctx is cancelled; pass the term to the
			// systems the leader writes to, as a fencing token.
			working <- e.Term()
			<-ctx.Done()
		},
	})
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println("leading with term", <-working)
	fmt.Println("IsLeader:", e.IsLeader())

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil { // waits for the work, then releases
		panic(err)
	}
	data, _, _ := st.Get(ctx, "leader/scheduler.json")
	rec, _ := election.DecodeRecord(data)
	fmt.Println("after Stop: IsLeader:", e.IsLeader(), "released:", rec.Released, "term:", rec.Term)
	// Output:
	// leading with term 1
	// IsLeader: true
	// after Stop: IsLeader: false released: true term: 1
}

// An Elector given a Registerer exports its series there; the store it is
// given is counted by its opener, through store.NewMetrics.
func Example_metrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	sm, err := store.NewMetrics(reg, nil)
	if err != nil {
		panic(err)
	}
	st, err := store.Open(ctx, "mem://example-metrics", store.WithObserver(sm.Observe))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	e, err := election.New(ctx, election.Config{
		Store:      st,
		ServerID:   "scheduler-1",
		Registerer: reg,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	if err := e.WaitForLeadership(ctx); err != nil {
		panic(err)
	}
	fmt.Print(gathered(reg, "tenure_election_is_leader"))
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Print(gathered(reg, "tenure_election_is_leader"))
	fmt.Print(gathered(reg, "tenure_election_transitions_total"))
	// Output:
	// tenure_election_is_leader{id="scheduler-1",lock="leader.json"} 1
	// tenure_election_is_leader{id="scheduler-1",lock="leader.json"} 0
	// tenure_election_transitions_total{id="scheduler-1",kind="started",lock="leader.json"} 1
	// tenure_election_transitions_total{id="scheduler-1",kind="stopped",lock="leader.json"} 1
}

// gathered formats the samples of one family as the text exposition does.
func gathered(g prometheus.Gatherer, name string) string {
	mfs, err := g.Gather()
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			fmt.Fprintf(&b, "%s{%s} %g\n", name, strings.Join(labels, ","), v)
		}
	}
	return b.String()
}
