package gcsstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/gcsstore"
)

// Open a store on a bucket with Application Default Credentials, then
// create a key only if it is absent. (Not run: it needs Cloud Storage, or an
// emulator named with ?endpoint=.)
func Example() {
	ctx := context.Background()
	s, err := store.Open(ctx, "gs://my-bucket/tenure")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	version, err := s.Put(ctx, "lock", []byte(`{"nonce":"a93e"}`), store.IfAbsent())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created generation", version)
}
