package kv

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// Benchmarks of the machine at sizes from a config store to a large one,
// with 1 KiB values:
//
//	go test -run '^$' -bench . -benchtime 3x ./rsm/kv/
//
// Machines are built once per size and shared by the benchmarks.
var benchSizes = []int{1_000, 100_000, 1_000_000}

const benchValueSize = 1 << 10

var benchMachines struct {
	sync.Mutex
	m map[int]*Machine
}

// benchMachine returns a machine holding n keys "key/%010d" of the even
// numbers below 2n, each with a 1 KiB value.
func benchMachine(b *testing.B, n int) *Machine {
	b.Helper()
	benchMachines.Lock()
	defer benchMachines.Unlock()
	if m := benchMachines.m[n]; m != nil {
		compactBench(b, m)
		return m
	}
	m := New()
	value := bytes.Repeat([]byte{'v'}, benchValueSize)
	for i := range n {
		res := m.Apply(command{op: tagPut, key: benchKey(2 * i), value: value}.encode())
		if res[0] != tagPutResult {
			b.Fatalf("put: %x", res)
		}
	}
	if benchMachines.m == nil {
		benchMachines.m = map[int]*Machine{}
	}
	benchMachines.m[n] = m
	return m
}

func benchKey(i int) string { return fmt.Sprintf("key/%010d", i) }

// compactBench drops m's history (the versions that earlier benchmarks'
// overwrites and deletes left), so that each benchmark starts from the
// same state: the live keys.
func compactBench(b *testing.B, m *Machine) {
	b.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settle()
	if m.rev > m.compact {
		if err := m.compactTo(int64(m.rev)); err != nil {
			b.Fatal(err)
		}
		m.pub = nil
	}
}

// BenchmarkInsert puts new keys at random places in the index, in
// batches that are deleted again (untimed) so that the size stays n.
func BenchmarkInsert(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := benchMachine(b, n)
			r := rand.New(rand.NewPCG(uint64(n), 1))
			value := bytes.Repeat([]byte{'n'}, benchValueSize)
			const batch = 1000
			puts := make([][]byte, 0, batch)
			dels := make([][]byte, 0, batch)
			b.ResetTimer()
			b.StopTimer()
			for done := 0; done < b.N; {
				puts, dels = puts[:0], dels[:0]
				for range min(batch, b.N-done) {
					k := benchKey(2*r.IntN(n) + 1) // odd: a new key between two
					puts = append(puts, command{op: tagPut, key: k, value: value}.encode())
					dels = append(dels, command{op: tagDelete, key: k}.encode())
				}
				b.StartTimer()
				for _, c := range puts {
					m.Apply(c)
				}
				b.StopTimer()
				for _, c := range dels {
					m.Apply(c)
				}
				done += len(puts)
			}
			if m.Len() != n {
				b.Fatalf("%d keys after the deletes; want %d", m.Len(), n)
			}
		})
	}
}

// BenchmarkOverwrite puts new values under existing keys at random, as
// a workload of updates does and as a cold start replays it.
func BenchmarkOverwrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := benchMachine(b, n)
			r := rand.New(rand.NewPCG(uint64(n), 2))
			value := bytes.Repeat([]byte{'o'}, benchValueSize)
			const batch = 1000
			puts := make([][]byte, 0, batch)
			b.ResetTimer()
			b.StopTimer()
			for done := 0; done < b.N; {
				puts = puts[:0]
				for range min(batch, b.N-done) {
					puts = append(puts, command{op: tagPut, key: benchKey(2 * r.IntN(n)), value: value}.encode())
				}
				b.StartTimer()
				for _, c := range puts {
					m.Apply(c)
				}
				b.StopTimer()
				done += len(puts)
			}
			if m.Len() != n {
				b.Fatalf("%d keys after overwrites; want %d", m.Len(), n)
			}
		})
	}
}

// BenchmarkCapture is the time a snapshot holds the apply path: taking
// the view (serialization happens after, off that path).
func BenchmarkCapture(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := benchMachine(b, n)
			b.ResetTimer()
			for range b.N {
				captureNow(b, m)
			}
		})
	}
}

// captureNow does what must happen under the apply lock for a snapshot.
func captureNow(b *testing.B, m *Machine) io.WriterTo {
	return m.Capture()
}

// BenchmarkSnapshotWrite serializes a captured view to a writer that
// drops the bytes, and reports the heap it grows by at its peak, in bytes
// and as a fraction of the snapshot's size (about the live data).
func BenchmarkSnapshotWrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := benchMachine(b, n)
			var size int64
			b.ResetTimer()
			for range b.N {
				var err error
				if size, err = m.Capture().WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			peak := peakHeap(func(w io.Writer) {
				if _, err := m.Capture().WriteTo(w); err != nil {
					b.Fatal(err)
				}
			})
			b.SetBytes(size)
			b.ReportMetric(float64(peak), "peak-heap-B")
			b.ReportMetric(float64(peak)/float64(size), "peak-heap/data")
		})
	}
}

// BenchmarkSnapshotWhileApplying writes a captured view while the
// machine overwrites one random key per KiB written (about as many
// overwrites as keys, the heavy case), and reports the heap grown at the
// peak: the new values, the old ones the view still holds, and the tree
// nodes copied on write.
func BenchmarkSnapshotWhileApplying(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := benchMachine(b, n)
			r := rand.New(rand.NewPCG(uint64(n), 2))
			value := bytes.Repeat([]byte{'o'}, benchValueSize)
			var peak, size int64
			b.ResetTimer()
			for range b.N {
				// The machine keeps the values the puts below replace
				// until a compaction, as the view kept them before.
				compactBench(b, m)
				v := m.Capture()
				peak = peakHeapWith(func(w io.Writer) {
					var err error
					if size, err = v.WriteTo(w); err != nil {
						b.Fatal(err)
					}
				}, func(written int) {
					for range written >> 10 {
						m.Apply(command{op: tagPut, key: benchKey(2 * r.IntN(n)), value: value}.encode())
					}
				})
			}
			b.ReportMetric(float64(peak), "peak-heap-B")
			b.ReportMetric(float64(peak)/float64(size), "peak-heap/data")
		})
	}
}

// BenchmarkRestore reads a snapshot into an empty machine and reports the
// heap it grows by at its peak beyond the restored state.
func BenchmarkRestore(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var snap bytes.Buffer
			if err := benchMachine(b, n).Snapshot(&snap); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(snap.Len()))
			b.ResetTimer()
			for range b.N {
				if err := New().Restore(bytes.NewReader(snap.Bytes())); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			m := New()
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			peak := peakHeap(func(w io.Writer) {
				if err := m.Restore(io.TeeReader(bytes.NewReader(snap.Bytes()), w)); err != nil {
					b.Fatal(err)
				}
			})
			kept := stateHeap(b, m, &before)
			b.ReportMetric(float64(peak), "peak-heap-B")
			b.ReportMetric(float64(kept), "state-heap-B")
			b.ReportMetric(float64(peak-kept)/float64(snap.Len()), "transient-heap/data")
			runtime.KeepAlive(m)
		})
	}
}

// peakHeap runs f with a writer that samples the heap every 256 KiB written
// to it, and returns the largest growth of HeapInuse seen over its value
// before f (after a collection).
func peakHeap(f func(w io.Writer)) int64 { return peakHeapWith(f, nil) }

// peakHeapWith is peakHeap with a hook called after every write with the
// number of bytes written.
func peakHeapWith(f func(w io.Writer), onWrite func(int)) int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &heapSampler{base: int64(ms.HeapInuse), onWrite: onWrite}
	f(s)
	s.sample()
	return s.peak
}

type heapSampler struct {
	base, peak int64
	since      int
	onWrite    func(int)
}

func (s *heapSampler) Write(p []byte) (int, error) {
	if s.onWrite != nil {
		s.onWrite(len(p))
	}
	s.since += len(p)
	if s.since >= 256<<10 {
		s.since = 0
		s.sample()
	}
	return len(p), nil
}

func (s *heapSampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.peak = max(s.peak, int64(ms.HeapInuse)-s.base)
}

// BenchmarkColdStart replays a log of puts as a cold start does, each
// command prepared (by two goroutines, a run at a time) and then applied
// in log order with ApplyPrepared: n puts creating the keys in random
// order, then n overwriting keys at random. Bytes are the commands'.
func BenchmarkColdStart(b *testing.B) {
	for _, n := range benchSizes[1:] {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(uint64(n), 3))
			value := bytes.Repeat([]byte{'c'}, benchValueSize)
			cmds := make([][]byte, 0, 2*n)
			for _, i := range r.Perm(n) {
				cmds = append(cmds, command{op: tagPut, key: benchKey(i), value: value}.encode())
			}
			for range n {
				cmds = append(cmds, command{op: tagPut, key: benchKey(r.IntN(n)), value: value}.encode())
			}
			var size int64
			for _, c := range cmds {
				size += int64(len(c))
			}
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				coldStart(b, New(), cmds, nil)
			}
			b.StopTimer()
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			m := New()
			var peak int64
			coldStart(b, m, cmds, func() {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, int64(ms.HeapInuse)-int64(before.HeapInuse))
			})
			b.ReportMetric(float64(peak), "peak-heap-B")
			b.ReportMetric(float64(stateHeap(b, m, &before)), "state-heap-B")
			runtime.KeepAlive(cmds) // held across both readings: only the state differs
		})
	}
}

// coldStart prepares and applies cmds, puts of half as many keys, to m
// as a cold start does (replay), calling sample (if set) after each run.
func coldStart(b *testing.B, m *Machine, cmds [][]byte, sample func()) {
	replay(b, m, cmds, tagPutResult, sample)
	if m.Len() != len(cmds)/2 {
		b.Fatalf("%d keys; want %d", m.Len(), len(cmds)/2)
	}
}

// replay prepares (two at a time) and applies cmds to m in runs of 64Ki
// commands, as a cold start does, checking each answer's tag is want and
// calling sample (if set) after each run.
func replay(b *testing.B, m *Machine, cmds [][]byte, want byte, sample func()) {
	const run = 1 << 16
	prepared := make([]any, run)
	for lo := 0; lo < len(cmds); lo += run {
		part := cmds[lo:min(lo+run, len(cmds))]
		var wg sync.WaitGroup
		for half := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := half; i < len(part); i += 2 {
					prepared[i] = m.Prepare(part[i])
				}
			}()
		}
		wg.Wait()
		for i, c := range part {
			if res := m.ApplyPrepared(c, prepared[i]); res[0] != want {
				b.Fatalf("put: %x", res)
			}
		}
		clear(prepared)
		if sample != nil {
			sample()
		}
	}
	// The first read puts the last runs in the tree, as a node's first
	// read after a cold start does: until then a goroutine still inserting
	// one holds the machine, and a heap reading taken after replay would
	// count a machine the caller has dropped.
	m.Len()
}

// stateHeap reports the heap m's state holds, the growth of HeapInuse
// from before (read after a collection, with whatever else is then live
// still held), and fails b if it is less than the values of m's live keys:
// a reading that low counted something freed against the state.
func stateHeap(b *testing.B, m *Machine, before *runtime.MemStats) int64 {
	b.Helper()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapInuse) - int64(before.HeapInuse)
	if floor := int64(m.Len()) * benchValueSize; kept < floor {
		b.Fatalf("state heap %d B, less than its %d live values' %d B", kept, m.Len(), floor)
	}
	return kept
}
