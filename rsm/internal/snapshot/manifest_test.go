package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/objtest"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/memstore"
)

func testManifest() *Manifest {
	return &Manifest{Group: "g", Nonce: []byte{1, 2}, Writer: "a", WriterTerm: 3, End: 130,
		Base:     BaseRef{Index: 100, Term: 2, Nonce: "0a0b", Parts: 3, Bytes: 1 << 20},
		SegBytes: 999,
		Runs: []SegRun{{Term: 2, Nonce: "01", Lasts: []uint64{110, 120}},
			{Term: 3, Nonce: "02", Lasts: []uint64{130}}}}
}

func TestManifestRoundTrip(t *testing.T) {
	m := testManifest()
	got, err := DecodeManifest(encodeManifest(m))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encodeManifest(got), encodeManifest(m)) || got.End != 130 || len(got.Runs) != 2 {
		t.Fatalf("round trip: %+v", got)
	}
	// Segments of equal length take a few bytes, however many.
	big := testManifest()
	big.Runs = []SegRun{{Term: 2, Nonce: "01"}}
	for i := uint64(1); i <= 10000; i++ {
		big.Runs[0].Lasts = append(big.Runs[0].Lasts, 100+i*100)
	}
	big.End = 100 + 10000*100
	if b := encodeManifest(big); len(b) > 100 {
		t.Fatalf("a manifest of 10000 equal segments takes %d bytes", len(b))
	} else if got, err := DecodeManifest(b); err != nil || len(got.segments()) != 10000 {
		t.Fatalf("%v", err)
	}
	segs := got.segments()
	if len(segs) != 3 || segs[0].first != 101 || segs[1].first != 111 || segs[2].first != 121 || segs[2].last != 130 {
		t.Fatalf("segments %+v", segs)
	}
	for _, k := range append(got.BaseKeys(), segs[0].key, segs[2].key) {
		if term, ok := snapObjectTerm("g", k); !ok || (term != 2 && term != 3) {
			t.Fatalf("%s: term %d %v", k, term, ok)
		}
	}
	if _, ok := snapObjectTerm("g", "g/snap/x"); ok {
		t.Fatal("a name this package does not write has a term")
	}
}

func TestManifestRejects(t *testing.T) {
	for name, mut := range map[string]func(m *Manifest){
		"no nonce":            func(m *Manifest) { m.Nonce = nil },
		"no base":             func(m *Manifest) { m.Base.Index = 0 },
		"no parts":            func(m *Manifest) { m.Base.Parts = 0 },
		"end before the base": func(m *Manifest) { m.End = 99; m.Runs = nil },
		"segments short":      func(m *Manifest) { m.End = 140 },
		"segments past end":   func(m *Manifest) { m.Runs[1].Lasts = []uint64{140} },
		"empty run":           func(m *Manifest) { m.Runs[1].Lasts = nil; m.End = 120 },
		"bad nonce in a name": func(m *Manifest) { m.Base.Nonce = "../x" },
		"bad run nonce":       func(m *Manifest) { m.Runs[0].Nonce = "XY" },
		"segments backwards":  func(m *Manifest) { m.Runs[0].Lasts = []uint64{120, 110}; m.End = 110; m.Runs = m.Runs[:1] },
		"too many segments": func(m *Manifest) {
			m.Runs = []SegRun{{Term: 2, Nonce: "01"}}
			for i := uint64(1); i <= maxManifestSegments+1; i++ {
				m.Runs[0].Lasts = append(m.Runs[0].Lasts, 100+i)
			}
			m.End = 100 + maxManifestSegments + 1
		},
	} {
		m := testManifest()
		mut(m)
		if _, err := DecodeManifest(encodeManifest(m)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	b := encodeManifest(testManifest())
	if _, err := DecodeManifest(append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1)); err == nil {
		t.Error("a damaged manifest decoded")
	}
}

func testEntries(group string, first, last uint64) []*rsmpb.Entry {
	var out []*rsmpb.Entry
	for i := first; i <= last; i++ {
		out = append(out, &rsmpb.Entry{Index: i, Term: 2, Writer: "a", Nonce: []byte{byte(i), 1}, Group: group,
			Commands: []*rsmpb.Command{{Machine: "c", Data: []byte("x"), Client: "cl", Seq: i}}})
	}
	return out
}

func TestSegmentRoundTrip(t *testing.T) {
	es := testEntries("g", 11, 15)
	b, err := encodeSegment(es)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSegment(b, "g", 11, 15)
	if err != nil || len(got) != 5 || got[4].Index != 15 {
		t.Fatalf("%v %v", got, err)
	}
	for name, c := range map[string]struct {
		b           []byte
		group       string
		first, last uint64
	}{
		"short range":   {b, "g", 11, 14},
		"long range":    {b, "g", 11, 16},
		"shifted":       {b, "g", 12, 16},
		"other group":   {b, "h", 11, 15},
		"truncated":     {b[:len(b)-3], "g", 11, 15},
		"damaged entry": {append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1), "g", 11, 15},
	} {
		if _, err := decodeSegment(c.b, c.group, c.first, c.last); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestSegmentDecodedByWorkers: decoding a segment's entries in several
// goroutines gives the entries one goroutine gives, in order, and a
// damaged segment the error of its first damaged entry, whatever the
// number of workers.
func TestSegmentDecodedByWorkers(t *testing.T) {
	es := testEntries("g", 11, 40)
	b, err := encodeSegment(es)
	if err != nil {
		t.Fatal(err)
	}
	// The offsets of entries 17 and 33's last byte: each entry is framed
	// with its own CRC-32C, so flipping a byte damages that entry only.
	frames, err := splitSegment(b, 11, 40)
	if err != nil {
		t.Fatal(err)
	}
	end := func(i uint64) int {
		f := frames[i-11] // a part of b: its offset is what their capacities differ by
		return cap(b) - cap(f) + len(f) - 1
	}
	damaged := bytes.Clone(b)
	damaged[end(33)] ^= 1
	damaged[end(17)] ^= 1
	onlyLate := bytes.Clone(b)
	onlyLate[end(33)] ^= 1
	for _, borrow := range []bool{false, true} {
		for workers := 1; workers <= 5; workers++ {
			got, err := decodeSegmentPar(b, "g", 11, 40, workers, borrow)
			if err != nil || len(got) != len(es) {
				t.Fatalf("%d workers, borrow %v: %d entries, %v", workers, borrow, len(got), err)
			}
			for k, e := range got {
				if !proto.Equal(e, es[k]) {
					t.Fatalf("%d workers, borrow %v: entry %d is %v, want %v", workers, borrow, k, e, es[k])
				}
			}
			if _, err := decodeSegmentPar(damaged, "g", 11, 40, workers, borrow); err == nil || !strings.Contains(err.Error(), "segment entry 17:") {
				t.Fatalf("%d workers, borrow %v, entries 17 and 33 damaged: %v, want entry 17's error", workers, borrow, err)
			}
			if _, err := decodeSegmentPar(onlyLate, "g", 11, 40, workers, borrow); err == nil || !strings.Contains(err.Error(), "segment entry 33:") {
				t.Fatalf("%d workers, borrow %v, entry 33 damaged: %v, want its error", workers, borrow, err)
			}
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	b := encodeManifest(testManifest())
	f.Add(b)
	for _, c := range objtest.Corruptions(b) {
		f.Add(c)
	}
	f.Add(encodeManifest(&Manifest{Nonce: []byte{1}, End: 1, Base: BaseRef{Index: 1, Nonce: "0", Parts: 1}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		// Every reference it makes is well formed and in order, and it
		// encodes back to the same bytes.
		prev := m.Base.Index
		for _, s := range m.segments() {
			if s.first != prev+1 || s.last < s.first || s.last > m.End {
				t.Fatalf("segment %+v after %d, end %d", s, prev, m.End)
			}
			prev = s.last
		}
		if prev != m.End {
			t.Fatalf("segments end at %d, manifest at %d", prev, m.End)
		}
		for k := range m.Objects() {
			if _, ok := snapObjectTerm(m.Group, k); !ok {
				t.Fatalf("referenced object %q has no term", k)
			}
		}
		if !bytes.Equal(encodeManifest(m), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeSegment(f *testing.F) {
	b, err := encodeSegment(testEntries("g", 5, 7))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, uint64(5), uint64(7))
	for _, c := range objtest.Corruptions(b) {
		f.Add(c, uint64(5), uint64(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, first, last uint64) {
		es, err := decodeSegment(b, "g", first, last)
		par, perr := decodeSegmentPar(b, "g", first, last, 3, false)
		if (err == nil) != (perr == nil) || err != nil && err.Error() != perr.Error() || len(es) != len(par) {
			t.Fatalf("one goroutine: %d entries, %v; three: %d, %v", len(es), err, len(par), perr)
		}
		// Lent commands (a Borrower's): the same entries, the same error.
		lent, lerr := decodeSegmentPar(bytes.Clone(b), "g", first, last, 3, true)
		if (err == nil) != (lerr == nil) || err != nil && err.Error() != lerr.Error() || len(es) != len(lent) {
			t.Fatalf("copied: %d entries, %v; lent: %d, %v", len(es), err, len(lent), lerr)
		}
		for i := range lent {
			if !proto.Equal(es[i], lent[i]) {
				t.Fatalf("entry %d copied %v, lent %v", i, es[i], lent[i])
			}
		}
		if err != nil {
			return
		}
		if uint64(len(es)) != last-first+1 {
			t.Fatalf("%d entries for %d..%d", len(es), first, last)
		}
		for i, e := range es {
			if e.Index != first+uint64(i) || (e.Group != "" && e.Group != "g") {
				t.Fatalf("entry %d: index %d group %q", i, e.Index, e.Group)
			}
		}
		again, err := encodeSegment(es)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeSegment(again, "g", first, last); err != nil {
			t.Fatalf("re-encoded segment does not decode: %v", err)
		}
	})
}

// FuzzChunkedStream: the streaming decoder of a base never hands a
// machine a byte of a chunk that fails its checksum, and agrees with the
// whole-object decoder on what is valid.
func FuzzChunkedStream(f *testing.F) {
	b := encodeCapturedT(f, testCaptured("x", strings.Repeat("y", 300)))
	f.Add(b)
	for _, c := range objtest.Corruptions(b) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > len(record.Magic) && b[len(record.Magic)] != record.KindChunked {
			return // the v1 format is not streamed
		}
		whole, werr := Decode(b)
		if werr == nil {
			for _, chunks := range whole.parts {
				for _, c := range chunks {
					if len(c) > snapChunkMax {
						return // the writer's bound, which only the stream enforces
					}
				}
			}
		}
		// As one stream, and as a base cut in parts, whose chunks are
		// read in place where a part holds them whole.
		size := 1 + len(b)%97
		if len(b) > 0 {
			size += int(b[len(b)-1]) * 16
		}
		pr, closeParts := partsOf(t, b, size)
		defer closeParts()
		for _, r := range []io.Reader{bytes.NewReader(b), pr} {
			got, err := readChunked(r)
			if (err == nil) != (werr == nil) {
				t.Fatalf("stream (%T): %v; whole object: %v", r, err, werr)
			}
			if err != nil {
				continue
			}
			for i := range got {
				want, _ := io.ReadAll(whole.MachineReader(i))
				if !bytes.Equal(got[i], want) {
					t.Fatalf("machine %d differs (%T)", i, r)
				}
			}
		}
	})
}

// readChunked reads every machine's bytes from a chunked stream.
func readChunked(r io.Reader) ([][]byte, error) {
	cs, err := openChunked(r)
	if err != nil {
		return nil, err
	}
	var got [][]byte
	for i := range cs.Head.Machines {
		mr, err := cs.Machine(i)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(mr)
		if err != nil {
			return nil, err
		}
		got = append(got, data)
	}
	return got, cs.Finish()
}

// partsOf stores b as parts of size bytes and returns the loader's reader
// of their concatenation, and a function that stops it.
func partsOf(t testing.TB, b []byte, size int) (*partsReader, func()) {
	mem := memstore.New()
	var keys []string
	for i := 0; i*size < len(b); i++ {
		k := fmt.Sprintf("g/snap/b/%05d", i)
		if _, err := mem.Put(context.Background(), k, b[i*size:min(len(b), (i+1)*size)], driver.Cond{Kind: driver.IfAbsent}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	gs := newTestStore(store.New(mem), Options{})
	or := gs.openObjects(context.Background(), keys, testBound, true, 0)
	return &partsReader{or: or}, or.close
}

// TestChunksReadInPlaceAreChecked: a base whose chunks lie whole inside
// its parts (read in place, not copied) restores the state, and a byte
// changed inside such a chunk is refused by its checksum.
func TestChunksReadInPlaceAreChecked(t *testing.T) {
	b := encodeCapturedT(t, testCaptured(strings.Repeat("x", 5*snapChunkMax), "y"))
	whole, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	pr, closeParts := partsOf(t, b, 3*snapChunkMax)
	defer closeParts()
	got, err := readChunked(pr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if want, _ := io.ReadAll(whole.MachineReader(i)); !bytes.Equal(got[i], want) {
			t.Fatalf("machine %d differs", i)
		}
	}
	// A byte in the middle of the second chunk, inside the first part.
	at := bytes.Index(b, []byte("xxxx")) + snapChunkMax + 8 + snapChunkMax/2
	bad := bytes.Clone(b)
	bad[at] = 'z'
	pr, closeParts = partsOf(t, bad, 3*snapChunkMax)
	defer closeParts()
	if _, err := readChunked(pr); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("a changed byte inside a part: %v; want a checksum mismatch", err)
	}
}

// TestPartWriterCuts: whatever the sizes written and the buffer it starts
// with, a partWriter hands out the bytes in order, in parts of max bytes
// but the last, and its buffer never grows past a part.
func TestPartWriterCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 200 {
		max := 1 + rng.IntN(300)
		data := make([]byte, rng.IntN(2000))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		var parts [][]byte
		var prev uint64 // odd rounds: a previous base smaller or larger than a part
		if round%2 == 1 {
			prev = uint64(1 + rng.IntN(2*max))
		}
		pw := newPartWriter(func(i int, b []byte) error {
			if i != len(parts) {
				t.Fatalf("round %d: part %d handed out after %d parts", round, i, len(parts))
			}
			parts = append(parts, bytes.Clone(b))
			return nil
		}, max, prev)
		for rest := data; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(700))
			if n, err := pw.Write(rest[:k]); n != k || err != nil {
				t.Fatalf("round %d: wrote %d of %d: %v", round, n, k, err)
			}
			rest = rest[k:]
			if cap(pw.buf) > max {
				t.Fatalf("round %d: buffer of %d bytes for parts of %d", round, cap(pw.buf), max)
			}
		}
		if err := pw.close(); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, data) {
			t.Fatalf("round %d: parts join to %d bytes, want the %d written", round, len(got), len(data))
		}
		for i, p := range parts {
			if len(p) > max || i < len(parts)-1 && len(p) != max {
				t.Fatalf("round %d: part %d of %d bytes (max %d, %d parts)", round, i, len(p), max, len(parts))
			}
		}
		if pw.total != uint64(len(data)) || pw.parts != len(parts) {
			t.Fatalf("round %d: counted %d bytes in %d parts", round, pw.total, pw.parts)
		}
	}
}
