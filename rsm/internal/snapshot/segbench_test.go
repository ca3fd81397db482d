package snapshot

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// BenchmarkDecodeSegment decodes a full segment (benchSegmentEntries).
func BenchmarkDecodeSegment(b *testing.B) {
	es := benchSegmentEntries()
	seg, err := encodeSegment(es)
	if err != nil {
		b.Fatal(err)
	}
	last := uint64(len(es))
	for _, borrow := range []bool{false, true} {
		for _, workers := range []int{1, decodeWorkers()} {
			b.Run(fmt.Sprintf("borrow=%v/workers=%d", borrow, workers), func(b *testing.B) {
				b.SetBytes(int64(len(seg)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := decodeSegmentPar(seg, "kv", 1, last, workers, borrow); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchSegmentEntries are a full segment's entries (segmentMax bytes) as
// a kv leader writes them under eight writers: seven session commands of a
// 1 KiB value each.
func benchSegmentEntries() []*rsmpb.Entry {
	value := bytes.Repeat([]byte("v"), 1024)
	var es []*rsmpb.Entry
	size := 0
	for i := uint64(1); size < segmentMax-16<<10; i++ {
		e := &rsmpb.Entry{Index: i, Term: 3, Writer: "node-a", Nonce: []byte("0123456789ab"), Commit: i - 1, Group: "kv"}
		for k := uint64(0); k < 7; k++ {
			e.Commands = append(e.Commands, &rsmpb.Command{Session: k + 1, Seq: i, Machine: "kv", Data: value})
		}
		es = append(es, e)
		size += 4 + record.Header + proto.Size(e)
	}
	return es
}

// BenchmarkEncodeSegment encodes the segment BenchmarkDecodeSegment
// decodes.
func BenchmarkEncodeSegment(b *testing.B) {
	es := benchSegmentEntries()
	b.ReportAllocs()
	for b.Loop() {
		seg, err := encodeSegment(es)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(seg)))
	}
}

// BenchmarkWriteBaseParts writes 64 MiB to a partWriter of full-sized
// parts in the chunks a base is encoded in, its buffer grown from nothing
// or started at the size of a previous base of a part or more
// (writeBase): its allocations are the buffers (B/op).
func BenchmarkWriteBaseParts(b *testing.B) {
	chunk := bytes.Repeat([]byte("c"), snapChunkMax)
	for _, prev := range []int{0, basePartMax} {
		b.Run(fmt.Sprintf("prev=%d", prev), func(b *testing.B) {
			b.SetBytes(64 << 20)
			b.ReportAllocs()
			for b.Loop() {
				pw := newPartWriter(func(int, []byte) error { return nil }, basePartMax, uint64(prev))
				for range (64 << 20) / snapChunkMax {
					if _, err := pw.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				if err := pw.close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
