package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/filestore"
)

func Example() {
	dir, err := os.MkdirTemp("", "tenure-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	s, err := store.Open(ctx, "file://"+dir) // dir is absolute: file:///tmp/...
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	v1, err := s.Put(ctx, "leases/shard-1", []byte(`{"holder":"a","nonce":"1"}`), store.IfAbsent())
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.Put(ctx, "leases/shard-1", []byte(`{"holder":"b","nonce":"2"}`), store.IfAbsent())
	fmt.Println("second create refused:", errors.Is(err, store.ErrPreconditionFailed))

	_, err = s.Put(ctx, "leases/shard-1", []byte(`{"holder":"b","nonce":"3"}`), store.IfMatch(v1))
	fmt.Println("swap on the current version:", err)
	_, err = s.Put(ctx, "leases/shard-1", []byte(`{"holder":"c","nonce":"4"}`), store.IfMatch(v1))
	fmt.Println("swap on a stale version refused:", errors.Is(err, store.ErrPreconditionFailed))

	items, err := s.List(ctx, "leases/", "", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, it := range items {
		fmt.Println(it.Key, it.Size)
	}
	// Output:
	// second create refused: true
	// swap on the current version: <nil>
	// swap on a stale version refused: true
	// leases/shard-1 26
}
