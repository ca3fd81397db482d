package snapshot

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/objtest"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

func TestChunkedSnapshotCorruptions(t *testing.T) {
	b := encodeCapturedT(t, testCaptured(strings.Repeat("v", 100)))
	for i, c := range objtest.Corruptions(b) {
		if _, err := Decode(c); err == nil {
			t.Errorf("corruption %d decoded", i)
		}
	}
	// Two chunks swapped: each checksum is right on its own bytes, the
	// running one is not.
	bb := encodeCapturedT(t, testCaptured(strings.Repeat("p", snapChunkMax)+strings.Repeat("q", snapChunkMax)))
	s, err := Decode(bb)
	if err != nil || len(s.parts[0]) < 2 {
		t.Fatalf("%v, %d chunks", err, len(s.parts[0]))
	}
	// Parts are slices of bb: their offsets follow from their capacities.
	first := cap(bb) - cap(s.parts[0][0]) - 8
	second := cap(bb) - cap(s.parts[0][1]) - 8
	swapped := slices.Concat(bb[:first], bb[second:second+8+len(s.parts[0][1])], bb[first:second], bb[second+8+len(s.parts[0][1]):])
	if _, err := Decode(swapped); err == nil {
		t.Error("swapped chunks decoded")
	}
}

func FuzzDecodeChunkedSnapshot(f *testing.F) {
	b := encodeCapturedT(f, testCaptured("x", strings.Repeat("y", 300)))
	f.Add(b)
	for _, c := range objtest.Corruptions(b) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		if record.CheckSnapshot(s.Snapshot) != nil || len(s.parts) != len(s.Machines) {
			t.Fatalf("decoded an invalid snapshot: %v", s.Snapshot)
		}
		// A re-encoding of what decoded decodes to the same thing.
		c := &Captured{Head: proto.Clone(s.Snapshot).(*rsmpb.Snapshot)}
		for i, m := range c.Head.Machines {
			data, err := io.ReadAll(s.MachineReader(i))
			if err != nil {
				t.Fatal(err)
			}
			if s.Snapshot.Machines[i].Data != nil {
				m.Data = nil
			}
			c.Views = append(c.Views, BytesView(data))
		}
		var buf bytes.Buffer
		if err := Encode(&buf, c); err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		for i := range s2.Machines {
			x, _ := io.ReadAll(s.MachineReader(i))
			y, _ := io.ReadAll(s2.MachineReader(i))
			if !bytes.Equal(x, y) {
				t.Fatalf("machine %d changed in the round trip", i)
			}
		}
	})
}

// TestChunkedMachineInChunks: a machine larger than a chunk is written in
// several chunks, each checked on its own, and read back whole.
func TestChunkedMachineInChunks(t *testing.T) {
	big := strings.Repeat("x", 3*snapChunkMax/2)
	s, err := Decode(encodeCapturedT(t, testCaptured(big, "", big+"!")))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.parts[0]) < 2 || len(s.parts[2]) < 2 {
		t.Errorf("machines of %d bytes came in %d and %d chunks", len(big), len(s.parts[0]), len(s.parts[2]))
	}
	for i, want := range []string{big, "", big + "!"} {
		if got, _ := io.ReadAll(s.MachineReader(i)); string(got) != want {
			t.Errorf("machine %d: %d bytes, want %d", i, len(got), len(want))
		}
	}
}
