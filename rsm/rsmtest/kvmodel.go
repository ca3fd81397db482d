package rsmtest

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/anishathalye/porcupine"
)

// KVOp is the kind of a KV operation.
type KVOp uint8

const (
	KVGet KVOp = iota
	KVPut
	KVDelete
	KVCAS
)

func (o KVOp) String() string {
	switch o {
	case KVGet:
		return "get"
	case KVPut:
		return "put"
	case KVDelete:
		return "delete"
	case KVCAS:
		return "cas"
	}
	return fmt.Sprintf("KVOp(%d)", uint8(o))
}

// MarshalText names the op in saved histories.
func (o KVOp) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// KVInput is a call of the kv machine (rsm/kv): Value for put and cas,
// Expect for cas (the ModRevision the key must have, 0 for absent). Every
// value written in a history must be unique and not empty.
type KVInput struct {
	Op     KVOp   `json:"op"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Expect uint64 `json:"expect,omitempty"`
}

// KVOutput is what a call returned.
//
//   - Unknown: a write whose result is unknown. With Return Pending it may
//     or may not have applied (ErrUnknownOutcome, a timeout, a crash);
//     with a real Return it applied but its result is lost
//     (ErrApplicationResultUnavailable).
//   - get: Found, and Value, Rev (ModRevision) and Create (CreateRevision)
//     if found.
//   - put: Rev, the revision of the write.
//   - delete: Found (existed) and Rev (the delete's revision if it
//     existed, else the current revision).
//   - cas: Found (swapped) and Rev (the key's ModRevision afterwards, 0 if
//     absent).
type KVOutput struct {
	Unknown bool   `json:"unknown,omitempty"`
	Found   bool   `json:"found,omitempty"`
	Value   string `json:"value,omitempty"`
	Rev     uint64 `json:"rev,omitempty"`
	Create  uint64 `json:"create,omitempty"`
}

// kvState is one key in the model. mod and create are 0 when unknown: the
// key was last written by a write whose result was lost; the first read
// that sees them fixes them (revisions never change once written). floor
// is the highest revision known of a mutation of the key so far: the next
// mutation's revision is above it.
type kvState struct {
	present     bool
	value       string
	mod, create uint64
	floor       uint64
}

// KVModel is a porcupine model of the kv machine, partitioned by key.
//
// Revisions are global in the machine (one counter for every key), so a
// per-key model cannot predict them: it checks what a single key's
// history determines. A write's revision is above the key's previous
// ModRevision; a read returns the value, ModRevision and CreateRevision of
// the last write, and a cas swaps exactly when the key's ModRevision is
// the expected one (or the key is absent and 0 is expected). A write whose
// result was lost leaves the key's revisions unknown until a read shows
// them; a cas expecting a revision it read cannot match an unknown one,
// since revisions are unique. CheckKVRevisions checks what crosses keys.
var KVModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(KVInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(state, input, output any) (bool, any) {
		return kvStep(state.(kvState), input.(KVInput), output.(KVOutput))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(KVInput), output.(KVOutput)
		var call string
		switch in.Op {
		case KVGet:
			call = fmt.Sprintf("get(%s)", in.Key)
		case KVPut:
			call = fmt.Sprintf("put(%s, %s)", in.Key, in.Value)
		case KVDelete:
			call = fmt.Sprintf("delete(%s)", in.Key)
		case KVCAS:
			call = fmt.Sprintf("cas(%s, @%d -> %s)", in.Key, in.Expect, in.Value)
		}
		switch {
		case out.Unknown:
			return call + " -> ?"
		case in.Op == KVGet && !out.Found:
			return call + " -> absent"
		case in.Op == KVGet:
			return fmt.Sprintf("%s -> %s @%d (created @%d)", call, out.Value, out.Rev, out.Create)
		case in.Op == KVPut:
			return fmt.Sprintf("%s -> @%d", call, out.Rev)
		case in.Op == KVDelete:
			return fmt.Sprintf("%s -> existed=%v @%d", call, out.Found, out.Rev)
		}
		return fmt.Sprintf("%s -> swapped=%v @%d", call, out.Found, out.Rev)
	},
	DescribeState: func(state any) string {
		s := state.(kvState)
		if !s.present {
			return "absent"
		}
		rev := func(r uint64) string {
			if r == 0 {
				return "?"
			}
			return fmt.Sprint(r)
		}
		return fmt.Sprintf("%s @%s (created @%s)", s.value, rev(s.mod), rev(s.create))
	},
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return fmt.Sprint(info)
	},
}

// learn fixes an unknown revision of s from a read: got must be above
// every revision known before the unknown write.
func learn(s kvState, mod, create uint64) (kvState, bool) {
	ok := true
	if s.mod == 0 {
		ok = mod > s.floor
		s.mod = mod
	} else {
		ok = s.mod == mod
	}
	if create != 0 {
		if s.create == 0 {
			s.create = create
		} else {
			ok = ok && s.create == create
		}
	}
	s.floor = max(s.floor, s.mod)
	return s, ok
}

func kvStep(s kvState, in KVInput, out KVOutput) (bool, any) {
	// written is the state after a write of in.Value at revision rev
	// (0: unknown).
	written := func(rev uint64) kvState {
		create := rev
		if s.present {
			create = s.create
		}
		return kvState{present: true, value: in.Value, mod: rev, create: create, floor: max(s.floor, rev)}
	}
	switch in.Op {
	case KVGet:
		if out.Found != s.present {
			return false, s
		}
		if !s.present {
			return true, s
		}
		if out.Value != s.value || out.Rev == 0 || out.Create == 0 || out.Create > out.Rev {
			return false, s
		}
		return learnStep(s, out.Rev, out.Create)
	case KVPut:
		if out.Unknown {
			return true, written(0)
		}
		if out.Rev <= s.floor {
			return false, s
		}
		return true, written(out.Rev)
	case KVDelete:
		if out.Unknown {
			return true, kvState{floor: s.floor}
		}
		if out.Found != s.present {
			return false, s
		}
		if out.Found && out.Rev <= s.floor || !out.Found && out.Rev < s.floor {
			return false, s
		}
		return true, kvState{floor: max(s.floor, out.Rev)}
	case KVCAS:
		// An unknown ModRevision is never one the client read: it
		// belongs to a write no read has seen, and revisions are unique.
		holds := (in.Expect == 0 && !s.present) || (s.present && s.mod != 0 && s.mod == in.Expect)
		if out.Unknown {
			if holds {
				return true, written(0)
			}
			return true, s
		}
		if out.Found != holds {
			return false, s
		}
		if holds {
			if out.Rev <= s.floor {
				return false, s
			}
			return true, written(out.Rev)
		}
		if !s.present {
			return out.Rev == 0, s
		}
		if out.Rev == 0 {
			return false, s
		}
		return learnStep(s, out.Rev, 0)
	}
	return false, s
}

func learnStep(s kvState, mod, create uint64) (bool, any) {
	s, ok := learn(s, mod, create)
	return ok, s
}

// CheckKVRevisions checks what KVModel cannot see across keys, given that
// the kv machine has one revision counter that every successful mutation
// increments:
//
//   - no two mutations share a revision, and a read's ModRevision belongs
//     to the mutation of that key and value, if that mutation's revision
//     is known;
//   - revisions follow real time: a mutation invoked after an operation
//     returned a revision has a higher revision, and a delete of an
//     absent key reports a current revision at least every revision
//     returned before it was invoked.
//
// It returns a description of every violation found (at most 20).
func CheckKVRevisions(ops []porcupine.Operation) []string {
	var bad []string
	report := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	type mutation struct {
		op    porcupine.Operation
		key   string
		value string // "" for a delete
	}
	owner := map[uint64]mutation{}
	for _, op := range ops {
		in, out := op.Input.(KVInput), op.Output.(KVOutput)
		if out.Unknown {
			continue
		}
		m := mutation{op: op, key: in.Key}
		switch {
		case in.Op == KVPut, in.Op == KVCAS && out.Found:
			m.value = in.Value
		case in.Op == KVDelete && out.Found:
		default:
			continue
		}
		if prev, ok := owner[out.Rev]; ok {
			report("revision %d returned by two mutations: %s and %s",
				out.Rev, KVModel.DescribeOperation(prev.op.Input, prev.op.Output), KVModel.DescribeOperation(op.Input, op.Output))
			continue
		}
		owner[out.Rev] = m
	}
	for _, op := range ops {
		in, out := op.Input.(KVInput), op.Output.(KVOutput)
		if in.Op != KVGet || !out.Found {
			continue
		}
		if m, ok := owner[out.Rev]; ok && (m.key != in.Key || m.value != out.Value) {
			report("%s shows revision %d, which is that of %s",
				KVModel.DescribeOperation(op.Input, op.Output), out.Rev, KVModel.DescribeOperation(m.op.Input, m.op.Output))
		}
	}
	// Real time: every revision an operation returned existed when it
	// returned.
	type seen struct {
		at  int64
		rev uint64
		op  porcupine.Operation
	}
	var obs []seen
	for _, op := range ops {
		out := op.Output.(KVOutput)
		if out.Unknown || op.Return == Pending || out.Rev == 0 {
			continue
		}
		obs = append(obs, seen{at: op.Return, rev: out.Rev, op: op})
	}
	slices.SortFunc(obs, func(a, b seen) int { return cmp.Compare(a.at, b.at) })
	byCall := append([]porcupine.Operation(nil), ops...)
	slices.SortFunc(byCall, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var maxSeen seen
	i := 0
	for _, op := range byCall {
		for ; i < len(obs) && obs[i].at < op.Call; i++ {
			if obs[i].rev > maxSeen.rev {
				maxSeen = obs[i]
			}
		}
		in, out := op.Input.(KVInput), op.Output.(KVOutput)
		if out.Unknown {
			continue
		}
		mutated := in.Op == KVPut || (in.Op == KVCAS && out.Found) || (in.Op == KVDelete && out.Found)
		if mutated && out.Rev <= maxSeen.rev {
			report("%s got revision %d, but %s had returned revision %d before it was invoked",
				KVModel.DescribeOperation(op.Input, op.Output), out.Rev, KVModel.DescribeOperation(maxSeen.op.Input, maxSeen.op.Output), maxSeen.rev)
		}
		if in.Op == KVDelete && !out.Found && out.Rev < maxSeen.rev {
			report("%s reports current revision %d, but %s had returned revision %d before it was invoked",
				KVModel.DescribeOperation(op.Input, op.Output), out.Rev, KVModel.DescribeOperation(maxSeen.op.Input, maxSeen.op.Output), maxSeen.rev)
		}
	}
	return bad
}
