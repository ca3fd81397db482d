package election_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

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
