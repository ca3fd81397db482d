package gcsstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/api/storage/v1"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/gcsstore"
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

// Build the Cloud Storage service yourself, here to send requests through
// an HTTP client of your own, and give it to New. (Not run: it needs an
// emulator at the endpoint.)
func ExampleNew() {
	ctx := context.Background()
	endpoint := "http://127.0.0.1:4443"
	opts := append(gcsstore.ClientOptions(endpoint), option.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	service, err := storage.NewService(ctx, opts...)
	if err != nil {
		log.Fatal(err)
	}
	d, err := gcsstore.New(service, "my-bucket", "tenure", gcsstore.Options{Endpoint: endpoint})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.CheckBucket(ctx); err != nil {
		log.Fatal(err)
	}
	s := store.New(d)
	defer s.Close()
	version, err := s.Put(ctx, "lock", []byte(`{"nonce":"a93e"}`), store.IfAbsent())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created generation", version)
}
