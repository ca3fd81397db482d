package lease_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func Example() {
	st := store.New(memstore.New())
	var mu sync.Mutex
	started := map[string]uint64{}
	all := make(chan struct{})
	c, err := lease.New(lease.Config{
		Store:    st,
		Mode:     lease.MemberLeases,
		ShardIDs: []string{"orders-0", "orders-1", "orders-2"},
		OwnerID:  "worker-7",
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnStartedLeading: func(ctx context.Context, shard string, term uint64) {
			mu.Lock()
			started[shard] = term
			if len(started) == 3 {
				close(all)
			}
			mu.Unlock()
			<-ctx.Done()
		},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(context.Background()); err != nil {
		panic(err)
	}
	<-all
	fmt.Println("held:", c.Held())
	fmt.Println("orders-1 term:", c.Term("orders-1"))
	if err := c.Stop(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("after Stop:", c.Held())
	// Output:
	// held: [orders-0 orders-1 orders-2]
	// orders-1 term: 1
	// after Stop: []
}
