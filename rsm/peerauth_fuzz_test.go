package rsm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzDecodePeerRecord: a peer record read from the store either decodes
// to a record of the node and group it is stored under, with 1 to
// maxPeerKeys keys, or is refused; it never panics.
func FuzzDecodePeerRecord(f *testing.F) {
	valid := peerRecord{Kind: peerRecordKind, Group: "g", ID: "b", Nonce: "n",
		Keys: []peerKeyInfo{{Key: "sha256:abc", Addr: "10.0.0.2:7400", Incarnation: "i"}}}
	b, _ := json.Marshal(valid)
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"kind":"rsm-peer","group":"g","id":"b","nonce":"n","keys":[]}`))
	f.Add([]byte(`{"term":1,"leaderID":"b"}`)) // leader_state.json is another kind
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodePeerRecord(b, "g", "b")
		if err != nil {
			return
		}
		if r.Kind != peerRecordKind || r.Group != "g" || r.ID != "b" || len(r.Keys) == 0 || len(r.Keys) > maxPeerKeys || r.Nonce == "" {
			t.Fatalf("accepted %+v", r)
		}
	})
}

// withKey puts the newest key first, keeps at most maxPeerKeys, and
// changes nothing when the key is first already.
func TestPeerRecordWithKey(t *testing.T) {
	var r peerRecord
	for i := range maxPeerKeys + 2 {
		k := peerKeyInfo{Key: "sha256:" + string(rune('a'+i)), Addr: "x:1"}
		next, changed := r.withKey(k)
		if !changed || next.Keys[0] != k || len(next.Keys) > maxPeerKeys {
			t.Fatalf("step %d: %+v changed %v", i, next.Keys, changed)
		}
		r = next
		if _, changed := r.withKey(k); changed {
			t.Fatalf("step %d: the same key again changed the record", i)
		}
	}
	if !r.lists("sha256:f", "x:1") || r.lists("sha256:a", "") || r.lists("sha256:f", "y:1") {
		t.Fatalf("lists: %+v", r.Keys)
	}
}

// A record of another kind at a peer record's key is refused, naming what
// it is.
func TestPeerRecordRefusesOtherKinds(t *testing.T) {
	for _, b := range []string{
		`{"kind":"tenure.lock","leaderID":"b","term":3}`,
		`{"leaderID":"b","term":3}`,
		`{"kind":"tenure.rsm.leader_state","term":3,"leaderID":"b","followers":[]}`,
	} {
		_, err := decodePeerRecord([]byte(b), "g", "b")
		if err == nil || !strings.Contains(err.Error(), "it is a record") && !strings.Contains(err.Error(), "not a peer record") {
			t.Errorf("%s: %v, want it refused as another kind", b, err)
		}
	}
}

// sentByLeader: a Synchronize is taken only from the leader the record
// names for its term, proving the record's key; a record without a key (a
// leader of a version without peer authentication) is refused with peer
// keys, and taken on the CA's word in mutual TLS.
func TestSentByLeader(t *testing.T) {
	ls := leaderState{Term: 4, LeaderID: "a", LeaderKey: "sha256:A"}
	old := leaderState{Term: 4, LeaderID: "a"}
	req := leaderState{Term: 4, LeaderID: "a"}
	cases := []struct {
		name string
		mode peerMode
		ls   leaderState
		req  leaderState
		c    caller
		want bool
	}{
		{"the named leader", peerKeys, ls, req, caller{id: "a", key: "sha256:A"}, true},
		{"another key under its ID", peerKeys, ls, req, caller{id: "a", key: "sha256:X"}, false},
		{"another member naming it", peerKeys, ls, req, caller{id: "c", key: "sha256:A"}, false},
		{"a higher term than the record's", peerKeys, ls, leaderState{Term: 5, LeaderID: "a"}, caller{id: "a", key: "sha256:A"}, false},
		{"a lower term than the record's", peerKeys, ls, leaderState{Term: 3, LeaderID: "a"}, caller{id: "a", key: "sha256:A"}, false},
		{"another leader of the term", peerKeys, ls, leaderState{Term: 4, LeaderID: "c"}, caller{id: "c", key: "sha256:C"}, false},
		{"a record of a version without keys", peerKeys, old, req, caller{id: "a", key: "sha256:A"}, false},
		{"mutual TLS, the record's key", peerCA, ls, req, caller{key: "sha256:A"}, true},
		{"mutual TLS, another key", peerCA, ls, req, caller{key: "sha256:X"}, false},
		{"mutual TLS, a record without a key", peerCA, old, req, caller{key: "sha256:X"}, true},
		{"plaintext, the named leader", peerPlain, old, req, caller{}, true},
		{"plaintext, another leader", peerPlain, old, leaderState{Term: 4, LeaderID: "c"}, caller{}, false},
	}
	for _, c := range cases {
		if got := sentByLeader(c.mode, c.ls, c.req, c.c); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPeerTrustReserve: reads made for unknown keys are bounded per record
// and per second, and strangers naming new IDs do not use up the reads of
// a node whose record the host knows (one that restarted with a new key).
func TestPeerTrustReserve(t *testing.T) {
	var tr peerTrust
	tr.store(peerRecord{Group: "g", ID: "n2", Keys: []peerKeyInfo{{Key: "sha256:old", Addr: "a:1"}}})
	now := time.Unix(1000, 0)
	for i := range peerReadsPerSecond {
		if _, ok := tr.reserve(peerKey("g", fmt.Sprintf("stranger%d", i)), now); !ok {
			t.Fatalf("read %d of an unknown record refused within the budget", i)
		}
	}
	if _, ok := tr.reserve(peerKey("g", "strangerX"), now); ok {
		t.Fatalf("read %d of an unknown record in one second allowed", peerReadsPerSecond+1)
	}
	wait, ok := tr.reserve(peerKey("g", "n2"), now)
	if !ok || wait != 0 {
		t.Fatalf("known node's record: reserve = %v, %v; want 0, true after strangers used the budget", wait, ok)
	}
	// Read once per peerRefetch: the next waits for its slot; one more
	// while that waits is refused instead of queued.
	wait, ok = tr.reserve(peerKey("g", "n2"), now.Add(peerRefetch/2))
	if !ok || wait != peerRefetch/2 {
		t.Fatalf("second read within peerRefetch: reserve = %v, %v; want %v, true", wait, ok, peerRefetch/2)
	}
	if _, ok := tr.reserve(peerKey("g", "n2"), now.Add(peerRefetch/2)); ok {
		t.Fatal("a third read queued behind a waiting one")
	}
	if _, ok := tr.reserve(peerKey("g", "strangerY"), now.Add(time.Second)); !ok {
		t.Fatal("unknown record refused in the next second")
	}
}
