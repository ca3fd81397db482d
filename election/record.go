package election

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/tenure-io/tenure/internal/recordkind"
)

// MaxRecordSize is the largest lock record Decode accepts. Real records are
// a few hundred bytes; anything larger is not ours.
const MaxRecordSize = 64 << 10

// Record is the lock record, stored as JSON at Config.LockfilePath and
// served by the leader's peer endpoint. It is a superset of S3lect's
// lockfile (leaderID, leaderAddr, lastUpdated), so S3lect's tools can read
// it.
type Record struct {
	// Kind says what the record is: Encode writes RecordKind. S3lect's
	// lockfile and the previous version's records have none; DecodeRecord
	// refuses a record of any other kind (ErrForeignRecord).
	Kind       string `json:"kind,omitempty"`
	LeaderID   string `json:"leaderID"`
	LeaderAddr string `json:"leaderAddr"`
	// LastUpdated is the writer's wall-clock time, for people only: no
	// node ever compares it with its own clock.
	LastUpdated time.Time `json:"lastUpdated"`
	// Term is the fencing token: it grows by one on every acquisition. A
	// record without one (0) is never taken over; see CheckTerm.
	Term uint64 `json:"term"`
	// LeaseMillis is the writer's LeaderTimeout: a follower takes the lock
	// only when the record has stayed unchanged for this long (or for its
	// own LeaderTimeout, if longer) on its own clock.
	LeaseMillis int64 `json:"leaseMillis"`
	// Session identifies one elector instance; two processes configured
	// with the same ServerID have different sessions.
	Session string `json:"session"`
	// Nonce makes every write's bytes unique, so that content-hash
	// versions (S3 ETags) never repeat and an ambiguous write can be
	// recognised by reading it back.
	Nonce string `json:"nonce"`
	// Counter counts the writes of one session.
	Counter uint64 `json:"counter"`
	// Released is set by a leader that stepped down; followers may take
	// the lock at once.
	Released bool `json:"released"`
	// Priority is the holder's Config.Priority: a live member with a
	// higher one asks the holder to hand over.
	Priority int `json:"priority,omitempty"`
	// HandoverTo, when set on a held record, is the session of a member
	// that asks the holder to hand over (it wrote this copy of the
	// holder's record); on a released record, the session the holder
	// handed over to, which may take it at once (others wait).
	HandoverTo string `json:"handoverTo,omitempty"`
	// HandoverPriority is the asking member's priority.
	HandoverPriority int `json:"handoverPriority,omitempty"`
	// PeerKey is the fingerprint of the public key the leader's peer
	// server presents ("sha256:" and the base64url SHA-256 of its
	// SubjectPublicKeyInfo; see PeerKeyOf). Followers that ask the leader
	// accept only a server with this key: whoever can write the record can
	// already lead, so the store vouches for the key. Empty when the writer
	// serves no peer endpoint of its own; S3lect ignores it.
	PeerKey string `json:"peerKey,omitempty"`
}

// RecordKind is the kind field of every lock record tenure writes.
const RecordKind = recordkind.Lock

// ErrForeignRecord: the object where the lock record belongs is another
// kind of record (a replicated state machine group's leader_state.json, a
// shard-lease record, a record of a kind this version does not know). A
// member never takes it over, asks for it or writes over it; Repair
// refuses it. Point LockfilePath at a key of its own.
var ErrForeignRecord = errors.New("election: the object is not a lock record")

// Encode returns the record's JSON, with Kind set to RecordKind.
func (r Record) Encode() []byte {
	r.Kind = RecordKind
	b, err := json.Marshal(r)
	if err != nil {
		// Record has only strings, numbers, booleans and a time: Marshal
		// cannot fail on it.
		panic("election: encoding a record: " + err.Error())
	}
	return b
}

// DecodeRecord parses a lock record. It accepts records written by S3lect
// (no kind, term, session or nonce) and ignores unknown fields, and refuses
// anything that is not a JSON object of the right shape, with an error that
// says why. A record whose kind field is not RecordKind, or that has no
// kind field but the fields of another tenure record (a group's
// leader_state.json: followers, commitIndex, checksum; a shard-lease member
// or assignment record: ownerID, epoch, shards), is refused with an error
// matching ErrForeignRecord that names what it is.
func DecodeRecord(data []byte) (Record, error) {
	var r Record
	if len(data) > MaxRecordSize {
		return r, fmt.Errorf("election: lock record is %d bytes; the limit is %d", len(data), MaxRecordSize)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return r, fmt.Errorf("election: lock record is not a JSON object: %q", truncate(data))
	}
	if err := recordkind.Check(trimmed, RecordKind); err != nil {
		return r, fmt.Errorf("%w: %w", ErrForeignRecord, err)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("election: lock record: %w: %q", err, truncate(data))
	}
	if dec.More() {
		return Record{}, fmt.Errorf("election: lock record has data after the JSON object: %q", truncate(data))
	}
	if r.Kind != "" && r.Kind != RecordKind {
		return Record{}, fmt.Errorf("%w: it is a record of kind %q", ErrForeignRecord, r.Kind)
	}
	for name, s := range map[string]string{"leaderID": r.LeaderID, "leaderAddr": r.LeaderAddr, "session": r.Session, "nonce": r.Nonce, "handoverTo": r.HandoverTo, "peerKey": r.PeerKey} {
		if !utf8.ValidString(s) || len(s) > 1024 {
			return Record{}, fmt.Errorf("election: lock record field %s is not valid UTF-8 of at most 1024 bytes", name)
		}
	}
	if r.LeaderID == "" && !r.Released {
		return Record{}, fmt.Errorf("election: lock record has no leaderID: %q", truncate(data))
	}
	if r.LeaseMillis < 0 {
		return Record{}, fmt.Errorf("election: lock record has a negative leaseMillis %d", r.LeaseMillis)
	}
	return r, nil
}

// CheckTerm reports whether a member may take over this record with a
// larger term: ErrUnreadableRecord if it has no term (S3lect writes none,
// and tenure never writes 0), ErrTermExhausted if its term is the largest
// a term can be. The term handed to applications must only grow, so such a
// record is never taken over; Repair sets a term floor.
func (r Record) CheckTerm() error {
	switch r.Term {
	case 0:
		return fmt.Errorf("%w: it has no term (written by S3lect or another tool that does not count terms)", ErrUnreadableRecord)
	case math.MaxUint64:
		return fmt.Errorf("%w: %d", ErrTermExhausted, r.Term)
	}
	return nil
}

func truncate(b []byte) []byte {
	if len(b) > 120 {
		return append(b[:120:120], "…"...)
	}
	return b
}

func newNonce() string {
	return rand.Text()
}
