package rsm

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// encodeCapturedT captures r and encodes it as the store would hold it.
func encodeCapturedT(t testing.TB, r *replica) []byte {
	t.Helper()
	c, err := r.capture()
	if err != nil {
		t.Fatal(err)
	}
	c.head.Nonce, c.head.Group = []byte("0123456789ab"), "g"
	var buf bytes.Buffer
	if err := encodeCaptured(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSnapshotFormatV1StillLoads: a snapshot written by the version that
// put every machine's bytes into one protobuf (testdata/snapshot-v1)
// loads into the same state.
func TestSnapshotFormatV1StillLoads(t *testing.T) {
	b, err := os.ReadFile("testdata/snapshot-v1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeStoredSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	r, tapes := newTapeReplica(t, 8, "a", "b")
	if err := r.restoreStored(s); err != nil {
		t.Fatal(err)
	}
	if got := tapes["a"].strings(); !slices.Equal(got, []string{"x", "z"}) {
		t.Errorf("machine a holds %q", got)
	}
	if got := tapes["b"].strings(); !slices.Equal(got, []string{"y"}) {
		t.Errorf("machine b holds %q", got)
	}
	if r.applied != 4 || r.maxTerm != 1 || r.lastSession != 2 || len(r.sessions) != 2 || r.settings == nil {
		t.Errorf("restored applied %d, max term %d, last session %d, %d sessions, settings %v", r.applied, r.maxTerm, r.lastSession, len(r.sessions), r.settings)
	}
	// It decodes to what the reference replica's snapshot holds.
	ref, _ := newSessionReplica(t, 8, 2, "a", "b")
	ref.apply(mkEntry(4, 1, sCmd(1, 1, "a", "x"), sCmd(2, 1, "b", "y"), sCmd(1, 2, "a", "z")))
	if !bytes.Equal(snapBytes(t, r), snapBytes(t, ref)) {
		t.Error("the state restored from the v1 object differs from the state that wrote it")
	}
}

// TestChunkedSnapshotRoundTrip: the chunked format restores the state it
// captured, with machines larger than a chunk and empty ones.
func TestChunkedSnapshotRoundTrip(t *testing.T) {
	a, tapes := newSessionReplica(t, 8, 2, "a", "b", "c")
	big := strings.Repeat("x", 3*snapChunkMax/2)
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", big), sCmd(2, 1, "b", "y"), sCmd(1, 2, "a", big+"!")))
	_ = tapes
	b := encodeCapturedT(t, a)
	s, err := decodeStoredSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.parts[0]) < 3 {
		t.Errorf("machine a of %d bytes came in %d chunks", 3*snapChunkMax, len(s.parts[0]))
	}
	r, _ := newTapeReplica(t, 8, "a", "b", "c")
	if err := r.restoreStored(s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapBytes(t, r), snapBytes(t, a)) {
		t.Error("the restored state differs from the captured one")
	}
}

// TestCaptureIsTheStateAtCapture: what is applied after the capture is not
// in the snapshot written from it, for a machine with Capturer and one
// without.
func TestCaptureIsTheStateAtCapture(t *testing.T) {
	machines := map[string]StateMachine{"cow": &cowTape{}, "tape": &tape{}}
	a, err := newReplica(machines, 8)
	if err != nil {
		t.Fatal(err)
	}
	a.apply(settingsSeal(1, 1, 8, a.local.Machines...))
	a.apply(mkEntry(2, 1, regCmd("n")))
	a.apply(mkEntry(3, 1, sCmd(1, 1, "cow", "one"), sCmd(1, 2, "tape", "one")))
	want := snapBytes(t, a)
	c, err := a.capture()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.views[0].(*cowView); !ok {
		t.Fatalf("the Capturer machine was not captured: %T", c.views[0])
	}
	a.apply(mkEntry(4, 1, sCmd(1, 3, "cow", "two"), sCmd(1, 4, "tape", "two")))
	c.head.Nonce = []byte{1}
	var buf bytes.Buffer
	if err := encodeCaptured(&buf, c); err != nil {
		t.Fatal(err)
	}
	s, err := decodeStoredSnapshot(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r, err := newReplica(map[string]StateMachine{"cow": &cowTape{}, "tape": &tape{}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.restoreStored(s); err != nil {
		t.Fatal(err)
	}
	if got := snapBytes(t, r); !bytes.Equal(got, want) {
		t.Error("the snapshot holds commands applied after its capture")
	}
}

// TestFailedRestoreEmptiesTheReplica: a machine that fails to restore
// leaves no half-restored state to apply entries on.
func TestFailedRestoreEmptiesTheReplica(t *testing.T) {
	a, _ := newSessionReplica(t, 8, 1, "a", "b")
	a.apply(mkEntry(3, 1, sCmd(1, 1, "a", "x"), sCmd(1, 2, "b", "y")))
	s, err := decodeStoredSnapshot(encodeCapturedT(t, a))
	if err != nil {
		t.Fatal(err)
	}
	s.parts[1] = [][]byte{[]byte("garbage")} // b's bytes do not decode
	r, tapes := newSessionReplica(t, 8, 1, "a", "b")
	r.apply(mkEntry(3, 1, sCmd(1, 1, "a", "old")))
	if err := r.restoreStored(s); err == nil {
		t.Fatal("restore of a bad machine state succeeded")
	}
	if r.applied != 0 || len(tapes["a"].cmds) != 0 || len(r.sessions) != 0 || r.settings != nil {
		t.Errorf("after a failed restore: applied %d, a holds %q, %d sessions", r.applied, tapes["a"].strings(), len(r.sessions))
	}
}

func TestChunkedSnapshotCorruptions(t *testing.T) {
	a, _ := newSessionReplica(t, 8, 1, "a")
	a.apply(mkEntry(3, 1, sCmd(1, 1, "a", strings.Repeat("v", 100))))
	b := encodeCapturedT(t, a)
	for i, c := range corruptions(b) {
		if _, err := decodeStoredSnapshot(c); err == nil {
			t.Errorf("corruption %d decoded", i)
		}
	}
	// Two chunks swapped: each checksum is right on its own bytes, the
	// running one is not.
	big, _ := newSessionReplica(t, 8, 1, "a")
	big.apply(mkEntry(3, 1, sCmd(1, 1, "a", strings.Repeat("p", snapChunkMax)+strings.Repeat("q", snapChunkMax))))
	bb := encodeCapturedT(t, big)
	s, err := decodeStoredSnapshot(bb)
	if err != nil || len(s.parts[0]) < 2 {
		t.Fatalf("%v, %d chunks", err, len(s.parts[0]))
	}
	// Parts are slices of bb: their offsets follow from their capacities.
	first := cap(bb) - cap(s.parts[0][0]) - 8
	second := cap(bb) - cap(s.parts[0][1]) - 8
	swapped := slices.Concat(bb[:first], bb[second:second+8+len(s.parts[0][1])], bb[first:second], bb[second+8+len(s.parts[0][1]):])
	if _, err := decodeStoredSnapshot(swapped); err == nil {
		t.Error("swapped chunks decoded")
	}
}

func FuzzDecodeChunkedSnapshot(f *testing.F) {
	a, _ := newSessionReplica(f, 8, 2, "a", "b")
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", "x"), sCmd(2, 1, "b", strings.Repeat("y", 300))))
	b := encodeCapturedT(f, a)
	f.Add(b)
	for _, c := range corruptions(b) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeStoredSnapshot(b)
		if err != nil {
			return
		}
		if checkSnapshot(s.Snapshot) != nil || len(s.parts) != len(s.Machines) {
			t.Fatalf("decoded an invalid snapshot: %v", s.Snapshot)
		}
		// A re-encoding of what decoded decodes to the same thing.
		c := &captured{head: proto.Clone(s.Snapshot).(*rsmpb.Snapshot)}
		for i, m := range c.head.Machines {
			data, err := io.ReadAll(s.machineReader(i))
			if err != nil {
				t.Fatal(err)
			}
			if s.Snapshot.Machines[i].Data != nil {
				m.Data = nil
			}
			c.views = append(c.views, bytesView(data))
		}
		var buf bytes.Buffer
		if err := encodeCaptured(&buf, c); err != nil {
			t.Fatal(err)
		}
		s2, err := decodeStoredSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		for i := range s2.Machines {
			x, _ := io.ReadAll(s.machineReader(i))
			y, _ := io.ReadAll(s2.machineReader(i))
			if !bytes.Equal(x, y) {
				t.Fatalf("machine %d changed in the round trip", i)
			}
		}
	})
}

// cowTape is a tape with Capturer: its view is a copy of the command list
// (a tape only appends, so sharing the backing array is safe).
type cowTape struct{ tape }

type cowView struct{ cmds [][]byte }

func (m *cowTape) Capture() StateView { return &cowView{cmds: m.cmds[:len(m.cmds):len(m.cmds)]} }

func (v *cowView) WriteTo(w io.Writer) (int64, error) {
	t := tape{cmds: v.cmds}
	var buf bytes.Buffer
	if err := t.Snapshot(&buf); err != nil {
		return 0, err
	}
	return buf.WriteTo(w)
}
