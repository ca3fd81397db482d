package rsm

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// replica is the pure, single-threaded core every node runs: it applies log
// entries strictly in index order under the validity rule, keeps the
// client sessions and the group's settings. It does no I/O and reads no
// clock, so every replica given the same entries reaches the same state.
//
// The validity rule: an entry is valid only if its term is at least the
// highest term of the valid entries before it (maxTerm, which starts from
// the snapshot's). Invalid entries, a deposed leader's late writes, advance
// the index and change nothing.
//
// What apply does depends only on the log: the session bound and the set
// of machine names come from the group's settings, recorded by the first
// seal and in every snapshot. This node's own options (local) only decide
// whether it may take part: a replica whose options disagree with the
// recorded settings reports it through onRefuse.
type replica struct {
	machines  map[string]StateMachine
	initial   map[string][]byte // each machine's empty state, for restore
	applied   uint64            // last index applied
	maxTerm   uint64            // highest term of the valid entries up to applied
	snapStart uint64            // start index of the snapshot last restored or taken

	local       *rsmpb.Settings // this node's options
	settings    *rsmpb.Settings // the group's, nil until recorded
	sessions    map[uint64]*rsmpb.SessionRecord
	lastSession uint64
	// clients is the previous version's table, kept only to replay a log
	// written before the group recorded settings.
	clients map[string]*rsmpb.ClientRecord

	refused  error       // the first settings mismatch met
	onRefuse func(error) // told of it, once

	mutation mutation // zero but in the simulator's mutation check

	// owner, if set, is called at every apply, query, capture and
	// restore: a node's tests set it to check that only the replica's
	// goroutine (replicaOwner) uses it.
	owner func()
}

// mutation puts a historical bug back into the pure core, so that the
// simulator's mutation check (TestSimulationCatchesMutations) shows that
// the simulation catches it. Only tests set it; the zero value is the
// protocol.
type mutation int

const (
	noMutation mutation = iota
	// Rule 9 broken: a command of a session not in the table (evicted)
	// numbered 1 is taken for a new session's first command, so a retry
	// after eviction applies again.
	mutateUnknownSessionIsNew
	// Rule 10 broken: the session bound is this node's option, not the
	// group's setting, so replicas with different options evict
	// differently and diverge.
	mutateLocalSessionBound
	// Rule 11 broken: waiters registered after the last confirmation
	// round was issued are dropped when the leadership ends, never
	// answered.
	mutateDropLateWaiters
	// Follow answers misread: a Follow that failed (the leader did not
	// answer) is waited out like a refusal by a leader not leading yet,
	// and asked again, never counted: a node whose leader is gone never
	// looks for signs and attempts from the join loop.
	mutateFollowFailureWaits
	// Cut-off signs misread: the record of the term given up on is taken
	// for one of another term (read it again), so a node never attempts
	// while the record still names the leader that stopped.
	mutateJudgeSameTermMoved
	// Cut-off signs misread: only the record's leader counts as listing
	// the node, not its followers, so every follower of a leader that
	// stopped reads itself dropped.
	mutateCutOffIgnoresFollowers
)

func newReplica(machines map[string]StateMachine, maxSessions int) (*replica, error) {
	r := &replica{machines: machines, initial: map[string][]byte{},
		sessions: map[uint64]*rsmpb.SessionRecord{}, clients: map[string]*rsmpb.ClientRecord{}}
	names := make([]string, 0, len(machines))
	for name, m := range machines {
		var buf bytes.Buffer
		if err := m.Snapshot(&buf); err != nil {
			return nil, fmt.Errorf("rsm: snapshot of the empty machine %q: %w", name, err)
		}
		r.initial[name] = buf.Bytes()
		names = append(names, name)
	}
	slices.Sort(names)
	r.local = &rsmpb.Settings{MaxSessions: uint64(maxSessions), Machines: names}
	return r, nil
}

// used runs the owner check, if any.
func (r *replica) used() {
	if r.owner != nil {
		r.owner()
	}
}

// query answers q on machine name as it stands: ok is false if the node
// has no such machine.
func (r *replica) query(name string, q []byte) (out []byte, ok bool, err error) {
	r.used()
	m, ok := r.machines[name]
	if !ok {
		return nil, false, nil
	}
	out, err = m.Query(q)
	return out, true, err
}

// reset returns every machine to its empty state.
func (r *replica) reset() error {
	return r.restore(&rsmpb.Snapshot{})
}

// result is the outcome of one command at apply time.
type result struct {
	status rsmpb.Status
	data   []byte
}

// apply applies e, which the caller has checked is at index applied+1. It returns whether e
// was valid and, if so, one result per command.
func (r *replica) apply(e *rsmpb.Entry) (valid bool, results []result) {
	return r.applyPrepared(e, nil)
}

// applyPrepared is apply with what Preparers returned for e's commands
// (nil, or one per command: nil for a command not prepared).
//
// Rule 1, validity (docs/rsm.md): an entry is valid only if its term is at
// least the highest term of the valid entries before it (maxTerm, from the
// snapshot restored on); every replica skips the same entries, so a
// deposed leader's late writes are ignored by all.
func (r *replica) applyPrepared(e *rsmpb.Entry, prepared []any) (valid bool, results []result) {
	r.used()
	r.applied = e.Index
	if e.Term < r.maxTerm {
		return false, nil
	}
	r.maxTerm = e.Term
	if e.Settings != nil && r.settings == nil {
		r.adopt(e.Settings)
	}
	results = make([]result, len(e.Commands))
	for i, c := range e.Commands {
		var p any
		if prepared != nil {
			p = prepared[i]
		}
		results[i] = r.applyCommand(c, e.Index, p)
	}
	return true, results
}

// adopt records the group's settings. Identities of the previous version
// end here: from now on only sessions are known.
//
// Rule 10, group settings (docs/rsm.md): what apply depends on besides the
// log is the group's, recorded by the first valid seal carrying settings
// and in every snapshot; apply reads only these (maxSessions, machine),
// and a node whose options disagree refuses to serve (check).
func (r *replica) adopt(s *rsmpb.Settings) {
	r.settings = proto.Clone(s).(*rsmpb.Settings)
	r.clients = map[string]*rsmpb.ClientRecord{}
	r.check()
}

// check compares the group's settings with this node's options.
func (r *replica) check() {
	if r.settings == nil || r.refused != nil {
		return
	}
	if err := compareSettings(r.settings, r.local); err != nil {
		r.refused = err
		if r.onRefuse != nil {
			r.onRefuse(err)
		}
	}
}

// maxSessions is the bound apply uses: the group's, or, replaying a log
// of the previous version that recorded none, this node's.
func (r *replica) maxSessions() int {
	if r.settings != nil && r.mutation != mutateLocalSessionBound {
		return int(r.settings.MaxSessions)
	}
	return int(r.local.MaxSessions)
}

func (r *replica) machine(name string) (StateMachine, bool) {
	if r.settings != nil {
		if _, ok := slices.BinarySearch(r.settings.Machines, name); !ok {
			return nil, false
		}
	}
	m, ok := r.machines[name]
	return m, ok
}

// applyCommand applies one command of a valid entry at index.
//
// Rule 9, exactly-once (docs/rsm.md): a command is applied only under a
// session in the replicated table and only as its last number + 1
// (applySession); a session is opened through the log (register); a
// command of an unknown or evicted session is refused, never applied.
func (r *replica) applyCommand(c *rsmpb.Command, index uint64, prepared any) result {
	switch {
	case c.Register:
		return r.register(c.Client, index)
	case c.Session != 0:
		return r.applySession(c, index, prepared)
	case r.settings != nil:
		// The previous version's identity in a group that has moved on:
		// its table is gone, so the command cannot be vouched for.
		return result{status: rsmpb.Status_SESSION_EXPIRED}
	}
	return r.applyLegacy(c, index, prepared)
}

// register opens a session, numbered by registrations in log order. A
// retried registration (same label) finds its session while it lives.
func (r *replica) register(label string, index uint64) result {
	for _, s := range r.sessions {
		if s.Label == label {
			s.LastUsed = index
			return result{status: rsmpb.Status_OK, data: binary.BigEndian.AppendUint64(nil, s.Session)}
		}
	}
	r.lastSession++
	// LastUsed before evict: the newcomer is the most recent user.
	r.sessions[r.lastSession] = &rsmpb.SessionRecord{Session: r.lastSession, Label: label, LastUsed: index}
	r.evictSessions()
	return result{status: rsmpb.Status_OK, data: binary.BigEndian.AppendUint64(nil, r.lastSession)}
}

// applySession applies a command only if its number is its session's last
// + 1. A session that is not in the table (evicted, or never opened) is
// refused: its earlier commands may have been applied, so this one cannot
// be told apart from a retry of one of them.
func (r *replica) applySession(c *rsmpb.Command, index uint64, prepared any) result {
	rec := r.sessions[c.Session]
	if rec == nil && c.Seq == 1 && r.mutation == mutateUnknownSessionIsNew {
		rec = &rsmpb.SessionRecord{Session: c.Session, Label: fmt.Sprintf("session %d", c.Session), LastUsed: index}
		r.sessions[c.Session] = rec
		r.evictSessions()
	}
	switch {
	case rec == nil:
		return result{status: rsmpb.Status_SESSION_EXPIRED}
	case c.Seq == rec.Seq:
		rec.LastUsed = index
		if !rec.HasResult {
			return result{status: rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE}
		}
		return result{status: rsmpb.Status_OK, data: rec.Result}
	case c.Seq < rec.Seq:
		// LastUsed stays as the previous version keeps it: both evict alike.
		i, found := slices.BinarySearchFunc(rec.Earlier, c.Seq, func(e *rsmpb.SessionResult, seq uint64) int { return cmp.Compare(e.Seq, seq) })
		if !found || !rec.Earlier[i].HasResult {
			return result{status: rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE}
		}
		return result{status: rsmpb.Status_OK, data: rec.Earlier[i].Result}
	case c.Seq > rec.Seq+1:
		return result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE}
	}
	res := r.run(c, prepared)
	keepEarlier(rec, c.FirstPending)
	rec.Seq, rec.LastUsed = c.Seq, index
	rec.Result, rec.HasResult = res.data, res.status == rsmpb.Status_OK
	return res
}

// maxEarlierResults bounds the results a session keeps besides its last:
// a node awaiting more answers than this at once may find the oldest
// replaced (ErrApplicationResultUnavailable) if it must retry them.
const maxEarlierResults = record.MaxEarlierResults

// keepEarlier moves rec's last result among the earlier ones its node
// still awaits, before a new command replaces it, and forgets those the
// node no longer awaits (below firstPending). A node sends its commands
// concurrently under one session: a leader change can leave several of
// them applied with their answers lost, and each retry must find its own
// result, not only the last one's. firstPending 0 is the previous
// version's command: it keeps only the last.
func keepEarlier(rec *rsmpb.SessionRecord, firstPending uint64) {
	if firstPending != 0 && rec.Seq != 0 && rec.Seq >= firstPending {
		rec.Earlier = append(rec.Earlier, &rsmpb.SessionResult{Seq: rec.Seq, Result: rec.Result, HasResult: rec.HasResult})
	}
	drop := 0
	for drop < len(rec.Earlier) && (firstPending == 0 || rec.Earlier[drop].Seq < firstPending || len(rec.Earlier)-drop > maxEarlierResults) {
		drop++
	}
	if drop > 0 {
		rec.Earlier = slices.Delete(rec.Earlier, 0, drop)
	}
}

// run applies c to its machine; prepared, if not nil, is what the
// machine's Prepare returned for it.
func (r *replica) run(c *rsmpb.Command, prepared any) result {
	m, ok := r.machine(c.Machine)
	if !ok {
		return result{status: rsmpb.Status_UNKNOWN_MACHINE, data: []byte(c.Machine)}
	}
	if p, ok := m.(Preparer); ok && prepared != nil {
		return result{status: rsmpb.Status_OK, data: p.ApplyPrepared(c.Data, prepared)}
	}
	return result{status: rsmpb.Status_OK, data: m.Apply(c.Data)}
}

// applyLegacy is the previous version's rule, kept so that a log it wrote
// replays to the state it acknowledged: an unknown client starting at 1 is
// taken for a new one (which is why that version could apply a command
// twice after evicting its client).
func (r *replica) applyLegacy(c *rsmpb.Command, index uint64, prepared any) result {
	rec := r.clients[c.Client]
	switch {
	case rec == nil && c.Seq != 1:
		return result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE}
	case rec != nil && c.Seq == rec.Seq:
		rec.LastUsed = index
		if !rec.HasResult {
			return result{status: rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE}
		}
		return result{status: rsmpb.Status_OK, data: rec.Result}
	case rec != nil && c.Seq < rec.Seq:
		return result{status: rsmpb.Status_APPLICATION_RESULT_UNAVAILABLE}
	case rec != nil && c.Seq > rec.Seq+1:
		return result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE}
	}
	if rec == nil {
		rec = &rsmpb.ClientRecord{Client: c.Client, LastUsed: index}
		r.clients[c.Client] = rec
		r.evictClients()
	}
	res := r.run(c, prepared)
	rec.Seq, rec.LastUsed = c.Seq, index
	rec.Result, rec.HasResult = res.data, res.status == rsmpb.Status_OK
	return res
}

// evictSessions drops the least recently used sessions beyond the bound,
// ties by session number. Every replica evicts the same ones: LastUsed is
// a log index and the bound is the group's.
func (r *replica) evictSessions() {
	for len(r.sessions) > r.maxSessions() {
		var victim *rsmpb.SessionRecord
		for _, s := range r.sessions {
			if victim == nil || s.LastUsed < victim.LastUsed || (s.LastUsed == victim.LastUsed && s.Session < victim.Session) {
				victim = s
			}
		}
		delete(r.sessions, victim.Session)
	}
}

func (r *replica) evictClients() {
	for len(r.clients) > r.maxSessions() {
		var victim *rsmpb.ClientRecord
		for _, c := range r.clients {
			if victim == nil || c.LastUsed < victim.LastUsed || (c.LastUsed == victim.LastUsed && c.Client < victim.Client) {
				victim = c
			}
		}
		delete(r.clients, victim.Client)
	}
}

// snapshot captures the whole state after applied, every machine's bytes
// in it.
func (r *replica) snapshot() (*rsmpb.Snapshot, error) {
	s := r.head()
	for _, name := range r.names() {
		var buf bytes.Buffer
		if err := r.machines[name].Snapshot(&buf); err != nil {
			return nil, fmt.Errorf("rsm: snapshot of machine %q: %w", name, err)
		}
		s.Machines = append(s.Machines, &rsmpb.MachineState{Name: name, Data: buf.Bytes()})
	}
	return s, nil
}

// capture takes the state after applied for a snapshot written later:
// the metadata and the session table are copied, a machine that
// implements Capturer is captured in constant time, and only a machine
// without it is serialized now.
func (r *replica) capture() (*snapshot.Captured, error) {
	r.used()
	c := &snapshot.Captured{Head: r.head()}
	for _, name := range r.names() {
		m := r.machines[name]
		c.Head.Machines = append(c.Head.Machines, &rsmpb.MachineState{Name: name})
		if cm, ok := m.(Capturer); ok {
			c.Views = append(c.Views, cm.Capture())
			continue
		}
		var buf bytes.Buffer
		if err := m.Snapshot(&buf); err != nil {
			return nil, fmt.Errorf("rsm: snapshot of machine %q: %w", name, err)
		}
		c.Views = append(c.Views, snapshot.BytesView(buf.Bytes()))
	}
	return c, nil
}

func (r *replica) names() []string {
	names := make([]string, 0, len(r.machines))
	for name := range r.machines {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// head is a snapshot's metadata and session table, without the machines.
func (r *replica) head() *rsmpb.Snapshot {
	s := &rsmpb.Snapshot{StartIndex: r.snapStart, EndIndex: r.applied, MaxTerm: r.maxTerm, LastSession: r.lastSession}
	if s.StartIndex == 0 {
		s.StartIndex = 1
	}
	if r.settings != nil {
		s.Settings = proto.Clone(r.settings).(*rsmpb.Settings)
	}
	for _, c := range r.sessions {
		s.Sessions = append(s.Sessions, proto.Clone(c).(*rsmpb.SessionRecord))
	}
	slices.SortFunc(s.Sessions, func(a, b *rsmpb.SessionRecord) int { return cmp.Compare(a.Session, b.Session) })
	for _, c := range r.clients {
		s.Clients = append(s.Clients, proto.Clone(c).(*rsmpb.ClientRecord))
	}
	slices.SortFunc(s.Clients, func(a, b *rsmpb.ClientRecord) int { return cmp.Compare(a.Client, b.Client) })
	return s
}

// restore replaces the state with s, whose machines carry their bytes.
func (r *replica) restore(s *rsmpb.Snapshot) error {
	r.used()
	return r.restoreStored(snapshot.FromSnapshot(s))
}

// restoreStored replaces the state with s, each machine reading its bytes
// from the object. Machines registered here but absent from s start empty.
// If a machine fails to restore, every machine is returned to its empty
// state and the replica to index 0: a half-restored state must never have
// entries applied on top of it.
func (r *replica) restoreStored(s *snapshot.Stored) error {
	r.used()
	return r.restoreFrom(s.Snapshot, func(i int) (io.Reader, error) { return s.MachineReader(i), nil })
}

// restoreFrom is restoreStored from a snapshot's header s and a reader of
// each of its machines' bytes, asked for in name order (the order capture
// writes them, so a base streamed part by part is read front to back).
func (r *replica) restoreFrom(s *rsmpb.Snapshot, machine func(i int) (io.Reader, error)) error {
	r.used()
	have := map[string]int{}
	for i, m := range s.Machines {
		have[m.Name] = i
	}
	for _, name := range r.names() {
		var rd io.Reader
		var err error
		if i, ok := have[name]; ok {
			rd, err = machine(i)
		} else {
			rd = bytes.NewReader(r.initial[name])
		}
		if err == nil {
			err = r.machines[name].Restore(rd)
		}
		if err != nil {
			err = fmt.Errorf("rsm: restore machine %q from the snapshot ending at %d: %w", name, s.EndIndex, err)
			if s.EndIndex > 0 {
				if rerr := r.reset(); rerr != nil {
					return errors.Join(err, rerr)
				}
			}
			return err
		}
	}
	r.settings = nil
	if s.Settings != nil {
		r.settings = proto.Clone(s.Settings).(*rsmpb.Settings)
	}
	r.sessions = map[uint64]*rsmpb.SessionRecord{}
	for _, c := range s.Sessions {
		r.sessions[c.Session] = proto.Clone(c).(*rsmpb.SessionRecord)
	}
	r.lastSession = s.LastSession
	r.clients = map[string]*rsmpb.ClientRecord{}
	for _, c := range s.Clients {
		r.clients[c.Client] = proto.Clone(c).(*rsmpb.ClientRecord)
	}
	r.evictSessions()
	r.evictClients()
	r.applied, r.maxTerm = s.EndIndex, s.MaxTerm
	r.snapStart = s.EndIndex + 1
	r.check()
	return nil
}
