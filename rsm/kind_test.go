package rsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// Records of other kinds, as tenure writes them now (with a kind field)
// and as the previous version wrote them (without one).
var otherRecords = []struct {
	name, found string
	data        []byte
}{
	{"election lock", `of kind "tenure.lock"`, []byte(`{"kind":"tenure.lock","leaderID":"a","leaderAddr":"h:1","lastUpdated":"2026-11-29T05:00:00Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)},
	{"election lock of the previous version", `with the field "leaderID" of an election lock record`, []byte(`{"leaderID":"a","leaderAddr":"h:1","lastUpdated":"2026-11-29T05:00:00Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)},
	{"S3lect lockfile", `with the field "leaderID" of an election lock record`, []byte(`{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2024-10-27T10:30:45Z"}`)},
	{"member record", `of kind "tenure.lease.member"`, []byte(`{"kind":"tenure.lease.member","ownerID":"m1","session":"s1","leaseMillis":15000,"nonce":"n","counter":2}`)},
	{"member record of the previous version", `with the field "ownerID"`, []byte(`{"ownerID":"m1","session":"s1","lastUpdated":"2026-11-29T05:00:00Z","leaseMillis":15000,"nonce":"n","counter":2}`)},
	{"assignment record", `of kind "tenure.lease.assignment"`, []byte(`{"kind":"tenure.lease.assignment","epoch":4,"shards":{},"updatedBy":"m1","lastUpdated":"2026-11-29T05:00:00Z","nonce":"n"}`)},
	{"unknown kind", `of kind "com.example.state", which this version does not know`, []byte(`{"kind":"com.example.state","term":3,"leaderID":"a","followers":[],"checksum":"x"}`)},
}

// TestLeaderStateRefusesOtherKinds: leader_state.json holding another kind
// of record is refused with ErrForeignRecord saying what it is (an
// election lock has a leaderID and a term too); the group's own records,
// of this version and of the previous one, are accepted.
func TestLeaderStateRefusesOtherKinds(t *testing.T) {
	for _, tc := range otherRecords {
		_, err := decodeLeaderState(tc.data)
		if !errors.Is(err, ErrForeignRecord) || !strings.Contains(err.Error(), tc.found) {
			t.Errorf("%s: decodeLeaderState = %v; want ErrForeignRecord saying it is a record %s", tc.name, err, tc.found)
		}
	}
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	ls := leaderState{Term: 3, LeaderID: "n1", LeaderAddr: "h:1", Group: "g", CommitIndex: 9, Followers: []followerInfo{{ID: "n2", Addr: "h:2", ApplyIndex: 8}}}
	cur := encodeLeaderState(ls, now)
	if !bytes.HasPrefix(cur, []byte("{\n  \"kind\": \"tenure.rsm.leader_state\",")) {
		t.Fatalf("leader_state.json does not start with its kind:\n%s", cur)
	}
	if got, err := decodeLeaderState(cur); err != nil || got.Term != 3 || got.Kind != "tenure.rsm.leader_state" {
		t.Fatalf("decodeLeaderState of this version's record = %+v, %v", got, err)
	}
	prev := previousLeaderState(ls, now)
	if got, err := decodeLeaderState(prev); err != nil || got.Term != 3 || got.Kind != "" {
		t.Fatalf("decodeLeaderState of the previous version's record %s = %+v, %v", prev, got, err)
	}
}

// previousLeaderState encodes ls as the previous version did: without a
// kind field.
func previousLeaderState(ls leaderState, now time.Time) []byte {
	old := previousLS{ls.Term, ls.LeaderID, ls.LeaderAddr, ls.Group, ls.Incarnation, ls.Followers, ls.CommitIndex, now.Format(time.RFC3339), "n", 1, ""}
	old.Checksum = old.sum()
	b, _ := json.MarshalIndent(old, "", "  ")
	return b
}

// previousLS is leader_state.json as the previous version knows it, and
// decodePrevious its decoder: a node of that version during a rolling
// upgrade.
type previousLS struct {
	Term        uint64         `json:"term"`
	LeaderID    string         `json:"leaderID"`
	LeaderAddr  string         `json:"leaderAddr"`
	Group       string         `json:"group,omitempty"`
	Incarnation string         `json:"incarnation,omitempty"`
	Followers   []followerInfo `json:"followers"`
	CommitIndex uint64         `json:"commitIndex"`
	LastUpdated string         `json:"lastUpdated"`
	Nonce       string         `json:"nonce"`
	Counter     uint64         `json:"counter"`
	Checksum    string         `json:"checksum"`
}

func (ls previousLS) sum() string {
	ls.Checksum = ""
	b, _ := json.Marshal(ls)
	return fmt.Sprintf("%08x", crc32.Checksum(b, record.Castagnoli))
}

func decodePrevious(b []byte) (previousLS, error) {
	var ls previousLS
	if err := json.Unmarshal(b, &ls); err != nil {
		return previousLS{}, err
	}
	if ls.Checksum != ls.sum() {
		return previousLS{}, fmt.Errorf("leader state checksum mismatch: stored %q, computed %q", ls.Checksum, ls.sum())
	}
	return ls, nil
}

// TestLeaderStateKindDuringRollingUpgrade: a node of the previous version
// ignores the kind field and still verifies the checksum of a record this
// version writes, so members can be upgraded one at a time.
func TestLeaderStateKindDuringRollingUpgrade(t *testing.T) {
	ls := leaderState{Term: 5, LeaderID: "n1", LeaderAddr: "h:1", Group: "g", Incarnation: "i", CommitIndex: 40,
		Followers: []followerInfo{{ID: "n2", Addr: "h:2", ApplyIndex: 39}}}
	got, err := decodePrevious(encodeLeaderState(ls, time.Now()))
	if err != nil || got.Term != 5 || got.LeaderID != "n1" || len(got.Followers) != 1 {
		t.Fatalf("the previous version's decoder on this version's record: %+v, %v", got, err)
	}
}

// TestFramesRefuseOtherKinds: a JSON record, or a frame of another kind,
// where a log entry, a snapshot, a manifest, a segment or a base belongs is
// refused with ErrForeignRecord saying what it is. (Package snapshot's test
// of the same name runs its segment and base decoders.)
func TestFramesRefuseOtherKinds(t *testing.T) {
	entry, err := record.EncodeEntry(&rsmpb.Entry{Index: 1, Term: 1, Nonce: []byte("n"), Noop: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := record.EncodeSnapshot(&rsmpb.Snapshot{StartIndex: 1, EndIndex: 1, Nonce: []byte("n")})
	if err != nil {
		t.Fatal(err)
	}
	lock := otherRecords[0].data
	decoders := map[string]func([]byte) error{
		"log entry": func(b []byte) error { _, err := record.DecodeEntry(b, 1); return err },
		"snapshot":  func(b []byte) error { _, err := snapshot.Decode(b); return err },
		"manifest":  func(b []byte) error { _, err := snapshot.DecodeManifest(b); return err },
	}
	for name, decode := range decoders {
		objects := map[string][]byte{"an election lock record": lock, "a JSON object without a kind": []byte(`{"hello":"world","padding":"0123456789"}`)}
		if name == "log entry" {
			objects["a snapshot"] = snap
		} else {
			objects["a log entry"] = entry
		}
		for what, data := range objects {
			err := decode(data)
			named := err != nil && strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimPrefix(what, "an "), "a "))
			if name == "base" && what != "a log entry" {
				named = err != nil && strings.Contains(err.Error(), "JSON object") // only its header is read
			}
			if !errors.Is(err, ErrForeignRecord) || !named {
				t.Errorf("%s decoder on %s: %v; want ErrForeignRecord naming it", name, what, err)
			}
		}
	}
}
