package rsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// tape is a deterministic test machine: it records every command applied
// to it and answers "{count}:{command}".
type tape struct {
	cmds [][]byte
}

func (m *tape) Apply(cmd []byte) []byte {
	m.cmds = append(m.cmds, bytes.Clone(cmd))
	return fmt.Appendf(nil, "%d:%s", len(m.cmds), cmd)
}

func (m *tape) Query([]byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(len(m.cmds))), nil
}

func (m *tape) Snapshot(w io.Writer) error {
	b := binary.AppendUvarint(nil, uint64(len(m.cmds)))
	for _, c := range m.cmds {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	_, err := w.Write(b)
	return err
}

func (m *tape) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return errors.New("tape: bad count")
	}
	b = b[k:]
	cmds := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return errors.New("tape: truncated")
		}
		cmds = append(cmds, bytes.Clone(b[k:k+int(l)]))
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return errors.New("tape: trailing bytes")
	}
	m.cmds = cmds
	return nil
}

func (m *tape) strings() []string {
	out := []string{}
	for _, c := range m.cmds {
		out = append(out, string(c))
	}
	return out
}

// newTapeReplica returns a replica with one tape machine per name.
func newTapeReplica(t testing.TB, maxClients int, names ...string) (*replica, map[string]*tape) {
	t.Helper()
	if len(names) == 0 {
		names = []string{"tape"}
	}
	tapes := map[string]*tape{}
	machines := map[string]StateMachine{}
	for _, name := range names {
		tapes[name] = &tape{}
		machines[name] = tapes[name]
	}
	r, err := newReplica(machines, maxClients)
	if err != nil {
		t.Fatal(err)
	}
	return r, tapes
}

func mkEntry(index, term uint64, cmds ...*rsmpb.Command) *rsmpb.Entry {
	return &rsmpb.Entry{Index: index, Term: term, Writer: "w", Nonce: []byte{byte(index), byte(term)}, Noop: len(cmds) == 0, Commands: cmds}
}

func mkCmd(client string, seq uint64, machine, data string) *rsmpb.Command {
	return &rsmpb.Command{Client: client, Seq: seq, Machine: machine, Data: []byte(data)}
}

// snapBytes encodes the replica's snapshot as the store would hold it.
// StartIndex is zeroed: it records where the replica's own history began
// (1, or after the snapshot it restored), not its state.
func snapBytes(t testing.TB, r *replica) []byte {
	t.Helper()
	s, err := r.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.StartIndex = 0
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clientNames(r *replica) []string {
	var out []string
	for c := range r.clients {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

func TestReplicaValidityRule(t *testing.T) {
	cases := []struct {
		name     string
		restored *rsmpb.Snapshot // applied first, if set
		terms    []uint64
		valid    []bool
	}{
		{name: "rising and equal terms are valid", terms: []uint64{1, 1, 2, 2, 5}, valid: []bool{true, true, true, true, true}},
		{name: "a lower term after a higher one is skipped", terms: []uint64{1, 2, 1, 2, 3, 2, 1, 3, 4},
			valid: []bool{true, true, false, true, true, false, false, true, true}},
		{name: "stale entries do not lower the running max", terms: []uint64{3, 1, 2, 2, 3},
			valid: []bool{true, false, false, false, true}},
		{name: "max term starts from the restored snapshot", restored: &rsmpb.Snapshot{StartIndex: 1, EndIndex: 5, MaxTerm: 3},
			terms: []uint64{2, 1, 3, 2, 4}, valid: []bool{false, false, true, false, true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// r sees the stale entries; clean sees a no-op of the same index
			// and term in their place. Both must end in the same state.
			r, tapes := newTapeReplica(t, 10)
			clean, _ := newTapeReplica(t, 10)
			start, maxTerm := uint64(1), uint64(0)
			if tc.restored != nil {
				for _, x := range []*replica{r, clean} {
					if err := x.restore(tc.restored); err != nil {
						t.Fatal(err)
					}
				}
				start, maxTerm = tc.restored.EndIndex+1, tc.restored.MaxTerm
			}
			var want []string
			seq := uint64(1)
			for i, term := range tc.terms {
				index := start + uint64(i)
				// Each entry carries the command the client would send next,
				// so applying a stale one would show in the tape and the
				// exactly-once table.
				data := fmt.Sprintf("i%d", index)
				e := mkEntry(index, term, mkCmd("c", seq, "tape", data))
				valid, results := r.apply(e)
				if valid != tc.valid[i] {
					t.Fatalf("entry %d (term %d): valid %v, want %v", index, term, valid, tc.valid[i])
				}
				if r.applied != index {
					t.Fatalf("entry %d: applied %d, want %d", index, r.applied, index)
				}
				if valid {
					maxTerm = max(maxTerm, term)
					want = append(want, data)
					if len(results) != 1 || results[0].status != rsmpb.Status_OK || string(results[0].data) != fmt.Sprintf("%d:%s", len(want), data) {
						t.Fatalf("entry %d: results %+v", index, results)
					}
					seq++
					clean.apply(e)
				} else {
					if results != nil {
						t.Fatalf("stale entry %d returned results %+v", index, results)
					}
					clean.apply(mkEntry(index, term))
				}
				if r.maxTerm != maxTerm {
					t.Fatalf("entry %d: maxTerm %d, want %d", index, r.maxTerm, maxTerm)
				}
			}
			if got := tapes["tape"].strings(); !slices.Equal(got, want) {
				t.Fatalf("machine holds %q, want %q", got, want)
			}
			if got, want := snapBytes(t, r), snapBytes(t, clean); !bytes.Equal(got, want) {
				t.Fatal("stale entries changed the state: snapshot differs from a replica that saw no-ops in their place")
			}
		})
	}
}

type applyStep struct {
	cmds []*rsmpb.Command // one entry
	want []result
}

func okResult(s string) result { return result{status: rsmpb.Status_OK, data: []byte(s)} }

var (
	unavailable    = result{status: rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE}
	outOfSeq       = result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE}
	unknownCli     = result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE, data: []byte("unknown client")}
	unknownMachine = result{status: rsmpb.Status_UNKNOWN_MACHINE, data: []byte("nope")}
)

func single(c *rsmpb.Command, want result) applyStep {
	return applyStep{cmds: []*rsmpb.Command{c}, want: []result{want}}
}

func TestReplicaExactlyOnce(t *testing.T) {
	cases := []struct {
		name    string
		steps   []applyStep
		applied []string          // what the machine saw, in order
		seqs    map[string]uint64 // the table's last sequence per client
	}{
		{name: "next sequence numbers are applied",
			steps:   []applyStep{single(mkCmd("c", 1, "tape", "a"), okResult("1:a")), single(mkCmd("c", 2, "tape", "b"), okResult("2:b")), single(mkCmd("c", 3, "tape", "c"), okResult("3:c"))},
			applied: []string{"a", "b", "c"}, seqs: map[string]uint64{"c": 3}},
		{name: "a duplicate of the last returns its cached result",
			steps: []applyStep{
				single(mkCmd("c", 1, "tape", "a"), okResult("1:a")),
				single(mkCmd("c", 2, "tape", "b"), okResult("2:b")),
				single(mkCmd("c", 2, "tape", "b"), okResult("2:b")),
				single(mkCmd("c", 2, "tape", "other"), okResult("2:b")), // the seq decides, not the data
				single(mkCmd("c", 3, "tape", "c"), okResult("3:c")),
			},
			applied: []string{"a", "b", "c"}, seqs: map[string]uint64{"c": 3}},
		{name: "an older sequence number has no result",
			steps: []applyStep{
				single(mkCmd("c", 1, "tape", "a"), okResult("1:a")),
				single(mkCmd("c", 2, "tape", "b"), okResult("2:b")),
				single(mkCmd("c", 1, "tape", "a"), unavailable),
			},
			applied: []string{"a", "b"}, seqs: map[string]uint64{"c": 2}},
		{name: "a gap is refused and not applied",
			steps: []applyStep{
				single(mkCmd("c", 1, "tape", "a"), okResult("1:a")),
				single(mkCmd("c", 3, "tape", "c"), outOfSeq),
				single(mkCmd("c", 5, "tape", "e"), outOfSeq),
				single(mkCmd("c", 2, "tape", "b"), okResult("2:b")),
				single(mkCmd("c", 3, "tape", "c"), okResult("3:c")),
			},
			applied: []string{"a", "b", "c"}, seqs: map[string]uint64{"c": 3}},
		{name: "an unknown client must start at 1",
			steps: []applyStep{
				single(mkCmd("c", 2, "tape", "b"), unknownCli),
				single(mkCmd("c", 7, "tape", "g"), unknownCli),
				single(mkCmd("c", 1, "tape", "a"), okResult("1:a")),
			},
			applied: []string{"a"}, seqs: map[string]uint64{"c": 1}},
		{name: "an unknown machine consumes the sequence number",
			steps: []applyStep{
				single(mkCmd("c", 1, "nope", "a"), unknownMachine),
				single(mkCmd("c", 1, "nope", "a"), unavailable),
				single(mkCmd("c", 2, "tape", "b"), okResult("1:b")),
			},
			applied: []string{"b"}, seqs: map[string]uint64{"c": 2}},
		{name: "clients are independent",
			steps: []applyStep{
				single(mkCmd("x", 1, "tape", "x1"), okResult("1:x1")),
				single(mkCmd("y", 1, "tape", "y1"), okResult("2:y1")),
				single(mkCmd("x", 2, "tape", "x2"), okResult("3:x2")),
				single(mkCmd("y", 3, "tape", "y3"), outOfSeq),
				single(mkCmd("y", 2, "tape", "y2"), okResult("4:y2")),
				single(mkCmd("x", 2, "tape", "x2"), okResult("3:x2")),
			},
			applied: []string{"x1", "y1", "x2", "y2"}, seqs: map[string]uint64{"x": 2, "y": 2}},
		{name: "duplicates within one entry",
			steps: []applyStep{{
				cmds: []*rsmpb.Command{mkCmd("c", 1, "tape", "a"), mkCmd("c", 1, "tape", "a"), mkCmd("c", 3, "tape", "c"), mkCmd("c", 2, "tape", "b")},
				want: []result{okResult("1:a"), okResult("1:a"), outOfSeq, okResult("2:b")},
			}},
			applied: []string{"a", "b"}, seqs: map[string]uint64{"c": 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, tapes := newTapeReplica(t, 10)
			for i, s := range tc.steps {
				valid, got := r.apply(mkEntry(uint64(i+1), 1, s.cmds...))
				if !valid {
					t.Fatalf("applyStep %d: entry not valid", i)
				}
				if len(got) != len(s.want) {
					t.Fatalf("applyStep %d: %d results, want %d", i, len(got), len(s.want))
				}
				for j := range got {
					if got[j].status != s.want[j].status || !bytes.Equal(got[j].data, s.want[j].data) {
						t.Fatalf("applyStep %d command %d: got %v %q, want %v %q", i, j, got[j].status, got[j].data, s.want[j].status, s.want[j].data)
					}
				}
			}
			if got := tapes["tape"].strings(); !slices.Equal(got, tc.applied) {
				t.Fatalf("machine applied %q, want %q", got, tc.applied)
			}
			if len(r.clients) != len(tc.seqs) {
				t.Fatalf("table holds %v, want %v", clientNames(r), tc.seqs)
			}
			for c, seq := range tc.seqs {
				if rec := r.clients[c]; rec == nil || rec.Seq != seq {
					t.Fatalf("table record of %q: %v, want seq %d", c, rec, seq)
				}
			}
		})
	}
}

// TestReplicaLRUEviction is the exactly-once table's documented policy: the
// least recently used client (by apply index, ties by name) is evicted.
func TestReplicaLRUEviction(t *testing.T) {
	t.Run("least recently used", func(t *testing.T) {
		r, tapes := newTapeReplica(t, 2)
		r.apply(mkEntry(1, 1, mkCmd("a", 1, "tape", "a1")))
		r.apply(mkEntry(2, 1, mkCmd("b", 1, "tape", "b1")))
		r.apply(mkEntry(3, 1, mkCmd("a", 2, "tape", "a2")))
		r.apply(mkEntry(4, 1, mkCmd("c", 1, "tape", "c1"))) // b, last used at 2, goes
		if got, want := clientNames(r), []string{"a", "c"}; !slices.Equal(got, want) {
			t.Fatalf("table holds %v, want %v", got, want)
		}
		// The newcomer is remembered: its retried command is not applied again.
		_, res := r.apply(mkEntry(5, 1, mkCmd("c", 1, "tape", "c1")))
		if res[0].status != rsmpb.Status_OK || string(res[0].data) != "4:c1" {
			t.Fatalf("retry of c/1: %v %q, want the cached 4:c1", res[0].status, res[0].data)
		}
		_, res = r.apply(mkEntry(6, 1, mkCmd("b", 2, "tape", "b2")))
		if res[0].status != rsmpb.Status_REQUEST_OUT_OF_SEQUENCE || string(res[0].data) != "unknown client" {
			t.Fatalf("evicted b: %v %q, want unknown client", res[0].status, res[0].data)
		}
		if got, want := tapes["tape"].strings(), []string{"a1", "b1", "a2", "c1"}; !slices.Equal(got, want) {
			t.Fatalf("machine applied %q, want %q", got, want)
		}
	})
	t.Run("ties by name", func(t *testing.T) {
		r, _ := newTapeReplica(t, 2)
		r.apply(mkEntry(1, 1, mkCmd("b", 1, "tape", "b1"), mkCmd("a", 1, "tape", "a1")))
		r.apply(mkEntry(2, 1, mkCmd("c", 1, "tape", "c1"))) // a and b both last used at 1: a goes
		if got, want := clientNames(r), []string{"b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("table holds %v, want %v", got, want)
		}
	})
}

// TestReplicaEvictionIsDeterministic: replicas applying the same entries
// with a full table keep the same clients, whatever the policy picks.
func TestReplicaEvictionIsDeterministic(t *testing.T) {
	var entries []*rsmpb.Entry
	seq := map[string]uint64{}
	for i := uint64(1); i <= 60; i++ {
		var cmds []*rsmpb.Command
		for j := range 1 + i%3 {
			c := fmt.Sprintf("c%d", (i*7+j*3)%9)
			seq[c]++
			cmds = append(cmds, mkCmd(c, seq[c], "tape", fmt.Sprintf("%d.%d", i, j)))
		}
		entries = append(entries, mkEntry(i, 1, cmds...))
	}
	a, _ := newTapeReplica(t, 2)
	b, _ := newTapeReplica(t, 2)
	for i, e := range entries {
		_, ra := a.apply(e)
		_, rb := b.apply(proto.Clone(e).(*rsmpb.Entry))
		if !equalResults(ra, rb) {
			t.Fatalf("entry %d: results differ: %+v vs %+v", i+1, ra, rb)
		}
		if len(a.clients) > 2 {
			t.Fatalf("entry %d: table holds %d clients, limit 2", i+1, len(a.clients))
		}
		if !slices.Equal(clientNames(a), clientNames(b)) {
			t.Fatalf("entry %d: tables differ: %v vs %v", i+1, clientNames(a), clientNames(b))
		}
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
		t.Fatal("snapshots differ")
	}
}

// TestReplicaRestoreEvictsLRU: a snapshot with more clients than this
// replica keeps loses the least recently used, ties by name.
func TestReplicaRestoreEvictsLRU(t *testing.T) {
	s := &rsmpb.Snapshot{StartIndex: 1, EndIndex: 9, MaxTerm: 1, Clients: []*rsmpb.ClientRecord{
		{Client: "a", Seq: 1, LastUsed: 3},
		{Client: "b", Seq: 1, LastUsed: 3},
		{Client: "c", Seq: 1, LastUsed: 5},
		{Client: "d", Seq: 1, LastUsed: 9},
	}}
	for _, tc := range []struct {
		max  int
		want []string
	}{{4, []string{"a", "b", "c", "d"}}, {3, []string{"b", "c", "d"}}, {2, []string{"c", "d"}}, {1, []string{"d"}}} {
		r, _ := newTapeReplica(t, tc.max)
		if err := r.restore(s); err != nil {
			t.Fatal(err)
		}
		if got := clientNames(r); !slices.Equal(got, tc.want) {
			t.Errorf("max %d: table holds %v, want %v", tc.max, got, tc.want)
		}
	}
}

func equalResults(a, b []result) bool {
	return slices.EqualFunc(a, b, func(x, y result) bool { return x.status == y.status && bytes.Equal(x.data, y.data) })
}

// TestReplicaSnapshotRestore: a replica restored from another's snapshot,
// through the store's encoding, holds the same machines and exactly-once
// table, and both stay identical as they apply the same entries.
func TestReplicaSnapshotRestore(t *testing.T) {
	a, _ := newTapeReplica(t, 3, "x", "y")
	var entries []*rsmpb.Entry
	seq := map[string]uint64{}
	for i := uint64(1); i <= 40; i++ {
		c := fmt.Sprintf("c%d", i%5)
		seq[c]++
		m := "x"
		if i%3 == 0 {
			m = "y"
		}
		cmds := []*rsmpb.Command{mkCmd(c, seq[c], m, fmt.Sprint(i))}
		if i%4 == 0 {
			cmds = append(cmds, mkCmd(c, seq[c], m, "dup")) // a duplicate: cached result
		}
		entries = append(entries, mkEntry(i, 1+i/10, cmds...))
	}
	for _, e := range entries[:25] {
		a.apply(e)
	}
	s, err := a.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.EndIndex != 25 || s.MaxTerm != 3 || len(s.Clients) != 3 || len(s.Machines) != 2 {
		t.Fatalf("snapshot: end %d, max term %d, %d clients, %d machines", s.EndIndex, s.MaxTerm, len(s.Clients), len(s.Machines))
	}
	s.Nonce = []byte("n") // as the leader stamps it before writing
	stored, err := encodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := decodeSnapshot(stored)
	if err != nil {
		t.Fatal(err)
	}
	b, tapes := newTapeReplica(t, 3, "x", "y")
	// b has state of its own that the restore must replace.
	b.apply(mkEntry(1, 9, mkCmd("z", 1, "y", "junk")))
	if err := b.restore(loaded); err != nil {
		t.Fatal(err)
	}
	if b.applied != 25 || b.maxTerm != 3 {
		t.Fatalf("restored: applied %d, max term %d", b.applied, b.maxTerm)
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
		t.Fatal("the restored replica's snapshot differs from the original's")
	}
	for _, e := range entries[25:] {
		_, ra := a.apply(e)
		_, rb := b.apply(e)
		if !equalResults(ra, rb) {
			t.Fatalf("entry %d: results differ after restore: %+v vs %+v", e.Index, ra, rb)
		}
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
		t.Fatal("replicas diverged after the restore")
	}
	if slices.Contains(tapes["y"].strings(), "junk") {
		t.Fatal("restore kept state from before it")
	}
	if next, err := b.snapshot(); err != nil || next.StartIndex != 26 {
		t.Fatalf("the next snapshot after restoring one ending at 25 starts at %d (%v), want 26", next.GetStartIndex(), err)
	}
}

// TestReplicaRestoreMissingMachine: a machine absent from the snapshot
// (registered since) starts empty.
func TestReplicaRestoreMissingMachine(t *testing.T) {
	r, tapes := newTapeReplica(t, 10, "x", "y")
	r.apply(mkEntry(1, 1, mkCmd("c", 1, "x", "x1"), mkCmd("c", 2, "y", "y1")))
	var buf bytes.Buffer
	if err := (&tape{cmds: [][]byte{[]byte("from snapshot")}}).Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if err := r.restore(&rsmpb.Snapshot{StartIndex: 1, EndIndex: 4, MaxTerm: 2, Machines: []*rsmpb.MachineState{{Name: "x", Data: buf.Bytes()}}}); err != nil {
		t.Fatal(err)
	}
	if got := tapes["x"].strings(); !slices.Equal(got, []string{"from snapshot"}) {
		t.Fatalf("x holds %q", got)
	}
	if got := tapes["y"].strings(); len(got) != 0 {
		t.Fatalf("y holds %q, want empty", got)
	}
	if len(r.clients) != 0 {
		t.Fatalf("table holds %v, want empty", clientNames(r))
	}
}

func TestReplicaReset(t *testing.T) {
	r, tapes := newTapeReplica(t, 10, "x", "y")
	fresh, _ := newTapeReplica(t, 10, "x", "y")
	empty := snapBytes(t, fresh)
	r.apply(mkEntry(1, 4, mkCmd("c", 1, "x", "x1"), mkCmd("d", 1, "y", "y1")))
	r.apply(mkEntry(2, 5, mkCmd("c", 2, "x", "x2")))
	if err := r.reset(); err != nil {
		t.Fatal(err)
	}
	if r.applied != 0 || r.maxTerm != 0 || len(r.clients) != 0 || len(tapes["x"].cmds) != 0 || len(tapes["y"].cmds) != 0 {
		t.Fatalf("after reset: applied %d, max term %d, clients %v, x %q, y %q",
			r.applied, r.maxTerm, clientNames(r), tapes["x"].strings(), tapes["y"].strings())
	}
	if !bytes.Equal(snapBytes(t, r), empty) {
		t.Fatal("a reset replica's snapshot differs from a fresh one's")
	}
	// It rebuilds from index 1 as a fresh replica would: the term-5 entries
	// it had applied no longer raise the bar.
	if valid, res := r.apply(mkEntry(1, 1, mkCmd("c", 1, "x", "again"))); !valid || res[0].status != rsmpb.Status_OK || string(res[0].data) != "1:again" {
		t.Fatalf("after reset: valid %v, results %+v", valid, res)
	}
}

// TestReplicaDeterminism feeds two replicas the same random entries,
// stale terms, duplicates, gaps, unknown clients and machines included,
// and a third one restored half-way from the first's stored snapshot. All
// must agree on every result and end byte-identical.
func TestReplicaDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 42, 1 << 40} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			entries := randomEntries(rng, 500)
			a, _ := newTapeReplica(t, 4, "x", "y")
			b, _ := newTapeReplica(t, 4, "x", "y")
			var c *replica
			stats := map[rsmpb.Status]int{}
			stale := 0
			for i, e := range entries {
				va, ra := a.apply(e)
				vb, rb := b.apply(proto.Clone(e).(*rsmpb.Entry))
				if va != vb || !equalResults(ra, rb) {
					t.Fatalf("entry %d: replicas disagree: %v %+v vs %v %+v", e.Index, va, ra, vb, rb)
				}
				if !va {
					stale++
				}
				for _, r := range ra {
					stats[r.status]++
				}
				if c != nil {
					vc, rc := c.apply(proto.Clone(e).(*rsmpb.Entry))
					if vc != va || !equalResults(ra, rc) {
						t.Fatalf("entry %d: restored replica disagrees: %v %+v vs %v %+v", e.Index, va, ra, vc, rc)
					}
				}
				if i == len(entries)/2 {
					s, err := a.snapshot()
					if err != nil {
						t.Fatal(err)
					}
					s.Nonce = []byte("n")
					enc, err := encodeSnapshot(s)
					if err != nil {
						t.Fatal(err)
					}
					dec, err := decodeSnapshot(enc)
					if err != nil {
						t.Fatal(err)
					}
					c, _ = newTapeReplica(t, 4, "x", "y")
					if err := c.restore(dec); err != nil {
						t.Fatal(err)
					}
				}
			}
			sa := snapBytes(t, a)
			if !bytes.Equal(sa, snapBytes(t, b)) {
				t.Fatal("replicas fed the same entries differ")
			}
			if !bytes.Equal(sa, snapBytes(t, c)) {
				t.Fatal("the replica restored half-way differs")
			}
			// The generator must have reached every path it aims at.
			for _, st := range []rsmpb.Status{rsmpb.Status_OK, rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE,
				rsmpb.Status_REQUEST_OUT_OF_SEQUENCE, rsmpb.Status_UNKNOWN_MACHINE} {
				if stats[st] == 0 {
					t.Errorf("no result with status %v", st)
				}
			}
			if stale == 0 {
				t.Error("no stale-term entry was skipped")
			}
			t.Logf("%d stale entries, results %v", stale, stats)
		})
	}
}

// randomEntries returns n consecutive entries from index 1: terms that
// mostly rise with some stale ones, and commands from a few clients with
// next, duplicate, old and skipped sequence numbers.
func randomEntries(rng *rand.Rand, n int) []*rsmpb.Entry {
	clients := []string{"c0", "c1", "c2", "c3", "c4"}
	issued := map[string]uint64{}
	term := uint64(1)
	var out []*rsmpb.Entry
	for i := uint64(1); i <= uint64(n); i++ {
		t := term
		switch p := rng.IntN(100); {
		case p < 5:
			term++
			t = term
		case p < 15 && term > 1:
			t = 1 + rng.Uint64N(term-1) // a deposed leader's late write
		}
		if rng.IntN(20) == 0 {
			out = append(out, mkEntry(i, t))
			continue
		}
		// A stale entry's commands were never applied: their nodes send
		// them again, under the same sequence numbers.
		before := maps.Clone(issued)
		var cmds []*rsmpb.Command
		for range 1 + rng.IntN(4) {
			c := clients[rng.IntN(len(clients))]
			machine := []string{"x", "y"}[rng.IntN(2)]
			var seq uint64
			switch p := rng.IntN(100); {
			case p < 65:
				issued[c]++
				seq = issued[c]
			case p < 75 && issued[c] > 0:
				seq = issued[c]
			case p < 82 && issued[c] > 0:
				seq = 1 + rng.Uint64N(issued[c])
			case p < 88:
				seq = issued[c] + 2 + rng.Uint64N(3)
			case p < 93:
				issued[c]++
				seq = issued[c]
				machine = "zz"
			default:
				issued[c]++
				seq = issued[c]
			}
			cmds = append(cmds, mkCmd(c, seq, machine, fmt.Sprintf("%d/%s/%d", i, c, seq)))
		}
		if t < term {
			issued = before
		}
		out = append(out, mkEntry(i, t, cmds...))
	}
	return out
}
