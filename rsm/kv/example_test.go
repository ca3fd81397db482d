package kv_test

import (
	"context"
	"fmt"

	"github.com/tenure-io/tenure/rsm/kv"
)

// local applies to one machine in this process. In a real program the
// Submitter is the *rsm.Node returned by Host.Join with kv.New() registered
// as kv.MachineName; the client code is the same.
type local struct{ m *kv.Machine }

func (l local) Command(_ context.Context, _ string, cmd []byte) ([]byte, error) {
	return l.m.Apply(cmd), nil
}

func (l local) Read(_ context.Context, _ string, q []byte) ([]byte, error) { return l.m.Query(q) }

func Example() {
	ctx := context.Background()
	c := kv.NewClient(local{kv.New()})

	rev, _ := c.Put(ctx, "config/mode", []byte("blue"))
	fmt.Println("put at revision", rev)

	// Compare-and-swap on the revision read: only one writer wins.
	ok, cur, _ := c.CAS(ctx, "config/mode", rev, []byte("green"))
	fmt.Println("swapped:", ok, "now at", cur)
	ok, cur, _ = c.CAS(ctx, "config/mode", rev, []byte("red"))
	fmt.Println("swapped:", ok, "now at", cur)

	item, _ := c.Get(ctx, "config/mode")
	fmt.Printf("%s = %s (created at %d, modified at %d)\n", item.Key, item.Value, item.CreateRevision, item.ModRevision)

	_, _ = c.Put(ctx, "config/size", []byte("10"))
	page, _ := c.List(ctx, "config/", kv.ListOptions{Limit: 10})
	for _, it := range page.Items {
		fmt.Printf("%s=%s\n", it.Key, it.Value)
	}
	// Output:
	// put at revision 1
	// swapped: true now at 2
	// swapped: false now at 2
	// config/mode = green (created at 1, modified at 2)
	// config/mode=green
	// config/size=10
}
