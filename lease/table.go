package lease

import (
	"slices"
	"strings"
)

// table is an assignment as a member keeps it between changes: its shards
// sorted, each with an index into a table of the few owner sessions and of
// the few wait lists in use, and its term. A map of Entry costs about 160
// bytes a shard; a table, 32 plus the ID, so that 100,000 shards held by
// several members in one process stay small. A table is never changed
// once built.
type table struct {
	hdr   Assignment // everything but the shards (hdr.Shards is nil)
	ids   []string   // sorted, unique
	ents  []tentry   // ents[i] is ids[i]'s
	names []Holder   // owner sessions (Term unused); names[0] is nobody
	waits [][]Holder // wait lists; waits[0] is none
}

type tentry struct {
	name, waits uint32
	term        uint64
}

// newTable keeps a; ids are its shards sorted, or nil to compute them.
func newTable(a Assignment, ids []string) *table {
	if ids == nil || len(ids) != len(a.Shards) {
		ids = sortedKeys(a.Shards)
	}
	b := newTableBuilder(ids)
	for _, id := range ids {
		b.add(id, a.Shards[id])
	}
	b.t.hdr = a
	b.t.hdr.Shards = nil
	return b.t
}

// tableBuilder builds a table one shard at a time, in order.
type tableBuilder struct {
	t       *table
	nameIdx map[Holder]uint32
	sorted  bool // every ID added was above the one before
	n       int
}

// newTableBuilder starts a table; ids, if known, are those to be added.
func newTableBuilder(ids []string) *tableBuilder {
	t := &table{ids: ids, ents: make([]tentry, 0, len(ids)), names: []Holder{{}}, waits: [][]Holder{nil}}
	if ids == nil {
		t.ids = []string{}
	}
	return &tableBuilder{t: t, nameIdx: map[Holder]uint32{{}: 0}, sorted: true, n: len(ids)}
}

func (b *tableBuilder) add(id string, e Entry) {
	t := b.t
	if b.n == 0 {
		if k := len(t.ids); k > 0 && t.ids[k-1] >= id {
			b.sorted = false
		}
		t.ids = append(t.ids, id)
	}
	n, ok := b.nameIdx[Holder{Owner: e.Owner, Session: e.Session}]
	if !ok {
		n = uint32(len(t.names))
		t.names = append(t.names, Holder{Owner: e.Owner, Session: e.Session})
		b.nameIdx[t.names[n]] = n
	}
	w := uint32(0)
	if len(e.Waits) > 0 {
		// Most moved shards wait for the same earlier owner: share equal
		// lists with the previous one.
		if last := t.waits[len(t.waits)-1]; len(t.waits) > 1 && slices.Equal(last, e.Waits) {
			w = uint32(len(t.waits) - 1)
		} else {
			w = uint32(len(t.waits))
			t.waits = append(t.waits, slices.Clone(e.Waits))
		}
	}
	t.ents = append(t.ents, tentry{name: n, waits: w, term: e.Term})
}

func emptyTable() *table { return newTable(Assignment{Shards: map[string]Entry{}}, []string{}) }

func (t *table) len() int { return len(t.ids) }

// at returns the i-th shard's entry. Its Waits are shared: do not change
// them.
func (t *table) at(i int) Entry {
	te := t.ents[i]
	n := t.names[te.name]
	return Entry{Owner: n.Owner, Session: n.Session, Term: te.term, Waits: t.waits[te.waits]}
}

// get returns shard id's entry.
func (t *table) get(id string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(t.ids, id, strings.Compare)
	if !ok {
		return Entry{}, false
	}
	return t.at(i), true
}

// isOwner reports whether the i-th shard is owned by owner's session.
func (t *table) isOwner(i int, owner, session string) bool {
	n := t.names[t.ents[i].name]
	return n.Owner == owner && n.Session == session
}

// balanced is the package's balanced over a table: whether balance would
// leave it as it is.
func (t *table) balanced(live map[string]string, ids []string) bool {
	if len(live) == 0 || !slices.Equal(t.ids, ids) {
		return false
	}
	share := (len(ids) + len(live) - 1) / len(live)
	liveName := make([]bool, len(t.names))
	for i, n := range t.names {
		liveName[i] = n.Owner != "" && live[n.Owner] == n.Session
	}
	liveWaits := make([]bool, len(t.waits))
	for i, ws := range t.waits {
		liveWaits[i] = true
		for _, h := range ws {
			liveWaits[i] = liveWaits[i] && live[h.Owner] == h.Session
		}
	}
	count := make([]int, len(t.names))
	for _, te := range t.ents {
		if !liveName[te.name] || !liveWaits[te.waits] {
			return false
		}
		if count[te.name]++; count[te.name] > share {
			return false
		}
	}
	return true
}
