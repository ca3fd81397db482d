// Package recordkind names the kinds of JSON record tenure writes to a
// store and tells them apart, so that no component takes another's record
// (or another program's JSON) for its own and writes over it.
//
// Every JSON record tenure writes carries a "kind" field with one of the
// constants below. Records of the previous version carry none; for them Of
// infers the kind from the fields that only that kind of record has. The
// binary objects of the replicated state machine (log entries, snapshots,
// manifests, segments, base parts) are framed with a magic number and a
// kind byte of their own instead.
package recordkind

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The kinds of JSON record tenure writes.
const (
	// Lock is an election lock record (election.Record).
	Lock = "tenure.lock"
	// LeaseMember is a member's lease record in member-lease mode
	// (lease.MemberRecord).
	LeaseMember = "tenure.lease.member"
	// LeaseAssignment is the assignment record of member-lease mode
	// (lease.Assignment).
	LeaseAssignment = "tenure.lease.assignment"
	// RSMLeaderState is a replicated state machine group's
	// leader_state.json.
	RSMLeaderState = "tenure.rsm.leader_state"
	// RSMPeer is a replicated state machine node's peer record,
	// {group}/peers/{id}: the keys it proves to its peers.
	RSMPeer = "tenure.rsm.peer"
)

// names says what each kind is, for error messages.
var names = map[string]string{
	Lock:            "an election lock record",
	LeaseMember:     "a shard-lease member record",
	LeaseAssignment: "a shard-lease assignment record",
	RSMLeaderState:  "a replicated state machine group's leader_state.json",
	RSMPeer:         "a replicated state machine node's peer record",
}

// legacy lists, for records of the previous version (no kind field), the
// fields that only that kind of record has, in the order they are tried: a
// group's leader state also has the lock's leaderID, so it comes first.
var legacy = []struct {
	kind   string
	fields []string
}{
	{RSMLeaderState, []string{"followers", "commitIndex", "checksum", "incarnation"}},
	{Lock, []string{"leaderID"}},
	{LeaseMember, []string{"ownerID"}},
	{LeaseAssignment, []string{"epoch", "shards", "updatedBy"}},
}

// Found is what Of finds in a JSON object.
type Found struct {
	// Kind is the record's kind: the value of its kind field, or, when
	// it has none, the kind its fields show ("" if none does).
	Kind string
	// Declared is true when the record has a kind field.
	Declared bool
	// By is, for an inferred kind, the distinguishing field found.
	By string
}

// String describes what was found, for error messages.
func (f Found) String() string {
	name := names[f.Kind]
	switch {
	case f.Declared && name != "":
		return fmt.Sprintf("of kind %q (%s)", f.Kind, name)
	case f.Declared:
		return fmt.Sprintf("of kind %q, which this version does not know", f.Kind)
	case f.Kind != "":
		return fmt.Sprintf("without a kind field, with the field %q of %s (%s)", f.By, name, f.Kind)
	}
	return "without a kind field"
}

// Of reports the kind of the JSON object in data. ok is false when data is
// not a JSON object, or its kind field is not a string.
func Of(data []byte) (f Found, ok bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return Found{}, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Found{}, false
	}
	// Field names as encoding/json matches them into a record's struct:
	// without regard to case.
	fields := make(map[string]json.RawMessage, len(raw))
	for k, v := range raw {
		fields[strings.ToLower(k)] = v
	}
	if raw, has := fields["kind"]; has {
		var k string
		if err := json.Unmarshal(raw, &k); err != nil {
			return Found{}, false
		}
		return Found{Kind: k, Declared: true}, true
	}
	for _, l := range legacy {
		for _, name := range l.fields {
			if _, has := fields[strings.ToLower(name)]; has {
				return Found{Kind: l.kind, By: name}, true
			}
		}
	}
	return Found{}, true
}

// Check reports whether data, a JSON object, may be read as a record of
// kind want: nil if its kind field says want, or if it has none and its
// fields show no other kind of tenure record (a record of the previous
// version, or of a program that writes records of this shape, such as
// S3lect's lockfile for Lock); otherwise an error that names what it is.
// Bytes that are not a JSON object are left to the reader's decoder.
func Check(data []byte, want string) error {
	f, ok := Of(data)
	if !ok || f.Kind == want || f.Kind == "" && !f.Declared {
		return nil
	}
	return fmt.Errorf("it is a record %s, not %s", f, names[want])
}

// Require is Check for a reader that knows the previous version's records
// by their fields: a record without a kind field is accepted only if its
// fields show want. Bytes that are not a JSON object are left to the
// reader's decoder.
func Require(data []byte, want string) error {
	f, ok := Of(data)
	if !ok || f.Kind == want {
		return nil
	}
	if !f.Declared && f.Kind == "" {
		return fmt.Errorf("it is a JSON object without a kind field or the fields of %s", names[want])
	}
	return fmt.Errorf("it is a record %s, not %s", f, names[want])
}

// Describe says what data looks like, for the error of a reader that could
// not decode it: a tenure record of some kind, a JSON object, or other
// bytes. It returns "" for bytes it has nothing to say about.
func Describe(data []byte) string {
	f, ok := Of(data)
	switch {
	case !ok:
		return ""
	case f.Declared || f.Kind != "":
		return "it is a record " + f.String()
	}
	return "it is a JSON object without a kind field"
}
