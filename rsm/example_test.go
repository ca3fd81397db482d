package rsm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
)

// One node of a group on an in-memory store, with the bundled key-value
// machine. More nodes join the same group on the same store, each with its
// own host; any of them accepts commands and reads.
func Example() {
	ctx := context.Background()
	st, err := store.Open(ctx, "mem://example") // file:///var/lib/tenure, s3://bucket/prefix, ...
	if err != nil {
		panic(err)
	}
	defer st.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	host, err := rsm.NewHost(ctx, st, rsm.HostConfig{
		ID: "node-1", Addr: lis.Addr().String(), Listener: lis,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	defer host.Close()
	node, err := host.Join(ctx, "orders", map[string]rsm.StateMachine{kv.MachineName: kv.New()},
		rsm.Options{FlushInterval: 5 * time.Millisecond}) // S2C's default is 2 s
	if err != nil {
		panic(err)
	}

	c := kv.NewClient(node) // a *rsm.Node submits commands and linearizable reads
	rev, err := c.Put(ctx, "order/42", []byte("paid"))
	if err != nil {
		panic(err)
	}
	item, err := c.Get(ctx, "order/42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s = %s at revision %d\n", item.Key, item.Value, rev)
	s := node.Status()
	fmt.Println(s.Role, "of term", s.Term)
	// Output:
	// order/42 = paid at revision 1
	// LEADER of term 1
}
