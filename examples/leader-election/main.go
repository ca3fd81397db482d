// Command leader-election is a complete program that does periodic work
// only while it leads. Start several copies on one store and stop the
// leader (Ctrl-C releases the lock; kill -9 does not): another copy takes
// over.
//
//	go run ./examples/leader-election --store file://./data --id a
//	go run ./examples/leader-election --store file://./data --id b
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/all"
)

func main() {
	storeURL := flag.String("store", "file://./data", "store URL")
	id := flag.String("id", "", "this member's ID (default: the host name)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *storeURL, *id); err != nil {
		fmt.Fprintln(os.Stderr, "leader-election:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, storeURL, id string) error {
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()

	var e *election.Elector
	e, err = election.New(ctx, election.Config{
		Store:        st,
		LockfilePath: "examples/leader.json",
		ServerID:     id,
		OnStartedLeading: func(ctx context.Context) {
			term := e.Term()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					slog.Info("stopping work", "term", term)
					return
				case <-tick.C:
					// Real work would pass term to what it writes, so a
					// deposed leader's late writes can be refused.
					slog.Info("working", "term", term)
				}
			}
		},
		OnNewLeader: func(leaderID, addr string, term uint64) {
			slog.Info("leader", "id", leaderID, "term", term)
		},
	})
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
