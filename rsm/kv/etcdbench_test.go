package kv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The machine's work on etcd's messages: decoding a Put, encoding its
// answer and a Range's.

func etcdPuts(b *testing.B, n int, seed uint64, perm bool) [][]byte {
	r := rand.New(rand.NewPCG(uint64(n), seed))
	value := bytes.Repeat([]byte{'e'}, benchValueSize)
	var cmds [][]byte
	add := func(i int) {
		c, err := PutCommand(&pb.PutRequest{Key: []byte(benchKey(i)), Value: value})
		if err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	if perm {
		for _, i := range r.Perm(n) {
			add(i)
		}
	}
	for range n {
		add(r.IntN(n))
	}
	return cmds
}

// BenchmarkEtcdPut applies etcd Puts overwriting keys at random.
func BenchmarkEtcdPut(b *testing.B) {
	const n = 100_000
	m := New()
	for _, c := range etcdPuts(b, n, 4, true)[:n] {
		m.Apply(c)
	}
	cmds := etcdPuts(b, n, 5, false)
	b.ResetTimer()
	for i := range b.N {
		if res := m.Apply(cmds[i%n]); res[0] != tagEtcdPutResult {
			b.Fatalf("put: %x", res)
		}
	}
}

// BenchmarkEtcdColdStart is BenchmarkColdStart with etcd Puts: n creating
// the keys in random order, n overwriting them at random.
func BenchmarkEtcdColdStart(b *testing.B) {
	const n = 100_000
	cmds := etcdPuts(b, n, 6, true)
	var size int64
	for _, c := range cmds {
		size += int64(len(c))
	}
	b.SetBytes(size)
	apply := func(m *Machine, sample func()) { replay(b, m, cmds, tagEtcdPutResult, sample) }
	b.ResetTimer()
	for range b.N {
		apply(New(), nil)
	}
	b.StopTimer()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	m := New()
	var peak int64
	apply(m, func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, int64(ms.HeapInuse)-int64(before.HeapInuse))
	})
	b.ReportMetric(float64(peak), "peak-heap-B")
	b.ReportMetric(float64(stateHeap(b, m, &before)), "state-heap-B")
	runtime.KeepAlive(cmds) // held across both readings: only the state differs
}

// BenchmarkEtcdRange answers Ranges of 100 keys through Query, and
// decodes the answers as a server does.
func BenchmarkEtcdRange(b *testing.B) {
	const n = 100_000
	m := New()
	for _, c := range etcdPuts(b, n, 7, true)[:n] {
		m.Apply(c)
	}
	r := rand.New(rand.NewPCG(n, 8))
	qs := make([][]byte, 1000)
	for i := range qs {
		q, err := RangeQuery(&pb.RangeRequest{Key: []byte(benchKey(r.IntN(n))), RangeEnd: []byte("key0"), Limit: 100})
		if err != nil {
			b.Fatal(err)
		}
		qs[i] = q
	}
	b.ResetTimer()
	for i := range b.N {
		res, err := m.Query(qs[i%len(qs)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeResult(res); err != nil {
			b.Fatal(fmt.Errorf("range: %w", err))
		}
	}
}
