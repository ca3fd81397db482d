package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tenure-io/tenure/internal/recordkind"
)

// Member-lease mode. Keys under the prefix:
//
//	members/<owner>/<session>   one record per member instance, renewed every RenewPeriod
//	assignment.json             shard -> owner, session, term; changed only on membership change
//
// Every RenewPeriod a member renews its record (one compare-and-swap) and
// lists the prefix (one request), which returns the version of every
// member record and of the assignment: a record whose version has not
// changed for the holder's lease (the larger of our LeaseDuration and the
// leaseMillis it wrote), as this member observed it, belongs to a dead
// member. The assignment is read only when its version changes. A member
// acts on a shard only while the assignment names its session for the
// shard, its own record was renewed, and the assignment was confirmed
// unchanged, both within RenewDeadline.

// MemberRecord is a member's lease record.
type MemberRecord struct {
	// Kind says what the record is: every record a member writes says
	// MemberKind. Records of the previous version have none.
	Kind        string    `json:"kind,omitempty"`
	OwnerID     string    `json:"ownerID"`
	Session     string    `json:"session"`
	LastUpdated time.Time `json:"lastUpdated"`
	LeaseMillis int64     `json:"leaseMillis"`
	Nonce       string    `json:"nonce"`
	Counter     uint64    `json:"counter"`
	// Applied is the highest assignment epoch this session has applied:
	// every shard that assignment does not give it, at the term it gives,
	// has been stopped and its work has returned. An owner waiting for
	// this member's handoff of a shard it sees assigned to itself at epoch
	// E may start once Applied ≥ E. One number, whatever the number of
	// shards that moved.
	Applied uint64 `json:"applied,omitempty"`
	// Released maps shards to the last term this member held them at.
	// Earlier versions wrote it instead of Applied; it is still honoured.
	Released map[string]uint64 `json:"released,omitempty"`
	// EvictedBy is set on a tombstone: another member judged this one dead
	// and replaced its record by compare-and-swap on the version it saw
	// unchanged for a lease. The evicted session never acts again.
	EvictedBy string `json:"evictedBy,omitempty"`
}

// DecodeMemberRecord parses a member record. A record whose kind is not
// MemberKind, or that has no kind and not the previous version's ownerID or
// has the fields of another tenure record, is refused with an error
// matching ErrForeignRecord.
func DecodeMemberRecord(data []byte) (MemberRecord, error) {
	var r MemberRecord
	if len(data) > maxRecordSize {
		return r, fmt.Errorf("lease: member record is %d bytes", len(data))
	}
	if err := recordkind.Require(data, MemberKind); err != nil {
		return r, fmt.Errorf("lease: member record: %w: %w", ErrForeignRecord, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return MemberRecord{}, fmt.Errorf("lease: member record: %w", err)
	}
	if r.Kind != "" && r.Kind != MemberKind {
		return MemberRecord{}, fmt.Errorf("lease: member record: %w: it is a record of kind %q", ErrForeignRecord, r.Kind)
	}
	if r.OwnerID == "" || r.Session == "" {
		return MemberRecord{}, errors.New("lease: member record without ownerID or session")
	}
	if r.LeaseMillis < 0 {
		return MemberRecord{}, fmt.Errorf("lease: member record has a negative leaseMillis %d", r.LeaseMillis)
	}
	return r, nil
}

// encode returns the record's JSON, with its kind.
func (r MemberRecord) encode() []byte {
	r.Kind = MemberKind
	b, err := json.Marshal(r)
	if err != nil {
		// Strings, numbers, a time and a map of numbers: Marshal cannot
		// fail on them.
		panic("lease: encoding a member record: " + err.Error())
	}
	return b
}

const assignmentKey = "assignment.json"

func memberKey(owner, session string) string {
	return "members/" + url.PathEscape(owner) + "/" + session
}

func parseMemberKey(rel string) (owner, session string, ok bool) {
	rest, ok := strings.CutPrefix(rel, "members/")
	if !ok {
		return "", "", false
	}
	o, s, ok := strings.Cut(rest, "/")
	if !ok || s == "" || strings.Contains(s, "/") {
		return "", "", false
	}
	owner, err := url.PathUnescape(o)
	if err != nil || owner == "" {
		return "", "", false
	}
	return owner, s, true
}
