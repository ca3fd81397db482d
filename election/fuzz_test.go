package election_test

import (
	"bytes"
	"testing"

	"github.com/tenure-io/tenure/election"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"leaderID":"server-001","leaderAddr":"10.0.1.42:8443","lastUpdated":"2026-11-21T10:30:45Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","released":false}`))
	f.Add([]byte(`{"leaderID":"a"}`))
	f.Add([]byte(`{"leaderID":"a","leaderAddr":"127.0.0.1:1","term":2,"peerKey":"sha256:q0N4bVYbnmBvkvCwG3-7pCA6LrR5Wj6G-2mR8k1Lc8Q"}`))
	f.Add([]byte(`{"leaderID":"a","peerKey":7}`))
	f.Add([]byte(`{"leaderID":"a","term":18446744073709551615}`))
	f.Add([]byte(`{"released":true}`))
	f.Add([]byte(`{"kind":"tenure.lock","leaderID":"a","term":3,"session":"s","nonce":"n"}`))
	f.Add([]byte(`{"kind":"tenure.rsm.leader_state","leaderID":"a","term":3}`))
	f.Add([]byte(`{"leaderID":"a","term":3,"followers":[],"checksum":"00000000"}`))
	f.Add([]byte(`{"kind":7,"leaderID":"a"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := election.DecodeRecord(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to a record that decodes the same.
		again, err := election.DecodeRecord(rec.Encode())
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !bytes.Equal(again.Encode(), rec.Encode()) {
			t.Fatalf("round trip changed the record: %+v -> %+v", rec, again)
		}
	})
}

func FuzzDecodePeerResponse(f *testing.F) {
	f.Add(200, "etag-1", []byte(`{"leaderID":"a","term":1}`))
	f.Add(503, "", []byte(`{"error":"not the leader"}`))
	f.Add(200, "", []byte(`{"leaderID":"a"}`))
	f.Add(200, "v", []byte(`{`))
	f.Fuzz(func(t *testing.T, status int, version string, body []byte) {
		rec, err := election.DecodePeerResponse(status, version, body)
		if err != nil {
			return
		}
		if status != 200 || version == "" {
			t.Fatalf("accepted status %d with version %q", status, version)
		}
		if rec.LeaderID == "" && !rec.Released {
			t.Fatalf("accepted a record with no leader: %+v", rec)
		}
	})
}
