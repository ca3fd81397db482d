// Command leader-election is a complete program that does periodic work
// only while it leads. Start several copies on one store and stop the
// leader (Ctrl-C releases the lock; kill -9 does not): another copy takes
// over.
//
//	go run ./examples/leader-election --id a
//	go run ./examples/leader-election --id b
//	go run ./cmd/tenure status file://./data//examples/leader.json
//
// The lock URL names the store and the lock's key the way the tenure CLI
// does: the key examples/leader.json in the store file://./data, "//"
// marking where a key with a "/" in it starts.
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
	_ "github.com/tenure-io/tenure/store/all"
)

func main() {
	lockURL := flag.String("lock", "file://./data//examples/leader.json", "lock URL: the store's URL, then the lock's key (after \"//\" if it has a \"/\")")
	id := flag.String("id", "", "this member's ID (default: the host name)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *lockURL, *id); err != nil {
		fmt.Fprintln(os.Stderr, "leader-election:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, lockURL, id string) error {
	var e *election.Elector
	e, err := election.New(ctx, election.Config{
		LockURL:  lockURL,
		ServerID: id,
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
