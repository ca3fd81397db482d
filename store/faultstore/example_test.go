package faultstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

// Counting the requests a piece of code makes, which is how tenure quotes
// the cost of a protocol.
func Example() {
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	s := store.New(fs)
	defer s.Close()

	v, _ := s.Put(ctx, "lock", []byte(`{"term":1}`), store.IfAbsent())
	_, _ = s.Put(ctx, "lock", []byte(`{"term":1,"other":true}`), store.IfAbsent()) // refused: it exists
	_, _ = s.Put(ctx, "lock", []byte(`{"term":2}`), store.IfMatch(v))
	_, _, _ = s.Get(ctx, "lock")
	_, _, _ = s.Get(ctx, "missing")

	counts := fs.Counts()
	fmt.Print(counts)
	fmt.Println("writes:", counts.OpTotal(faultstore.Writes))
	fmt.Println("refused:", counts.ResultTotal(faultstore.PreconditionFailed))
	// Output:
	// get ok=1 not_found=1
	// put-create ok=1 precondition_failed=1
	// put-cas ok=1
	// total 5
	// writes: 3
	// refused: 1
}

// Injected errors are classified by the portable layer like a real store's.
func ExampleStore_FailNext() {
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	s := store.New(fs)
	defer s.Close()

	fs.FailNext(faultstore.OpPutCreate, driver.Throttled, 1)
	_, err := s.Put(ctx, "lock", []byte("a"), store.IfAbsent())
	fmt.Println(err)
	fmt.Println(errors.Is(err, store.ErrThrottled), store.IsRetryable(err))

	_, err = s.Put(ctx, "lock", []byte("a"), store.IfAbsent())
	fmt.Println(err)
	// Output:
	// store: put "lock": throttled: faultstore: injected throttled error on put-create
	// true true
	// <nil>
}

// Ambiguous success: the write lands, the caller is told it failed, and
// store.PutResolved finds out that it landed.
func ExampleStore_AmbiguousNext() {
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	s := store.New(fs)
	defer s.Close()

	fs.AmbiguousNext(faultstore.OpPutCreate, 1)
	v, err := store.PutResolved(ctx, s, "lock", []byte(`{"nonce":"a93e"}`), store.IfAbsent(), store.ResolveOptions{})
	fmt.Println(v == memstore.Version([]byte(`{"nonce":"a93e"}`)), err)
	fmt.Print(fs.Counts())
	// Output:
	// true <nil>
	// get ok=1
	// put-create transient=1
	// total 2
}
