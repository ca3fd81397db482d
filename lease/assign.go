package lease

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/tenure-io/tenure/internal/recordkind"
)

// Assignment is the record that maps shards to members in member-lease
// mode. It changes, by compare-and-swap, only when membership or the set of
// shards changes, never on a renewal.
type Assignment struct {
	// Kind says what the record is: Encode writes AssignmentKind. Records
	// of the previous version have none.
	Kind string `json:"kind,omitempty"`
	// Epoch grows by one with every change.
	Epoch uint64 `json:"epoch"`
	// Shards maps each shard to its entry.
	Shards map[string]Entry `json:"shards"`
	// UpdatedBy, LastUpdated: who wrote this version and when by its wall
	// clock, for people only.
	UpdatedBy   string    `json:"updatedBy"`
	LastUpdated time.Time `json:"lastUpdated"`
	// Nonce makes every version's bytes unique.
	Nonce string `json:"nonce"`
	// Evicted lists member sessions replaced by a tombstone, so that every
	// member learns of an eviction with the assignment that follows it,
	// without reading the tombstone itself.
	Evicted []Holder `json:"evicted,omitempty"`
}

// Entry is one shard's assignment.
type Entry struct {
	// Owner and Session name the member instance that may act on the
	// shard; empty Owner means unassigned.
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
	// Term is the shard's fencing token: it grows by one whenever the
	// shard changes hands.
	Term uint64 `json:"term"`
	// Waits lists earlier owners that were alive when the shard moved
	// and so may still be acting on it: the new owner acts only once each
	// has released the shard (or died, or left), or a full lease has
	// passed since it saw this entry.
	Waits []Holder `json:"waits,omitempty"`
}

// Holder is an owner of a shard at a term.
type Holder struct {
	Owner   string `json:"owner"`
	Session string `json:"session"`
	Term    uint64 `json:"term"`
}

func (e Entry) equal(o Entry) bool {
	return e.Owner == o.Owner && e.Session == o.Session && e.Term == o.Term && slices.Equal(e.Waits, o.Waits)
}

// maxRecordSize bounds every record a member reads, the assignment and
// member records: a larger object is refused by the store read itself
// (store.ErrTooLarge), before it is loaded, and by the decoders.
const maxRecordSize = 16 << 20

// AssignmentKind and MemberKind are the kind fields of the assignment and
// member records.
const (
	AssignmentKind = recordkind.LeaseAssignment
	MemberKind     = recordkind.LeaseMember
)

// DecodeAssignment parses an assignment record, refusing anything that is
// not one with an error that says why: a record whose kind is not
// AssignmentKind, or that has no kind and not the fields of the previous
// version's assignment (epoch, shards, updatedBy) or has those of another
// tenure record, is refused with an error matching ErrForeignRecord.
func DecodeAssignment(data []byte) (Assignment, error) {
	a, _, err := decodeAssignment(data)
	return a, err
}

// decodeAssignment also returns the shards' IDs in sorted order when the
// record lists them so (as Encode writes them), else nil.
func decodeAssignment(data []byte) (Assignment, []string, error) {
	if len(data) > maxRecordSize {
		return Assignment{}, nil, fmt.Errorf("lease: assignment record is %d bytes; the limit is %d", len(data), maxRecordSize)
	}
	a, ids, ok := decodeFast(data)
	if !ok {
		if err := recordkind.Require(data, AssignmentKind); err != nil {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record: %w: %w", ErrForeignRecord, err)
		}
		a, ids = Assignment{}, nil
		dec := json.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(&a); err != nil {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record: %w", err)
		}
		if dec.More() {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record has data after the JSON object")
		}
		if a.Kind != "" && a.Kind != AssignmentKind {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record: %w: it is a record of kind %q", ErrForeignRecord, a.Kind)
		}
	}
	for id, e := range a.Shards {
		if id == "" || !utf8.ValidString(id) {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record has an invalid shard ID %q", id)
		}
		if (e.Owner == "") != (e.Session == "") {
			return Assignment{}, nil, fmt.Errorf("lease: assignment record: shard %q has an owner without a session or the reverse", id)
		}
	}
	if a.Shards == nil {
		a.Shards = map[string]Entry{}
	}
	return a, ids, nil
}

// Encode returns the record's JSON.
func (a Assignment) Encode() []byte { return a.encode(nil) }

// balance computes the assignment that should follow cur, given the live
// members (owner -> session) and the set of shards. It is deterministic, so
// members that compute it concurrently agree, and sticky: a shard stays
// with its owner unless the owner is gone or holds more than its share,
// ceil(shards/members). Shards of dead or departed members move at once;
// a shard taken from a live member lists it in Waits, so the new owner
// waits for its release. changed reports whether the result differs from
// cur; if not, next is cur.
func balance(cur Assignment, live map[string]string, shards []string) (next Assignment, changed bool) {
	ids := shards
	if !sortedUnique(ids) {
		ids = slices.Clone(shards)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	if balanced(cur, live, ids) {
		return cur, false
	}
	return balanceAll(cur, live, ids)
}

// balanceAll is balance over ids, sorted and unique, computed in full.
func balanceAll(cur Assignment, live map[string]string, ids []string) (next Assignment, changed bool) {
	get := func(id string) (Entry, bool) { e, ok := cur.Shards[id]; return e, ok }
	ents, changed := balanceEntries(get, len(cur.Shards), live, ids)
	if !changed {
		return cur, false
	}
	next = Assignment{Epoch: cur.Epoch + 1, Shards: make(map[string]Entry, len(ids))}
	for i, id := range ids {
		next.Shards[id] = ents[i]
	}
	return next, true
}

// balanceEntries computes balance's result over ids, sorted and unique,
// as the entries of ids in order, from the current assignment's entries
// (get) and their number (n).
func balanceEntries(get func(id string) (Entry, bool), n int, live map[string]string, ids []string) (next []Entry, changed bool) {
	next = make([]Entry, len(ids))
	owners := make([]string, 0, len(live))
	for o := range live {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	alive := func(h Holder) bool { return live[h.Owner] == h.Session }

	count := map[string]int{}
	var free []int // shards needing an owner, by index
	for i, id := range ids {
		e, _ := get(id)
		// Holders that died or left have no rights left: stop waiting
		// for them.
		if !slices.ContainsFunc(e.Waits, func(h Holder) bool { return !alive(h) }) {
			// All alive: the list is kept as it is (lists are never
			// changed in place; appendHolder copies).
		} else {
			var waits []Holder
			for _, h := range e.Waits {
				if alive(h) {
					waits = append(waits, h)
				}
			}
			e.Waits = waits
		}
		switch {
		case e.Owner == "":
			next[i] = e
			free = append(free, i)
		case live[e.Owner] == "":
			// The owner died or left: its rights have expired.
			next[i] = Entry{Term: e.Term, Waits: e.Waits}
			free = append(free, i)
		case live[e.Owner] != e.Session:
			// The owner restarted: same member, new session, new term.
			// The old session is dead (its record was observed dead).
			e.Session, e.Term = live[e.Owner], e.Term+1
			next[i] = e
			count[e.Owner]++
		default:
			next[i] = e
			count[e.Owner]++
		}
	}
	if len(owners) > 0 {
		share := (len(ids) + len(owners) - 1) / len(owners)
		// Take the excess from members over their share, the
		// highest-sorting shards first, so that the choice is
		// deterministic.
		for i := len(ids) - 1; i >= 0; i-- {
			e := next[i]
			if e.Owner != "" && count[e.Owner] > share {
				count[e.Owner]--
				e.Waits = appendHolder(e.Waits, Holder{Owner: e.Owner, Session: e.Session, Term: e.Term})
				e.Owner, e.Session = "", ""
				next[i] = e
				free = append(free, i)
			}
		}
		slices.Sort(free)
		for _, i := range free {
			e := next[i]
			best := ""
			for _, o := range owners {
				if best == "" || count[o] < count[best] {
					best = o
				}
			}
			count[best]++
			e.Owner, e.Session, e.Term = best, live[best], e.Term+1
			next[i] = e
		}
	}
	changed = len(ids) != n
	for i, id := range ids {
		if old, ok := get(id); !ok || !old.equal(next[i]) {
			changed = true
			break
		}
	}
	return next, changed
}

// balanced reports, without building the next assignment, whether balance
// would leave cur as it is: it holds exactly the shards ids (sorted,
// unique), each owned by a live session and waiting only for live ones,
// and no member holds more than its share.
func balanced(cur Assignment, live map[string]string, ids []string) bool {
	if len(live) == 0 || len(cur.Shards) != len(ids) {
		return false
	}
	share := (len(ids) + len(live) - 1) / len(live)
	count := make(map[string]int, len(live))
	for _, id := range ids {
		e, ok := cur.Shards[id]
		if !ok || e.Owner == "" || live[e.Owner] != e.Session {
			return false
		}
		for _, h := range e.Waits {
			if live[h.Owner] != h.Session {
				return false
			}
		}
		if count[e.Owner]++; count[e.Owner] > share {
			return false
		}
	}
	return true
}

// appendHolder adds h to hs, keeping one entry per owner session: the one
// with the highest term (a release acknowledges every lower term too).
func appendHolder(hs []Holder, h Holder) []Holder {
	out := slices.Clone(hs)
	for i, x := range out {
		if x.Owner == h.Owner && x.Session == h.Session {
			out[i].Term = max(x.Term, h.Term)
			return out
		}
	}
	return append(out, h)
}
