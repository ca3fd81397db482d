package memstore_test

import (
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/drivertest"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, func(t *testing.T) *store.Store {
		return store.New(memstore.New())
	}, drivertest.Options{
		LostAnswer: func(t *testing.T) (*store.Store, func()) {
			fs := faultstore.New(memstore.New())
			return store.New(fs), func() { fs.AmbiguousNext(faultstore.Writes, 1) }
		},
	})
}

func TestNamedStoresAreShared(t *testing.T) {
	ctx := t.Context()
	a, err := store.Open(ctx, "mem://shared-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(ctx, "mem://shared-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := store.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.Put(ctx, "k", []byte("x"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, gv, err := b.Get(ctx, "k"); err != nil || gv != v {
		t.Fatalf("second opener of the same name: %q, %v; want version %q", gv, err, v)
	}
	if _, _, err := fresh.Get(ctx, "k"); err == nil {
		t.Fatal("mem:// without a name shares objects with a named store")
	}
}

func TestVersionsAreContentHashes(t *testing.T) {
	ctx := t.Context()
	s := store.New(memstore.New())
	v1, err := s.Put(ctx, "a", []byte("same"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Put(ctx, "b", []byte("same"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	if v1 != v2 || v1 != memstore.Version([]byte("same")) {
		t.Fatalf("versions of equal bytes differ: %q %q", v1, v2)
	}
	// ABA: writing the old bytes back restores the old version, so a stale
	// compare-and-swap succeeds, exactly as on S3. Records carry nonces to
	// avoid this.
	v3, err := s.Put(ctx, "a", []byte("other"), store.IfMatch(v1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a", []byte("same"), store.IfMatch(v3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a", []byte("third"), store.IfMatch(v1)); err != nil {
		t.Fatalf("ABA swap on a content-hash version should succeed: %v", err)
	}
}
