package etcdstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	_ "github.com/tenure-io/tenure/store/etcdstore"
)

// Open a store on an etcd cluster, write a record, and wait for the next
// change to it. (Not run: it needs a server.)
func Example() {
	ctx := context.Background()
	s, err := store.Open(ctx, "etcd://127.0.0.1:2379/tenure/example")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	v, err := s.Put(ctx, "leader", []byte(`{"leaderID":"a","nonce":"5f1c"}`), store.IfAbsent())
	if err != nil {
		log.Fatal(err)
	}
	w := s.Driver().(driver.Watcher)
	events, err := w.Watch(ctx, "leader", v)
	if err != nil {
		log.Fatal(err)
	}
	for e := range events {
		fmt.Printf("version %s deleted=%v: %s\n", e.Version, e.Deleted, e.Data)
	}
	// The watch ended: read the key again (and watch from its version).
}
