package rsm

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// replica is the pure, single-threaded core every node runs: it applies log
// entries strictly in index order under the validity rule, deduplicates
// commands and keeps the exactly-once table. It does no I/O and reads no
// clock, so every replica given the same entries reaches the same state.
//
// The validity rule: an entry is valid only if its term is at least the
// highest term of the valid entries before it (maxTerm, which starts from
// the snapshot's). Invalid entries, a deposed leader's late writes, advance
// the index and change nothing.
type replica struct {
	machines   map[string]StateMachine
	initial    map[string][]byte // each machine's empty state, for restore
	applied    uint64            // last index applied
	maxTerm    uint64            // highest term of the valid entries up to applied
	snapStart  uint64            // start index of the snapshot last restored or taken
	clients    map[string]*rsmpb.ClientRecord
	maxClients int
}

func newReplica(machines map[string]StateMachine, maxClients int) (*replica, error) {
	r := &replica{machines: machines, initial: map[string][]byte{}, clients: map[string]*rsmpb.ClientRecord{}, maxClients: maxClients}
	for name, m := range machines {
		var buf bytes.Buffer
		if err := m.Snapshot(&buf); err != nil {
			return nil, fmt.Errorf("rsm: snapshot of the empty machine %q: %w", name, err)
		}
		r.initial[name] = buf.Bytes()
	}
	return r, nil
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
	r.applied = e.Index
	if e.Term < r.maxTerm {
		return false, nil
	}
	r.maxTerm = e.Term
	results = make([]result, len(e.Commands))
	for i, c := range e.Commands {
		results[i] = r.applyCommand(c, e.Index)
	}
	return true, results
}

func (r *replica) applyCommand(c *rsmpb.Command, index uint64) result {
	rec := r.clients[c.Client]
	switch {
	case rec == nil && c.Seq != 1:
		// A client we do not know (new, or evicted from the table) whose
		// earlier commands we cannot vouch for.
		return result{status: rsmpb.Status_REQUEST_OUT_OF_SEQUENCE, data: []byte("unknown client")}
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
		// LastUsed before evict: the newcomer is the most recent user.
		rec = &rsmpb.ClientRecord{Client: c.Client, LastUsed: index}
		r.clients[c.Client] = rec
		r.evict()
	}
	var res result
	if m, ok := r.machines[c.Machine]; ok {
		res = result{status: rsmpb.Status_OK, data: m.Apply(c.Data)}
	} else {
		res = result{status: rsmpb.Status_UNKNOWN_MACHINE, data: []byte(c.Machine)}
	}
	rec.Seq, rec.LastUsed, rec.HasResult = c.Seq, index, true
	rec.Result = res.data
	if res.status != rsmpb.Status_OK {
		rec.HasResult = false
	}
	return res
}

// evict drops the least recently used clients beyond maxClients. Every
// replica evicts the same ones: LastUsed is a log index.
func (r *replica) evict() {
	for len(r.clients) > r.maxClients {
		var victim *rsmpb.ClientRecord
		for _, c := range r.clients {
			if victim == nil || c.LastUsed < victim.LastUsed || (c.LastUsed == victim.LastUsed && c.Client < victim.Client) {
				victim = c
			}
		}
		delete(r.clients, victim.Client)
	}
}

// snapshot captures the whole state after applied.
func (r *replica) snapshot() (*rsmpb.Snapshot, error) {
	s := &rsmpb.Snapshot{StartIndex: r.snapStart, EndIndex: r.applied, MaxTerm: r.maxTerm}
	if s.StartIndex == 0 {
		s.StartIndex = 1
	}
	names := make([]string, 0, len(r.machines))
	for name := range r.machines {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		var buf bytes.Buffer
		if err := r.machines[name].Snapshot(&buf); err != nil {
			return nil, fmt.Errorf("rsm: snapshot of machine %q: %w", name, err)
		}
		s.Machines = append(s.Machines, &rsmpb.MachineState{Name: name, Data: buf.Bytes()})
	}
	for _, c := range r.clients {
		s.Clients = append(s.Clients, &rsmpb.ClientRecord{Client: c.Client, Seq: c.Seq, Result: c.Result, HasResult: c.HasResult, LastUsed: c.LastUsed})
	}
	slices.SortFunc(s.Clients, func(a, b *rsmpb.ClientRecord) int { return cmp.Compare(a.Client, b.Client) })
	return s, nil
}

// restore replaces the state with s. Machines registered here but absent
// from s start empty: restored from an empty reader.
func (r *replica) restore(s *rsmpb.Snapshot) error {
	have := map[string][]byte{}
	for _, m := range s.Machines {
		have[m.Name] = m.Data
	}
	for name, m := range r.machines {
		data, ok := have[name]
		if !ok {
			data = r.initial[name]
		}
		if err := m.Restore(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("rsm: restore machine %q from the snapshot ending at %d: %w", name, s.EndIndex, err)
		}
	}
	r.clients = map[string]*rsmpb.ClientRecord{}
	for _, c := range s.Clients {
		r.clients[c.Client] = &rsmpb.ClientRecord{Client: c.Client, Seq: c.Seq, Result: c.Result, HasResult: c.HasResult, LastUsed: c.LastUsed}
	}
	r.evict()
	r.applied, r.maxTerm = s.EndIndex, s.MaxTerm
	r.snapStart = s.EndIndex + 1
	return nil
}
