package lease

import (
	"slices"
	"time"
)

// SetHook installs a test hook on a MemberLeases coordinator before Start.
func SetHook(c *Coordinator, f func(shard string, leading bool, term uint64, at, deadline time.Time)) {
	c.impl.(*memberMode).hook = f
}

var Balance = balance

// BalanceFull is balance without its shortcut for an assignment that needs
// no change.
func BalanceFull(cur Assignment, live map[string]string, shards []string) (Assignment, bool) {
	ids := slices.Sorted(slices.Values(shards))
	return balanceAll(cur, live, slices.Compact(ids))
}

// SetHookStep installs a function run at the top of every round of a
// MemberLeases coordinator, before Start.
func SetHookStep(c *Coordinator, f func()) { c.impl.(*memberMode).hookStep = f }

// DecodeFast is the one-pass decoder of assignment records; DecodeReflect
// is encoding/json's decoding of the same.
func DecodeFast(data []byte) (Assignment, bool) {
	a, ids, ok := decodeFast(data)
	if ok && ids != nil && !sortedUnique(ids) {
		panic("decodeFast returned unsorted ids")
	}
	return a, ok
}

func EncodeReflect(a Assignment) []byte { return a.encodeReflect() }

// ThroughTable keeps a as a member keeps it and rebuilds it; TableBalanced
// is the shortcut over that form.
func ThroughTable(a Assignment) Assignment { return tableAssignment(newTable(a, nil)) }

func TableBalanced(a Assignment, live map[string]string, shards []string) bool {
	ids := slices.Compact(slices.Sorted(slices.Values(shards)))
	return newTable(a, nil).balanced(live, ids)
}

// DecodeTable reads a record as members do, into the compact form, and
// rebuilds it.
func DecodeTable(data []byte) (Assignment, error) {
	t, err := decodeTable(data)
	if err != nil {
		return Assignment{}, err
	}
	return tableAssignment(t), nil
}

// TableEncode writes a's record from the compact form, as members write it.
func TableEncode(a Assignment) []byte { return newTable(a, nil).encode() }

// tableAssignment rebuilds the full record from the compact form.
func tableAssignment(t *table) Assignment {
	a := t.hdr
	a.Evicted = slices.Clone(t.hdr.Evicted)
	a.Shards = make(map[string]Entry, len(t.ids))
	for i, id := range t.ids {
		e := t.at(i)
		e.Waits = slices.Clone(e.Waits)
		a.Shards[id] = e
	}
	return a
}

// SetBeforeNotify installs a function run by a ShardLeases coordinator
// just before it queues a change of its held set, before Start.
func SetBeforeNotify(c *Coordinator, f func(held []string)) { c.impl.(*shardMode).beforeNotify = f }

// EncodeMember is the encoding members write their records with.
func EncodeMember(r MemberRecord) []byte { return r.encode() }
