package lease_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/store"
)

// Records of other kinds, as tenure writes them now (with a kind field)
// and as the previous version wrote them (without one), and JSON of
// another program.
var otherRecords = []struct {
	name, found string
	data        []byte
}{
	{"election lock", `of kind "tenure.lock"`, []byte(`{"kind":"tenure.lock","leaderID":"a","leaderAddr":"h:1","lastUpdated":"2026-11-29T05:00:00Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)},
	{"election lock of the previous version", `with the field "leaderID"`, []byte(`{"leaderID":"a","leaderAddr":"h:1","lastUpdated":"2026-11-29T05:00:00Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)},
	{"leader_state.json of the previous version", `with the field "followers"`, []byte(`{"term":3,"leaderID":"node-1","leaderAddr":"127.0.0.1:7001","group":"test","followers":[],"commitIndex":12,"lastUpdated":"2026-11-29T05:00:00Z","nonce":"a93e","counter":4,"checksum":"1c2d3e4f"}`)},
	{"leader_state.json", `of kind "tenure.rsm.leader_state"`, []byte(`{"kind":"tenure.rsm.leader_state","term":3,"leaderID":"node-1","followers":[],"commitIndex":12,"nonce":"a93e","counter":4,"checksum":"1c2d3e4f"}`)},
	{"unknown kind", `of kind "com.example.job", which this version does not know`, []byte(`{"kind":"com.example.job","ownerID":"o","session":"s","epoch":1,"shards":{}}`)},
	{"another program's JSON", `without a kind field or the fields of`, []byte(`{"name":"backup","schedule":"daily"}`)},
}

// TestDecodeRefusesOtherKinds: the member and assignment decoders refuse a
// record of another kind with ErrForeignRecord saying what it is, and
// accept their own records of this version and of the previous one.
func TestDecodeRefusesOtherKinds(t *testing.T) {
	member := []byte(`{"kind":"tenure.lease.member","ownerID":"m1","session":"s1","leaseMillis":15000,"nonce":"n","counter":2}`)
	assignment := []byte(`{"kind":"tenure.lease.assignment","epoch":4,"shards":{},"updatedBy":"m1","lastUpdated":"2026-11-29T05:00:00Z","nonce":"n"}`)
	for _, tc := range append(otherRecords, struct {
		name, found string
		data        []byte
	}{"assignment record", `of kind "tenure.lease.assignment"`, assignment}) {
		_, err := lease.DecodeMemberRecord(tc.data)
		if !errors.Is(err, lease.ErrForeignRecord) || !strings.Contains(err.Error(), tc.found) {
			t.Errorf("DecodeMemberRecord(%s) = %v; want ErrForeignRecord saying it is %s", tc.name, err, tc.found)
		}
	}
	for _, tc := range append(otherRecords, struct {
		name, found string
		data        []byte
	}{"member record", `of kind "tenure.lease.member"`, member}) {
		_, err := lease.DecodeAssignment(tc.data)
		if !errors.Is(err, lease.ErrForeignRecord) || !strings.Contains(err.Error(), tc.found) {
			t.Errorf("DecodeAssignment(%s) = %v; want ErrForeignRecord saying it is %s", tc.name, err, tc.found)
		}
		if _, err := lease.DecodeTable(tc.data); !errors.Is(err, lease.ErrForeignRecord) {
			t.Errorf("a member's decoder on %s: %v; want ErrForeignRecord", tc.name, err)
		}
	}
	for name, data := range map[string]string{
		"this version's":     string(member),
		"previous version's": `{"ownerID":"m1","session":"s1","lastUpdated":"2026-11-29T05:00:00Z","leaseMillis":15000,"nonce":"n","counter":2}`,
	} {
		if r, err := lease.DecodeMemberRecord([]byte(data)); err != nil || r.OwnerID != "m1" {
			t.Errorf("%s member record: %+v, %v", name, r, err)
		}
	}
	for name, data := range map[string]string{
		"this version's":     string(assignment),
		"previous version's": `{"epoch":4,"shards":{"a":{"owner":"m1","session":"s1","term":2}},"updatedBy":"m1","lastUpdated":"2026-11-29T05:00:00Z","nonce":"n"}`,
		"encoded":            string(lease.Assignment{Epoch: 4, Shards: map[string]lease.Entry{"a": {Term: 1}}}.Encode()),
	} {
		if a, err := lease.DecodeAssignment([]byte(data)); err != nil || a.Epoch != 4 {
			t.Errorf("%s assignment record: %+v, %v", name, a, err)
		}
	}
	if got := (lease.Assignment{}).Encode(); !bytes.HasPrefix(got, []byte(`{"kind":"tenure.lease.assignment",`)) {
		t.Errorf("Encode = %s; want the kind first", got)
	}
}

// TestForeignRecordsAreNeverWritten: another kind of record where the
// assignment belongs stops every member from acting and is never written
// over (a member of the previous version read a leader_state.json there as
// an empty assignment and replaced it); another kind of record among the
// member records is not a member: it gets no shard, is never evicted, and
// stays as it was. Both are reported, naming the key and what was found.
func TestForeignRecordsAreNeverWritten(t *testing.T) {
	shards := shardIDs(4)
	for _, tc := range otherRecords {
		for _, where := range []string{"assignment.json", "members/ghost/s1"} {
			t.Run(tc.name+" at "+where, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					key := lease.DefaultPrefix + where
					g := newGroup(t, memberConfig(shards))
					raw := store.New(g.inner)
					if _, err := raw.Put(t.Context(), key, tc.data, store.IfAbsent()); err != nil {
						t.Fatal(err)
					}
					var logs syncBuffer
					a := g.add("a", func(cfg *lease.Config) {
						cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
					})
					time.Sleep(10 * time.Minute)
					held := 0
					for _, s := range shards {
						if a.c.IsLeader(s) {
							held++
						}
					}
					if want := map[bool]int{true: 0, false: len(shards)}[where == "assignment.json"]; held != want {
						t.Errorf("the member leads %d shards; want %d", held, want)
					}
					if got := strings.ReplaceAll(logs.String(), `\"`, `"`); !strings.Contains(got, key) || !strings.Contains(got, tc.found) {
						t.Errorf("the record at %s was not reported as a record %s:\n%s", key, tc.found, got)
					}
					g.stopAll()
					data, _, err := raw.Get(t.Context(), key)
					if err != nil || !bytes.Equal(data, tc.data) {
						t.Fatalf("the record at %s was changed: %q, %v", key, data, err)
					}
				})
			})
		}
	}
}

// FuzzDecodeMemberRecord: whatever decodes re-encodes, with its kind, to a
// record that decodes the same.
func FuzzDecodeMemberRecord(f *testing.F) {
	f.Add([]byte(`{"kind":"tenure.lease.member","ownerID":"m1","session":"s1","leaseMillis":15000,"nonce":"n","counter":2,"applied":3}`))
	f.Add([]byte(`{"ownerID":"m1","session":"s1","lastUpdated":"2026-11-29T05:00:00Z","leaseMillis":15000,"nonce":"n","counter":2,"released":{"a":1}}`))
	f.Add([]byte(`{"ownerID":"m1","session":"s1","evictedBy":"m2"}`))
	for _, r := range otherRecords {
		f.Add(r.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lease.DecodeMemberRecord(data)
		if err != nil {
			return
		}
		if r.OwnerID == "" || r.Session == "" || r.LeaseMillis < 0 {
			t.Fatalf("accepted an invalid member record: %+v", r)
		}
		again, err := lease.DecodeMemberRecord(lease.EncodeMember(r))
		if err != nil {
			t.Fatalf("re-encoded member record does not decode: %v", err)
		}
		if again.Kind != lease.MemberKind {
			t.Fatalf("re-encoded member record has kind %q", again.Kind)
		}
		if !bytes.Equal(lease.EncodeMember(again), lease.EncodeMember(r)) {
			t.Fatalf("round trip changed the record: %+v -> %+v", r, again)
		}
	})
}
