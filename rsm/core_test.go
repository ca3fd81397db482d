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

	"github.com/tenure-io/tenure/rsm/internal/record"
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
	expired        = result{status: rsmpb.Status_SESSION_EXPIRED}
	unknownMachine = result{status: rsmpb.Status_UNKNOWN_MACHINE, data: []byte("nope")}
)

func single(c *rsmpb.Command, want result) applyStep {
	return applyStep{cmds: []*rsmpb.Command{c}, want: []result{want}}
}

// settingsSeal is a new group's first seal, recording its settings.
func settingsSeal(index, term uint64, maxSessions uint64, machines ...string) *rsmpb.Entry {
	e := mkEntry(index, term)
	e.Settings = &rsmpb.Settings{MaxSessions: maxSessions, Machines: machines}
	return e
}

func regCmd(label string) *rsmpb.Command { return &rsmpb.Command{Register: true, Client: label} }

func sCmd(session, seq uint64, machine, data string) *rsmpb.Command {
	return &rsmpb.Command{Session: session, Seq: seq, Machine: machine, Data: []byte(data)}
}

// pCmd is a command of session on "tape" sent while its node awaited
// the answers from firstPending on.
func pCmd(session, seq, firstPending uint64, data string) *rsmpb.Command {
	c := sCmd(session, seq, "tape", data)
	c.FirstPending = firstPending
	return c
}

func sessionResult(id uint64) result {
	return result{status: rsmpb.Status_OK, data: binary.BigEndian.AppendUint64(nil, id)}
}

// newSessionReplica is a replica of a group created with bound
// maxSessions, with sessions 1..n registered (entries 1..n+1).
func newSessionReplica(t testing.TB, maxSessions int, n int, names ...string) (*replica, map[string]*tape) {
	t.Helper()
	r, tapes := newTapeReplica(t, maxSessions, names...)
	r.apply(settingsSeal(1, 1, uint64(maxSessions), r.local.Machines...))
	for i := range n {
		_, res := r.apply(mkEntry(uint64(i+2), 1, regCmd(fmt.Sprintf("node-%d", i))))
		if !equalResults(res, []result{sessionResult(uint64(i + 1))}) {
			t.Fatalf("registration %d: %+v", i+1, res)
		}
	}
	if r.refused != nil {
		t.Fatal(r.refused)
	}
	return r, tapes
}

func sessionIDs(r *replica) []uint64 {
	var out []uint64
	for id := range r.sessions {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func TestReplicaExactlyOnce(t *testing.T) {
	cases := []struct {
		name    string
		steps   []applyStep
		applied []string          // what the machine saw, in order
		seqs    map[uint64]uint64 // the table's last sequence per session
	}{
		{name: "next sequence numbers are applied",
			steps:   []applyStep{single(sCmd(1, 1, "tape", "a"), okResult("1:a")), single(sCmd(1, 2, "tape", "b"), okResult("2:b")), single(sCmd(1, 3, "tape", "c"), okResult("3:c"))},
			applied: []string{"a", "b", "c"}, seqs: map[uint64]uint64{1: 3, 2: 0}},
		{name: "a duplicate of the last returns its cached result",
			steps: []applyStep{
				single(sCmd(1, 1, "tape", "a"), okResult("1:a")),
				single(sCmd(1, 2, "tape", "b"), okResult("2:b")),
				single(sCmd(1, 2, "tape", "b"), okResult("2:b")),
				single(sCmd(1, 2, "tape", "other"), okResult("2:b")), // the seq decides, not the data
				single(sCmd(1, 3, "tape", "c"), okResult("3:c")),
			},
			applied: []string{"a", "b", "c"}, seqs: map[uint64]uint64{1: 3, 2: 0}},
		{name: "an older sequence number has no result",
			steps: []applyStep{
				single(sCmd(1, 1, "tape", "a"), okResult("1:a")),
				single(sCmd(1, 2, "tape", "b"), okResult("2:b")),
				single(sCmd(1, 1, "tape", "a"), unavailable),
			},
			applied: []string{"a", "b"}, seqs: map[uint64]uint64{1: 2, 2: 0}},
		{name: "every result its node still awaits is kept",
			// A node sends commands concurrently under its session; a
			// leader change loses the answers of a batch that was applied,
			// and each retry finds its own result.
			steps: []applyStep{
				{cmds: []*rsmpb.Command{pCmd(1, 1, 1, "a"), pCmd(1, 2, 1, "b"), pCmd(1, 3, 1, "c")},
					want: []result{okResult("1:a"), okResult("2:b"), okResult("3:c")}},
				{cmds: []*rsmpb.Command{pCmd(1, 2, 1, "b"), pCmd(1, 1, 1, "a"), pCmd(1, 3, 1, "c")},
					want: []result{okResult("2:b"), okResult("1:a"), okResult("3:c")}},
				single(pCmd(1, 4, 2, "d"), okResult("4:d")), // 1 answered
				single(pCmd(1, 1, 1, "a"), unavailable),
				single(pCmd(1, 2, 2, "b"), okResult("2:b")),
				single(pCmd(1, 3, 2, "c"), okResult("3:c")),
				single(pCmd(1, 5, 5, "e"), okResult("5:e")), // 2 to 4 answered
				single(pCmd(1, 3, 2, "c"), unavailable),
				single(pCmd(1, 4, 2, "d"), unavailable),
				single(pCmd(1, 5, 5, "e"), okResult("5:e")),
			},
			applied: []string{"a", "b", "c", "d", "e"}, seqs: map[uint64]uint64{1: 5, 2: 0}},
		{name: "a gap is refused and not applied",
			steps: []applyStep{
				single(sCmd(1, 1, "tape", "a"), okResult("1:a")),
				single(sCmd(1, 3, "tape", "c"), outOfSeq),
				single(sCmd(1, 5, "tape", "e"), outOfSeq),
				single(sCmd(1, 2, "tape", "b"), okResult("2:b")),
				single(sCmd(1, 3, "tape", "c"), okResult("3:c")),
			},
			applied: []string{"a", "b", "c"}, seqs: map[uint64]uint64{1: 3, 2: 0}},
		{name: "a session never registered is refused, whatever its number",
			steps: []applyStep{
				single(sCmd(7, 2, "tape", "b"), expired),
				single(sCmd(7, 1, "tape", "a"), expired),
				single(sCmd(3, 1, "tape", "a"), expired),
			},
			applied: []string{}, seqs: map[uint64]uint64{1: 0, 2: 0}},
		{name: "an unknown machine consumes the sequence number",
			steps: []applyStep{
				single(sCmd(1, 1, "nope", "a"), unknownMachine),
				single(sCmd(1, 1, "nope", "a"), unavailable),
				single(sCmd(1, 2, "tape", "b"), okResult("1:b")),
			},
			applied: []string{"b"}, seqs: map[uint64]uint64{1: 2, 2: 0}},
		{name: "sessions are independent",
			steps: []applyStep{
				single(sCmd(1, 1, "tape", "x1"), okResult("1:x1")),
				single(sCmd(2, 1, "tape", "y1"), okResult("2:y1")),
				single(sCmd(1, 2, "tape", "x2"), okResult("3:x2")),
				single(sCmd(2, 3, "tape", "y3"), outOfSeq),
				single(sCmd(2, 2, "tape", "y2"), okResult("4:y2")),
				single(sCmd(1, 2, "tape", "x2"), okResult("3:x2")),
			},
			applied: []string{"x1", "y1", "x2", "y2"}, seqs: map[uint64]uint64{1: 2, 2: 2}},
		{name: "duplicates within one entry",
			steps: []applyStep{{
				cmds: []*rsmpb.Command{sCmd(1, 1, "tape", "a"), sCmd(1, 1, "tape", "a"), sCmd(1, 3, "tape", "c"), sCmd(1, 2, "tape", "b")},
				want: []result{okResult("1:a"), okResult("1:a"), outOfSeq, okResult("2:b")},
			}},
			applied: []string{"a", "b"}, seqs: map[uint64]uint64{1: 2, 2: 0}},
		{name: "a retried registration finds its session",
			steps: []applyStep{
				single(regCmd("node-0"), sessionResult(1)),
				single(regCmd("again"), sessionResult(3)),
				single(regCmd("again"), sessionResult(3)),
			},
			applied: []string{}, seqs: map[uint64]uint64{1: 0, 2: 0, 3: 0}},
		{name: "a command of the previous version is refused once settings are recorded",
			steps: []applyStep{
				single(mkCmd("old", 1, "tape", "a"), expired),
			},
			applied: []string{}, seqs: map[uint64]uint64{1: 0, 2: 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, tapes := newSessionReplica(t, 10, 2)
			for i, s := range tc.steps {
				valid, got := r.apply(mkEntry(r.applied+1, 1, s.cmds...))
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
			if len(r.sessions) != len(tc.seqs) {
				t.Fatalf("table holds %v, want %v", sessionIDs(r), tc.seqs)
			}
			for c, seq := range tc.seqs {
				if rec := r.sessions[c]; rec == nil || rec.Seq != seq {
					t.Fatalf("table record of %d: %v, want seq %d", c, rec, seq)
				}
			}
		})
	}
}

// TestReplicaEvictedSessionNeverApplied: a command retried after its
// session was evicted is refused, never applied a second time. (The
// previous version took an unknown client at sequence 1 for a new one and
// applied its retry again.)
func TestReplicaEvictedSessionNeverApplied(t *testing.T) {
	r, tapes := newSessionReplica(t, 1, 0)
	_, res := r.apply(mkEntry(2, 1, regCmd("x")))
	x := binary.BigEndian.Uint64(res[0].data)
	if _, res = r.apply(mkEntry(3, 1, sCmd(x, 1, "tape", "x1"))); !equalResults(res, []result{okResult("1:x1")}) {
		t.Fatalf("x's first command: %+v", res)
	}
	// Another node registers: with room for one session, x's goes.
	_, res = r.apply(mkEntry(4, 1, regCmd("y")))
	y := binary.BigEndian.Uint64(res[0].data)
	if _, res = r.apply(mkEntry(5, 1, sCmd(y, 1, "tape", "y1"))); !equalResults(res, []result{okResult("2:y1")}) {
		t.Fatalf("y's command: %+v", res)
	}
	// x's retry of its first command, and its next one.
	for i, c := range []*rsmpb.Command{sCmd(x, 1, "tape", "x1"), sCmd(x, 2, "tape", "x2")} {
		if _, res = r.apply(mkEntry(uint64(6+i), 1, c)); !equalResults(res, []result{expired}) {
			t.Fatalf("x's command %d after eviction: %+v, want SESSION_EXPIRED", c.Seq, res)
		}
	}
	if got, want := tapes["tape"].strings(), []string{"x1", "y1"}; !slices.Equal(got, want) {
		t.Fatalf("machine applied %q, want %q", got, want)
	}
	if got := sessionIDs(r); !slices.Equal(got, []uint64{y}) {
		t.Fatalf("table holds %v, want [%d]", got, y)
	}
}

// TestReplicaLRUEviction is the session table's documented policy: the
// least recently used session (by log index, ties by number) is evicted.
func TestReplicaLRUEviction(t *testing.T) {
	t.Run("least recently used", func(t *testing.T) {
		r, tapes := newSessionReplica(t, 2, 2) // sessions 1, 2 at indexes 2, 3
		r.apply(mkEntry(4, 1, sCmd(1, 1, "tape", "a1")))
		r.apply(mkEntry(5, 1, regCmd("c"))) // 2, last used at 3, goes
		if got, want := sessionIDs(r), []uint64{1, 3}; !slices.Equal(got, want) {
			t.Fatalf("table holds %v, want %v", got, want)
		}
		_, res := r.apply(mkEntry(6, 1, sCmd(3, 1, "tape", "c1")))
		if !equalResults(res, []result{okResult("2:c1")}) {
			t.Fatalf("the newcomer's command: %+v", res)
		}
		_, res = r.apply(mkEntry(7, 1, sCmd(2, 1, "tape", "b1")))
		if !equalResults(res, []result{expired}) {
			t.Fatalf("evicted session 2: %+v, want SESSION_EXPIRED", res)
		}
		if got, want := tapes["tape"].strings(), []string{"a1", "c1"}; !slices.Equal(got, want) {
			t.Fatalf("machine applied %q, want %q", got, want)
		}
	})
	t.Run("ties by number", func(t *testing.T) {
		r, _ := newSessionReplica(t, 2, 2)
		r.apply(mkEntry(4, 1, sCmd(2, 1, "tape", "b1"), sCmd(1, 1, "tape", "a1")))
		r.apply(mkEntry(5, 1, regCmd("c"))) // 1 and 2 both last used at 4: 1 goes
		if got, want := sessionIDs(r), []uint64{2, 3}; !slices.Equal(got, want) {
			t.Fatalf("table holds %v, want %v", got, want)
		}
	})
}

// TestReplicaEvictionIsDeterministic: replicas applying the same entries
// with a full table keep the same sessions, whatever the policy picks.
func TestReplicaEvictionIsDeterministic(t *testing.T) {
	var entries []*rsmpb.Entry
	seq := map[uint64]uint64{}
	for i := uint64(3); i <= 60; i++ {
		var cmds []*rsmpb.Command
		for j := range 1 + i%3 {
			if (i+j)%7 == 0 {
				cmds = append(cmds, regCmd(fmt.Sprint(i, j)))
				continue
			}
			c := 1 + (i*7+j*3)%9
			seq[c]++
			cmds = append(cmds, sCmd(c, seq[c], "tape", fmt.Sprintf("%d.%d", i, j)))
		}
		entries = append(entries, mkEntry(i, 1, cmds...))
	}
	a, _ := newSessionReplica(t, 2, 1)
	b, _ := newSessionReplica(t, 2, 1)
	for i, e := range entries {
		_, ra := a.apply(e)
		_, rb := b.apply(proto.Clone(e).(*rsmpb.Entry))
		if !equalResults(ra, rb) {
			t.Fatalf("entry %d: results differ: %+v vs %+v", i+1, ra, rb)
		}
		if len(a.sessions) > 2 {
			t.Fatalf("entry %d: table holds %d sessions, limit 2", i+1, len(a.sessions))
		}
		if !slices.Equal(sessionIDs(a), sessionIDs(b)) {
			t.Fatalf("entry %d: tables differ: %v vs %v", i+1, sessionIDs(a), sessionIDs(b))
		}
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
		t.Fatal("snapshots differ")
	}
}

// TestReplicaSettingsDecideApply: the same log fed to replicas whose
// options differ. Apply follows the settings the log records, so their
// results agree; the replica whose options disagree reports it, naming
// the setting, and its node refuses to join.
func TestReplicaSettingsDecideApply(t *testing.T) {
	// Registrations and commands that a bound of 1 and a bound of 2 would
	// treat differently: session 1 is evicted by 2 only under bound 1.
	log := []*rsmpb.Entry{
		settingsSeal(1, 1, 1, "tape"),
		mkEntry(2, 1, regCmd("x")),
		mkEntry(3, 1, sCmd(1, 1, "tape", "x1")),
		mkEntry(4, 1, regCmd("y")),
		mkEntry(5, 1, sCmd(1, 1, "tape", "x1")), // x's retry
		mkEntry(6, 1, sCmd(1, 2, "tape", "x2")),
	}
	cases := []struct {
		name     string
		max      int
		machines []string
		refusal  *SettingsMismatchError
	}{
		{name: "same options", max: 1, machines: []string{"tape"}},
		{name: "another session bound", max: 2, machines: []string{"tape"},
			refusal: &SettingsMismatchError{Setting: "MaxDedupClients", Group: "1", Node: "2"}},
		{name: "another machine too", max: 1, machines: []string{"other", "tape"},
			refusal: &SettingsMismatchError{Setting: "state machines", Group: `["tape"]`, Node: `["other" "tape"]`}},
	}
	ref, _ := newTapeReplica(t, 1)
	var want [][]result
	for _, e := range log {
		_, res := ref.apply(e)
		want = append(want, res)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, tapes := newTapeReplica(t, tc.max, tc.machines...)
			var told []error
			r.onRefuse = func(err error) { told = append(told, err) }
			for i, e := range log {
				if _, res := r.apply(proto.Clone(e).(*rsmpb.Entry)); !equalResults(res, want[i]) {
					t.Fatalf("entry %d: results %+v, the reference %+v", e.Index, res, want[i])
				}
			}
			if got := tapes["tape"].strings(); !slices.Equal(got, []string{"x1"}) {
				t.Fatalf("machine applied %q, want [x1] (x's retry refused, its session evicted)", got)
			}
			if len(tc.machines) == 1 && !bytes.Equal(snapBytes(t, r), snapBytes(t, ref)) {
				t.Fatal("state differs from the reference")
			}
			if tc.refusal == nil {
				if r.refused != nil || len(told) != 0 {
					t.Fatalf("refused with the group's own options: %v", r.refused)
				}
				return
			}
			var sm *SettingsMismatchError
			if !errors.As(r.refused, &sm) || *sm != *tc.refusal || !errors.Is(r.refused, ErrSettingsMismatch) {
				t.Fatalf("refusal %v, want %+v", r.refused, tc.refusal)
			}
			if len(told) != 1 {
				t.Fatalf("the node was told %d times, want once", len(told))
			}
		})
	}
	t.Run("from a snapshot", func(t *testing.T) {
		s, err := ref.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		r, _ := newTapeReplica(t, 5)
		if err := r.restore(s); err != nil {
			t.Fatal(err)
		}
		var sm *SettingsMismatchError
		if !errors.As(r.refused, &sm) || sm.Setting != "MaxDedupClients" {
			t.Fatalf("restoring a snapshot with other settings: refusal %v", r.refused)
		}
	})
	t.Run("the first recorded settings stay", func(t *testing.T) {
		r, _ := newTapeReplica(t, 1)
		r.apply(settingsSeal(1, 1, 1, "tape"))
		r.apply(settingsSeal(2, 2, 7, "tape")) // a leader that raced the first seal
		if r.settings.MaxSessions != 1 || r.refused != nil {
			t.Fatalf("settings %v, refusal %v: the first seal's should stay", r.settings, r.refused)
		}
	})
}

// TestReplicaLegacyLog: a log of the previous version (no settings) replays
// under its own rule, so acknowledged results stay as they were; the first
// seal with settings ends those identities.
func TestReplicaLegacyLog(t *testing.T) {
	r, tapes := newTapeReplica(t, 1)
	r.apply(mkEntry(1, 1))
	steps := []applyStep{
		single(mkCmd("a", 1, "tape", "a1"), okResult("1:a1")),
		single(mkCmd("b", 1, "tape", "b1"), okResult("2:b1")),
		single(mkCmd("a", 2, "tape", "a2"), outOfSeq), // evicted: unknown
	}
	for i, s := range steps {
		if _, res := r.apply(mkEntry(uint64(i+2), 1, s.cmds...)); !equalResults(res, s.want) {
			t.Fatalf("step %d: %+v, want %+v", i, res, s.want)
		}
	}
	r.apply(settingsSeal(5, 2, 1, "tape"))
	if len(r.clients) != 0 || r.refused != nil {
		t.Fatalf("after the settings seal: clients %v, refusal %v", clientNames(r), r.refused)
	}
	if _, res := r.apply(mkEntry(6, 2, mkCmd("b", 2, "tape", "b2"))); !equalResults(res, []result{expired}) {
		t.Fatalf("a previous version's command after the settings: %+v", res)
	}
	if got, want := tapes["tape"].strings(), []string{"a1", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("machine applied %q, want %q", got, want)
	}
}

// TestReplicaRestoreEvictsLRU: a snapshot of the previous version with
// more clients than this replica keeps loses the least recently used,
// ties by name.
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
	stored, err := record.EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := record.DecodeSnapshot(stored)
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
		for _, sessions := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/sessions=%v", seed, sessions), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
				entries := randomEntries(rng, 500, sessions)
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
						enc, err := record.EncodeSnapshot(s)
						if err != nil {
							t.Fatal(err)
						}
						dec, err := record.DecodeSnapshot(enc)
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
				want := []rsmpb.Status{rsmpb.Status_OK, rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE,
					rsmpb.Status_REQUEST_OUT_OF_SEQUENCE, rsmpb.Status_UNKNOWN_MACHINE}
				if sessions {
					want = append(want, rsmpb.Status_SESSION_EXPIRED)
				}
				for _, st := range want {
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
}

// randomEntries returns n consecutive entries from index 1: terms that
// mostly rise with some stale ones, and commands from a few clients with
// next, duplicate, old and skipped sequence numbers. With sessions, the
// log starts with a settings seal for 4 sessions and the clients are
// sessions 1-5, registered now and then, so the table churns.
func randomEntries(rng *rand.Rand, n int, sessions bool) []*rsmpb.Entry {
	clients := []string{"c0", "c1", "c2", "c3", "c4"}
	issued := map[string]uint64{}
	term := uint64(1)
	var out []*rsmpb.Entry
	session := map[string]uint64{} // a client's current session
	last := uint64(0)              // sessions given out
	mk := func(c string, seq uint64, machine, data string) *rsmpb.Command {
		if !sessions {
			return mkCmd(c, seq, machine, data)
		}
		cmd := sCmd(session[c], seq, machine, data)
		if seq > 0 && rng.IntN(3) > 0 {
			// The node still awaits some of the answers before it.
			cmd.FirstPending = seq - rng.Uint64N(min(seq, 4))
		}
		return cmd
	}
	if sessions {
		out = append(out, settingsSeal(1, 1, 4, "x", "y"))
		for _, c := range clients {
			last++
			session[c] = last
			out = append(out, mkEntry(uint64(len(out)+1), 1, regCmd(fmt.Sprint(c, "@", len(out)))))
		}
	}
	for i := uint64(len(out) + 1); i <= uint64(n); i++ {
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
		before, beforeSession, beforeLast := maps.Clone(issued), maps.Clone(session), last
		var cmds []*rsmpb.Command
		for range 1 + rng.IntN(4) {
			c := clients[rng.IntN(len(clients))]
			if sessions && rng.IntN(10) == 0 {
				// c (maybe evicted) opens a new session.
				last++
				session[c], issued[c] = last, 0
				cmds = append(cmds, regCmd(fmt.Sprint(c, "@", i, ".", len(cmds))))
				continue
			}
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
			cmds = append(cmds, mk(c, seq, machine, fmt.Sprintf("%d/%s/%d", i, c, seq)))
		}
		if t < term {
			issued, session, last = before, beforeSession, beforeLast
		}
		out = append(out, mkEntry(i, t, cmds...))
	}
	return out
}

// TestReplicaKeptResultsInSnapshot: the results a session keeps for the
// commands its node still awaits travel in the snapshot, so a retry
// answered by a node that started from it finds its own; a snapshot
// whose kept results are out of order is refused.
func TestReplicaKeptResultsInSnapshot(t *testing.T) {
	a, _ := newSessionReplica(t, 10, 1, "tape")
	a.apply(mkEntry(a.applied+1, 1, pCmd(1, 1, 1, "a"), pCmd(1, 2, 1, "b"), pCmd(1, 3, 1, "c")))
	s, err := a.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Nonce = []byte("n")
	stored, err := record.EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := record.DecodeSnapshot(stored)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newTapeReplica(t, 10, "tape")
	if err := b.restore(loaded); err != nil {
		t.Fatal(err)
	}
	_, got := b.apply(mkEntry(b.applied+1, 1, pCmd(1, 1, 1, "a"), pCmd(1, 2, 1, "b"), pCmd(1, 3, 1, "c")))
	if want := []result{okResult("1:a"), okResult("2:b"), okResult("3:c")}; !equalResults(got, want) {
		t.Fatalf("retries after a restore: %+v, want %+v", got, want)
	}

	for _, earlier := range [][]*rsmpb.SessionResult{
		{{Seq: 2}, {Seq: 1}}, // out of order
		{{Seq: 3}},           // not before the last
		{{Seq: 0}},
	} {
		bad := proto.Clone(loaded).(*rsmpb.Snapshot)
		bad.Sessions[0].Earlier = earlier
		if err := record.CheckSnapshot(bad); err == nil {
			t.Errorf("a snapshot keeping results %v was accepted", earlier)
		}
	}
}

// TestKeepEarlierBound: a session keeps the results its node still awaits
// (from firstPending), at most maxEarlierResults of them, the oldest
// replaced first; a command of the previous version (firstPending 0)
// leaves only the last.
func TestKeepEarlierBound(t *testing.T) {
	rec := &rsmpb.SessionRecord{}
	last := uint64(maxEarlierResults + 10)
	for seq := uint64(1); seq <= last; seq++ {
		keepEarlier(rec, 1) // command 1 is awaited all along
		rec.Seq, rec.Result, rec.HasResult = seq, []byte(fmt.Sprint(seq)), true
	}
	if len(rec.Earlier) != maxEarlierResults {
		t.Fatalf("kept %d earlier results, want %d", len(rec.Earlier), maxEarlierResults)
	}
	if first, end := rec.Earlier[0].Seq, rec.Earlier[len(rec.Earlier)-1].Seq; first != last-maxEarlierResults || end != last-1 {
		t.Fatalf("kept %d..%d, want %d..%d", first, end, last-maxEarlierResults, last-1)
	}
	keepEarlier(rec, last-1)
	if len(rec.Earlier) != 2 || rec.Earlier[0].Seq != last-1 || rec.Earlier[1].Seq != last {
		t.Fatalf("with %d the first awaited, kept %v", last-1, rec.Earlier)
	}
	keepEarlier(rec, 0)
	if len(rec.Earlier) != 0 {
		t.Fatalf("after a command of the previous version, kept %d", len(rec.Earlier))
	}
}
