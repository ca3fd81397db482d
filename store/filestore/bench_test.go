package filestore

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/store"
)

// Benchmarks write to b.TempDir(), so they measure the file system that
// holds it, fsyncs included.

func benchStore(b *testing.B) *store.Store {
	s := store.New(newDriver(b, b.TempDir()))
	b.Cleanup(func() { s.Close() })
	return s
}

// benchValue is the size of a lease record.
func benchValue(i int) []byte {
	v := make([]byte, 256)
	copy(v, fmt.Sprintf(`{"leaderID":"node-%d","nonce":"%d"}`, i, i))
	return v
}

func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	if _, err := s.Put(ctx, "leases/shard-1", benchValue(0), store.IfAbsent()); err != nil {
		b.Fatal(err)
	}
	cpu := startCPU()
	for b.Loop() {
		if _, _, err := s.Get(ctx, "leases/shard-1"); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

func BenchmarkPutCreate(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	i := 0
	cpu := startCPU()
	for b.Loop() {
		if _, err := s.Put(ctx, fmt.Sprintf("log/%020d", i), benchValue(i), store.IfAbsent()); err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu.report(b)
}

func BenchmarkPutCAS(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	v, err := s.Put(ctx, "leases/shard-1", benchValue(0), store.IfAbsent())
	if err != nil {
		b.Fatal(err)
	}
	i := 1
	cpu := startCPU()
	for b.Loop() {
		if v, err = s.Put(ctx, "leases/shard-1", benchValue(i), store.IfMatch(v)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu.report(b)
}

// BenchmarkCASContended has 16 goroutines swap one key, each reading it
// again after a refusal, as contending leaders would. An operation is one
// successful swap.
func BenchmarkCASContended(b *testing.B) {
	const goroutines = 16
	s := benchStore(b)
	ctx := b.Context()
	if _, err := s.Put(ctx, "leases/shard-1", benchValue(0), store.IfAbsent()); err != nil {
		b.Fatal(err)
	}
	var wins, attempts, next atomic.Int64
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	cpu := startCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for {
				_, v, err := s.Get(ctx, "leases/shard-1")
				if err != nil {
					b.Error(err)
					return
				}
				attempts.Add(1)
				_, err = s.Put(ctx, "leases/shard-1", benchValue(int(next.Add(1))), store.IfMatch(v))
				if err == nil {
					wins.Add(1)
					break
				}
				if !errors.Is(err, store.ErrPreconditionFailed) {
					b.Error(err)
					return
				}
			}
		}
	})
	cpu.report(b)
	b.ReportMetric(float64(wins.Load())/b.Elapsed().Seconds(), "cas/s")
	b.ReportMetric(float64(attempts.Load())/float64(wins.Load()), "attempts/cas")
}

// BenchmarkPutCreateParallel has 8 goroutines create keys in one
// directory, as a leader's pipelined log writes do: their directory
// syncs are shared.
func BenchmarkPutCreateParallel(b *testing.B) {
	const goroutines = 8
	s := benchStore(b)
	ctx := b.Context()
	var next atomic.Int64
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	cpu := startCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1))
			if _, err := s.Put(ctx, fmt.Sprintf("log/%020d", i), benchValue(i), store.IfAbsent()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	cpu.report(b)
}

// BenchmarkDelete deletes log entries one by one, as truncation does
// (unconditionally); the keys are created before the timer starts.
func BenchmarkDelete(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	for i := range b.N {
		if _, err := s.Put(ctx, fmt.Sprintf("log/%020d", i), benchValue(i), store.IfAbsent()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu := startCPU()
	for i := range b.N {
		if err := s.Delete(ctx, fmt.Sprintf("log/%020d", i), store.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// BenchmarkPutCreateChurn creates log entries of 8 KiB one at a time while
// deleting the one created 1,000 before, as a leader writes its log while
// snapshots truncate it: on ext4 without a journal, each new file's inode
// is found past the ones freed in the last minutes. With spares, the next
// unnamed file opens while a create writes and syncs; without, on the
// create's path.
func BenchmarkPutCreateChurn(b *testing.B) {
	for _, spares := range []bool{true, false} {
		b.Run(fmt.Sprintf("spares=%v", spares), func(b *testing.B) {
			d := newDriver(b, b.TempDir())
			d.spares.closed = !spares
			logChurn(b, d)
		})
	}
}

// logChurn creates log entries of 8 KiB under log/ in d, one at a time,
// each followed by the delete of the one created 1,000 before.
func logChurn(b *testing.B, d *Store) {
	s := store.New(d)
	b.Cleanup(func() { s.Close() })
	ctx := b.Context()
	v := make([]byte, 8<<10)
	const window = 1000
	i := 0
	cpu := startCPU()
	for b.Loop() {
		if _, err := s.Put(ctx, fmt.Sprintf("log/%020d", i), v, store.IfAbsent()); err != nil {
			b.Fatal(err)
		}
		if i >= window {
			if err := s.Delete(ctx, fmt.Sprintf("log/%020d", i-window), store.Cond{}); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
	cpu.report(b)
}

// BenchmarkListAfterDeletes lists a prefix under which 2,000 keys, each in
// a directory of its own (as a snapshot's base parts are), were created
// and deleted, next to one key that stays: the listing's cost is that of
// what the deletes left.
func BenchmarkListAfterDeletes(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	const n = 2000
	for i := range n {
		key := fmt.Sprintf("g/snap/b%05d/00000", i)
		if _, err := s.Put(ctx, key, benchValue(i), store.IfAbsent()); err != nil {
			b.Fatal(err)
		}
		if err := s.Delete(ctx, key, store.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, "g/snap/manifest", benchValue(0), store.IfAbsent()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		items, err := s.List(ctx, "g/snap/", "", 1000)
		if err != nil || len(items) != 1 {
			b.Fatalf("list: %d items, %v", len(items), err)
		}
	}
}

// BenchmarkListSegments lists 20 values of 4 MiB, as a snapshot's
// collection lists its segments: with versions (List hashes each value
// it has not written itself) and without (ListKeys).
func BenchmarkListSegments(b *testing.B) {
	dir := b.TempDir()
	w := store.New(newDriver(b, dir))
	ctx := b.Context()
	value := make([]byte, 4<<20)
	for i := range 20 {
		if _, err := w.Put(ctx, fmt.Sprintf("g/snap/s%05d", i), value, store.IfAbsent()); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	// A Store that wrote none of them, as after a restart.
	s := store.New(newDriver(b, dir))
	b.Cleanup(func() { s.Close() })
	b.Run("List", func(b *testing.B) {
		for b.Loop() {
			if items, err := s.List(ctx, "g/snap/", "", 1000); err != nil || len(items) != 20 {
				b.Fatalf("list: %d, %v", len(items), err)
			}
		}
	})
	b.Run("ListKeys", func(b *testing.B) {
		for b.Loop() {
			if keys, err := s.ListKeys(ctx, "g/snap/", "", 1000); err != nil || len(keys) != 20 {
				b.Fatalf("list keys: %d, %v", len(keys), err)
			}
		}
	})
}

// BenchmarkLogChurn is BenchmarkPutCreateChurn's workload (8 KiB creates,
// each deleting the one made 1,000 before) with the log's prefix kept as
// files and as a pack.
func BenchmarkLogChurn(b *testing.B) {
	for _, c := range []struct{ packed, prealloc bool }{{false, false}, {true, false}, {true, true}} {
		b.Run(fmt.Sprintf("pack=%v/prealloc=%v", c.packed, c.prealloc), func(b *testing.B) {
			packed := c.packed
			defer func(prev bool) { packPrealloc = prev }(packPrealloc)
			packPrealloc = c.prealloc
			d := newDriver(b, b.TempDir())
			if packed {
				if ok, err := d.Pack(b.Context(), "log/"); !ok || err != nil {
					b.Fatalf("Pack: %v, %v", ok, err)
				}
			}
			logChurn(b, d)
		})
	}
}
