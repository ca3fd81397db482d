package rsm

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// encodeCapturedT captures r and encodes it as the store would hold it.
func encodeCapturedT(t testing.TB, r *replica) []byte {
	t.Helper()
	c, err := r.capture()
	if err != nil {
		t.Fatal(err)
	}
	c.Head.Nonce, c.Head.Group = []byte("0123456789ab"), "g"
	var buf bytes.Buffer
	if err := snapshot.Encode(&buf, c); err != nil {
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
	s, err := snapshot.Decode(b)
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
	big := strings.Repeat("x", 96<<10) // one and a half chunks (package snapshot)
	a.apply(mkEntry(4, 1, sCmd(1, 1, "a", big), sCmd(2, 1, "b", "y"), sCmd(1, 2, "a", big+"!")))
	_ = tapes
	b := encodeCapturedT(t, a)
	s, err := snapshot.Decode(b)
	if err != nil {
		t.Fatal(err)
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
	if _, ok := c.Views[0].(*cowView); !ok {
		t.Fatalf("the Capturer machine was not captured: %T", c.Views[0])
	}
	a.apply(mkEntry(4, 1, sCmd(1, 3, "cow", "two"), sCmd(1, 4, "tape", "two")))
	c.Head.Nonce = []byte{1}
	var buf bytes.Buffer
	if err := snapshot.Encode(&buf, c); err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Decode(buf.Bytes())
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
	c, err := a.capture()
	if err != nil {
		t.Fatal(err)
	}
	c.Head.Nonce, c.Head.Group = []byte("0123456789ab"), "g"
	c.Views[1] = snapshot.BytesView("garbage") // b's bytes do not decode
	var buf bytes.Buffer
	if err := snapshot.Encode(&buf, c); err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r, tapes := newSessionReplica(t, 8, 1, "a", "b")
	r.apply(mkEntry(3, 1, sCmd(1, 1, "a", "old")))
	if err := r.restoreStored(s); err == nil {
		t.Fatal("restore of a bad machine state succeeded")
	}
	if r.applied != 0 || len(tapes["a"].cmds) != 0 || len(r.sessions) != 0 || r.settings != nil {
		t.Errorf("after a failed restore: applied %d, a holds %q, %d sessions", r.applied, tapes["a"].strings(), len(r.sessions))
	}
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
