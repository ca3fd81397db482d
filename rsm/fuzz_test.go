package rsm

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/objtest"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Every decoder of bytes that come from the store or the network is fuzzed
// here. The properties: no panic; whatever decodes satisfies the decoder's
// own checks and survives an encode/decode round trip unchanged.

func sampleEntry() *rsmpb.Entry {
	return &rsmpb.Entry{Index: 7, Term: 3, Writer: "node-a", Nonce: []byte("0123456789ab"), Commands: []*rsmpb.Command{
		{Client: "a#1", Seq: 1, Machine: "kv", Data: []byte("set x 1")},
		{Client: "b#2", Seq: 9, Machine: "counter", Data: nil},
	}}
}

func sampleSnapshot() *rsmpb.Snapshot {
	return &rsmpb.Snapshot{StartIndex: 1, EndIndex: 40, MaxTerm: 3, Writer: "node-a", WriterTerm: 3, Nonce: []byte("0123456789ab"),
		Machines: []*rsmpb.MachineState{{Name: "counter", Data: []byte{0, 0, 0, 0, 0, 0, 0, 12}}, {Name: "kv", Data: []byte("x=1")}},
		Clients: []*rsmpb.ClientRecord{
			{Client: "a#1", Seq: 4, Result: []byte("ok"), HasResult: true, LastUsed: 39},
			{Client: "b#2", Seq: 1, LastUsed: 12},
		}}
}

func sampleLeaderState() leaderState {
	return leaderState{Term: 5, LeaderID: "node-a", LeaderAddr: "127.0.0.1:7000", Group: "g", CommitIndex: 42, Counter: 8,
		Followers: []followerInfo{{ID: "node-b", Addr: "127.0.0.1:7001", ApplyIndex: 40}, {ID: "node-c", Addr: "127.0.0.1:7002", ApplyIndex: 41}}}
}

var fuzzNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func mustEncodeEntry(t testing.TB, e *rsmpb.Entry) []byte {
	t.Helper()
	b, err := record.EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncodeSnapshot(t testing.TB, s *rsmpb.Snapshot) []byte {
	t.Helper()
	b, err := record.EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeEntry(f *testing.F) {
	valid := []*rsmpb.Entry{
		sampleEntry(),
		{Index: 1, Term: 1, Writer: "w", Nonce: []byte{1}, Noop: true},
		{Index: 1 << 40, Term: 1 << 50, Nonce: []byte("n"), Commands: []*rsmpb.Command{{Client: "c", Seq: 1}}},
		{Index: 1, Term: 1, Writer: "w", Nonce: []byte{1}, Noop: true, Settings: &rsmpb.Settings{MaxSessions: 3, Machines: []string{"counter", "kv"}}},
		{Index: 9, Term: 2, Writer: "w", Nonce: []byte{1}, Commands: []*rsmpb.Command{
			{Register: true, Client: "node-a#1"}, {Session: 4, Seq: 2, Machine: "kv", Data: []byte("x")}, {Session: 4, Seq: 5, FirstPending: 3, Machine: "kv", Data: []byte("y")}}},
	}
	f.Add([]byte(`{"kind":"tenure.lock","leaderID":"a","term":7}`), uint64(1))
	f.Add([]byte(`{"leaderID":"a","term":7}`), uint64(1))
	for _, e := range valid {
		b := mustEncodeEntry(f, e)
		f.Add(b, e.Index)
		f.Add(b, e.Index+1)
		for _, c := range objtest.Corruptions(b) {
			f.Add(c, e.Index)
		}
	}
	// A snapshot frame is not an entry.
	f.Add(mustEncodeSnapshot(f, sampleSnapshot()), uint64(7))
	// Bare payloads: the target also frames its input, so that the fuzzer
	// reaches the protobuf decoding and the checks behind the checksum.
	for _, e := range valid {
		p, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p, e.Index)
	}
	f.Fuzz(func(t *testing.T, b []byte, index uint64) {
		checkDecodeEntry(t, b, index)
		checkDecodeEntry(t, record.Frame(record.KindEntry, b), index)
	})
}

func checkDecodeEntry(t *testing.T, b []byte, index uint64) {
	t.Helper()
	e, err := record.DecodeEntry(b, index)
	// A Borrower's segment's entries decode with their commands' data
	// lent (decodeEntryBorrowed): the same entry, or the same error.
	lent, lerr := record.DecodeEntryBorrowed(bytes.Clone(b), index, record.Interner{})
	if (err == nil) != (lerr == nil) || err != nil && err.Error() != lerr.Error() || err == nil && !proto.Equal(e, lent) {
		t.Fatalf("decodeEntry: %v, %v; decodeEntryBorrowed: %v, %v", e, err, lent, lerr)
	}
	if err != nil {
		if e != nil {
			t.Fatalf("decodeEntry returned an entry with error %v", err)
		}
		return
	}
	if e.Index != index || e.Term == 0 || len(e.Nonce) == 0 || (e.Noop && len(e.Commands) > 0) {
		t.Fatalf("decodeEntry accepted an invalid entry: %v", e)
	}
	for _, c := range e.Commands {
		register := c.Register && c.Client != "" && c.Session == 0 && c.Seq == 0
		session := !c.Register && c.Session != 0 && c.Seq != 0 && c.Client == ""
		legacy := !c.Register && c.Session == 0 && c.Client != "" && c.Seq != 0
		if !register && !session && !legacy {
			t.Fatalf("decodeEntry accepted a command that is no registration, no session's and no previous version's: %v", c)
		}
	}
	if e.Settings != nil && (!e.Noop || record.ValidSettings(e.Settings) != nil) {
		t.Fatalf("decodeEntry accepted settings off a seal or invalid: %v", e)
	}
	b2 := mustEncodeEntry(t, e)
	e2, err := record.DecodeEntry(b2, index)
	if err != nil {
		t.Fatalf("re-encoded entry does not decode: %v", err)
	}
	if !proto.Equal(e, e2) {
		t.Fatalf("round trip changed the entry:\n%v\n%v", e, e2)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	valid := []*rsmpb.Snapshot{
		sampleSnapshot(),
		{StartIndex: 1, EndIndex: 1, Nonce: []byte{1}},
		{StartIndex: 11, EndIndex: 10, MaxTerm: 2, Nonce: []byte{1}}, // an empty range: start = end+1
		{StartIndex: 1, EndIndex: 30, MaxTerm: 2, Nonce: []byte{1}, LastSession: 9,
			Settings: &rsmpb.Settings{MaxSessions: 2, Machines: []string{"kv"}},
			Sessions: []*rsmpb.SessionRecord{{Session: 3, Label: "a#1", Seq: 5, Result: []byte("ok"), HasResult: true, LastUsed: 29}, {Session: 9, Label: "b#2", LastUsed: 30}}},
	}
	for _, s := range valid {
		b := mustEncodeSnapshot(f, s)
		f.Add(b)
		for _, c := range objtest.Corruptions(b) {
			f.Add(c)
		}
	}
	f.Add(mustEncodeEntry(f, sampleEntry()))
	f.Add([]byte(`{"kind":"tenure.lock","leaderID":"a","term":7}`))
	for _, s := range valid {
		p, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeSnapshot(t, b)
		checkDecodeSnapshot(t, record.Frame(record.KindSnapshot, b))
	})
}

func checkDecodeSnapshot(t *testing.T, b []byte) {
	t.Helper()
	s, err := record.DecodeSnapshot(b)
	if err != nil {
		if s != nil {
			t.Fatalf("decodeSnapshot returned a snapshot with error %v", err)
		}
		return
	}
	if s.EndIndex == 0 || s.StartIndex == 0 || s.StartIndex > s.EndIndex+1 || len(s.Nonce) == 0 {
		t.Fatalf("decodeSnapshot accepted an invalid snapshot: %v", s)
	}
	machines, clients := map[string]bool{}, map[string]bool{}
	for _, m := range s.Machines {
		if machines[m.Name] {
			t.Fatalf("decodeSnapshot accepted machine %q twice", m.Name)
		}
		machines[m.Name] = true
	}
	for _, c := range s.Clients {
		if c.Client == "" || clients[c.Client] {
			t.Fatalf("decodeSnapshot accepted an empty or repeated client %q", c.Client)
		}
		clients[c.Client] = true
	}
	if s.Settings != nil && (record.ValidSettings(s.Settings) != nil || len(s.Clients) > 0 || uint64(len(s.Sessions)) > s.Settings.MaxSessions) {
		t.Fatalf("decodeSnapshot accepted invalid settings: %v", s)
	}
	sessions := map[uint64]bool{}
	for _, c := range s.Sessions {
		if c.Session == 0 || c.Session > s.LastSession || sessions[c.Session] || c.Label == "" || c.LastUsed > s.EndIndex {
			t.Fatalf("decodeSnapshot accepted an invalid session record %v", c)
		}
		sessions[c.Session] = true
	}
	s2, err := record.DecodeSnapshot(mustEncodeSnapshot(t, s))
	if err != nil {
		t.Fatalf("re-encoded snapshot does not decode: %v", err)
	}
	if !proto.Equal(s, s2) {
		t.Fatalf("round trip changed the snapshot:\n%v\n%v", s, s2)
	}
}

func FuzzDecodeLeaderState(f *testing.F) {
	b := encodeLeaderState(sampleLeaderState(), fuzzNow)
	f.Add(b)
	f.Add(encodeLeaderState(leaderState{Term: 1, LeaderID: "a"}, fuzzNow))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"term":1,"leaderID":"a","checksum":"00000000"}`))
	f.Add(bytes.Replace(b, []byte(`"term": 5`), []byte(`"term": 6`), 1))
	f.Add(b[:len(b)/2])
	f.Add(previousLeaderState(sampleLeaderState(), fuzzNow))
	f.Add([]byte(`{"kind":"tenure.lock","leaderID":"a","term":7,"session":"s","nonce":"n"}`))
	f.Add([]byte(`{"leaderID":"a","term":7,"session":"s","nonce":"n"}`))
	f.Add(bytes.Replace(b, []byte(`"tenure.rsm.leader_state"`), []byte(`"tenure.lock"`), 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		ls, err := decodeLeaderState(b)
		if err != nil {
			if ls.Term != 0 || ls.LeaderID != "" {
				t.Fatalf("decodeLeaderState returned %+v with error %v", ls, err)
			}
			return
		}
		if ls.Term == 0 || ls.LeaderID == "" || ls.Checksum != ls.sum() {
			t.Fatalf("decodeLeaderState accepted an invalid state: %+v", ls)
		}
		// Encoding stamps a new nonce, counter and time; everything else
		// survives.
		ls2, err := decodeLeaderState(encodeLeaderState(ls, fuzzNow))
		if err != nil {
			t.Fatalf("re-encoded leader state does not decode: %v", err)
		}
		if ls2.Counter != ls.Counter+1 {
			t.Fatalf("counter %d after encoding %d", ls2.Counter, ls.Counter)
		}
		// A record of the previous version gains its kind.
		if ls2.Kind != "tenure.rsm.leader_state" {
			t.Fatalf("re-encoded leader state has kind %q", ls2.Kind)
		}
		ls2.Nonce, ls2.Counter, ls2.LastUpdated, ls2.Checksum, ls2.Kind = ls.Nonce, ls.Counter, ls.LastUpdated, ls.Checksum, ls.Kind
		if !equalJSON(t, ls, ls2) {
			t.Fatalf("round trip changed the leader state:\n%+v\n%+v", ls, ls2)
		}
	})
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// FuzzRPCMessages decodes bytes as every message a host receives over the
// network: requests on the server, responses on the client.
func FuzzRPCMessages(f *testing.F) {
	seeds := []proto.Message{
		&rsmpb.HandshakeRequest{Group: "g", NodeId: "a", Addr: "127.0.0.1:1", Protocol: 1},
		&rsmpb.FollowRequest{Group: "g", NodeId: "b", Addr: "127.0.0.1:2", ApplyIndex: 9, Term: 3},
		&rsmpb.SynchronizeRequest{Group: "g", Term: 3, LeaderId: "a", CommitIndex: 7, TooFarBehind: true,
			Entries:   []*rsmpb.Entry{sampleEntry()},
			Followers: []*rsmpb.FollowerInfo{{Id: "b", Addr: "127.0.0.1:2", ApplyIndex: 6}}},
		&rsmpb.StateRequest{Group: "g", Id: 4, Type: rsmpb.RequestType_COMMAND, Machine: "kv", Data: []byte("x"), Client: "a#1", Seq: 2},
		&rsmpb.HandshakeResponse{NodeId: "a", Protocol: 1, Message: "m"},
		&rsmpb.FollowResponse{Status: rsmpb.Status_NOT_LEADER, Term: 3, CommitIndex: 4, LeaderId: "a", LeaderAddr: "x:1"},
		&rsmpb.SynchronizeResponse{Status: rsmpb.Status_OK, ApplyIndex: 5, EnqueuedIndex: 6},
		&rsmpb.StateResponse{Id: 4, Status: rsmpb.Status_OK, Result: []byte("r"), Term: 3, Index: 8},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(append(bytes.Clone(b), 0xff))
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a length beyond the input
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{
			&rsmpb.HandshakeRequest{}, &rsmpb.FollowRequest{}, &rsmpb.SynchronizeRequest{}, &rsmpb.StateRequest{},
			&rsmpb.HandshakeResponse{}, &rsmpb.FollowResponse{}, &rsmpb.SynchronizeResponse{}, &rsmpb.StateResponse{},
		} {
			if err := proto.Unmarshal(b, m); err != nil {
				continue
			}
			out, err := proto.Marshal(m)
			if err != nil {
				t.Fatalf("%T decoded but does not encode: %v", m, err)
			}
			m2 := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(out, m2); err != nil {
				t.Fatalf("%T re-encoded does not decode: %v", m, err)
			}
			if !proto.Equal(m, m2) {
				t.Fatalf("%T round trip changed the message:\n%v\n%v", m, m, m2)
			}
		}
	})
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []*rsmpb.Entry{sampleEntry(), {Index: 1, Term: 1, Nonce: []byte{0}, Noop: true}} {
		got, err := record.DecodeEntry(mustEncodeEntry(t, e), e.Index)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, e) {
			t.Fatalf("round trip: got %v, want %v", got, e)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := sampleSnapshot()
	got, err := record.DecodeSnapshot(mustEncodeSnapshot(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, s) {
		t.Fatalf("round trip: got %v, want %v", got, s)
	}
}

func TestLeaderStateRoundTrip(t *testing.T) {
	ls := sampleLeaderState()
	got, err := decodeLeaderState(encodeLeaderState(ls, fuzzNow))
	if err != nil {
		t.Fatal(err)
	}
	if got.Counter != ls.Counter+1 || got.Nonce == "" || got.LastUpdated != "2025-01-02T03:04:05Z" || got.Kind != "tenure.rsm.leader_state" {
		t.Fatalf("encoding did not stamp counter, nonce, time and kind: %+v", got)
	}
	got.Nonce, got.Counter, got.LastUpdated, got.Checksum, got.Kind = "", ls.Counter, "", "", ""
	if !equalJSON(t, got, ls) {
		t.Fatalf("round trip: got %+v, want %+v", got, ls)
	}
	// Two encodings of the same state differ: the nonce makes every
	// write's bytes unique, so a compare-and-swap never meets an ABA.
	if bytes.Equal(encodeLeaderState(ls, fuzzNow), encodeLeaderState(ls, fuzzNow)) {
		t.Fatal("two encodings of the same leader state are byte-identical")
	}
}

// TestFramedObjectsRejectEveryBitFlip flips each bit of a framed entry and
// snapshot in turn: the magic, the kind, the checksum or the payload
// changes, and every one must be rejected.
func TestFramedObjectsRejectEveryBitFlip(t *testing.T) {
	cases := []struct {
		name   string
		b      []byte
		decode func([]byte) error
	}{
		{"entry", mustEncodeEntry(t, sampleEntry()), func(b []byte) error { _, err := record.DecodeEntry(b, 7); return err }},
		{"noop entry", mustEncodeEntry(t, &rsmpb.Entry{Index: 7, Term: 1, Nonce: []byte{9}, Noop: true}), func(b []byte) error { _, err := record.DecodeEntry(b, 7); return err }},
		{"snapshot", mustEncodeSnapshot(t, sampleSnapshot()), func(b []byte) error { _, err := record.DecodeSnapshot(b); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.decode(tc.b); err != nil {
				t.Fatalf("the unflipped object does not decode: %v", err)
			}
			for bit := 0; bit < 8*len(tc.b); bit++ {
				c := bytes.Clone(tc.b)
				c[bit/8] ^= 1 << (bit % 8)
				if err := tc.decode(c); err == nil {
					t.Errorf("flipping bit %d (byte %d of %d) was not detected", bit, bit/8, len(tc.b))
				}
			}
		})
	}
}

func TestFramedObjectsRejectWrongKindAndShortInput(t *testing.T) {
	entry := mustEncodeEntry(t, sampleEntry())
	snap := mustEncodeSnapshot(t, sampleSnapshot())
	if _, err := record.DecodeEntry(snap, 7); err == nil {
		t.Error("a snapshot frame decoded as an entry")
	}
	if _, err := record.DecodeSnapshot(entry); err == nil {
		t.Error("an entry frame decoded as a snapshot")
	}
	for n := 0; n < len(entry); n++ {
		if _, err := record.DecodeEntry(entry[:n], 7); err == nil {
			t.Errorf("entry truncated to %d of %d bytes decoded", n, len(entry))
		}
	}
	for n := 0; n < len(snap); n++ {
		if _, err := record.DecodeSnapshot(snap[:n]); err == nil {
			t.Errorf("snapshot truncated to %d of %d bytes decoded", n, len(snap))
		}
	}
}

// TestDecodeEntryRejectsInvalidContent: a well-framed entry with a correct
// checksum is still refused when its content breaks the log's rules.
func TestDecodeEntryRejectsInvalidContent(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*rsmpb.Entry)
		index  uint64
	}{
		{"stored at another index", func(*rsmpb.Entry) {}, 8},
		{"term 0", func(e *rsmpb.Entry) { e.Term = 0 }, 7},
		{"no nonce", func(e *rsmpb.Entry) { e.Nonce = nil }, 7},
		{"no-op with commands", func(e *rsmpb.Entry) { e.Noop = true }, 7},
		{"command without client", func(e *rsmpb.Entry) { e.Commands[1].Client = "" }, 7},
		{"command without seq", func(e *rsmpb.Entry) { e.Commands[0].Seq = 0 }, 7},
		{"session command without seq", func(e *rsmpb.Entry) { e.Commands[0] = &rsmpb.Command{Session: 3, Machine: "kv"} }, 7},
		{"session command with a client", func(e *rsmpb.Entry) { e.Commands[0].Session = 3 }, 7},
		{"registration without label", func(e *rsmpb.Entry) { e.Commands[0] = &rsmpb.Command{Register: true} }, 7},
		{"registration with a sequence number", func(e *rsmpb.Entry) { e.Commands[0].Register = true }, 7},
		{"settings on commands", func(e *rsmpb.Entry) { e.Settings = &rsmpb.Settings{MaxSessions: 1, Machines: []string{"kv"}} }, 7},
		{"settings without a bound", func(e *rsmpb.Entry) {
			e.Noop, e.Commands, e.Settings = true, nil, &rsmpb.Settings{Machines: []string{"kv"}}
		}, 7},
		{"settings with unsorted machines", func(e *rsmpb.Entry) {
			e.Noop, e.Commands, e.Settings = true, nil, &rsmpb.Settings{MaxSessions: 1, Machines: []string{"kv", "counter"}}
		}, 7},
		{"settings without machines", func(e *rsmpb.Entry) {
			e.Noop, e.Commands, e.Settings = true, nil, &rsmpb.Settings{MaxSessions: 1}
		}, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := sampleEntry()
			tc.mutate(e)
			if got, err := record.DecodeEntry(mustEncodeEntry(t, e), tc.index); err == nil {
				t.Fatalf("decoded %v", got)
			}
		})
	}
}

func TestDecodeSnapshotRejectsInvalidContent(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*rsmpb.Snapshot)
	}{
		{"end index 0", func(s *rsmpb.Snapshot) { s.EndIndex = 0 }},
		{"start index 0", func(s *rsmpb.Snapshot) { s.StartIndex = 0 }},
		{"start past end+1", func(s *rsmpb.Snapshot) { s.StartIndex = s.EndIndex + 2 }},
		{"no nonce", func(s *rsmpb.Snapshot) { s.Nonce = nil }},
		{"machine twice", func(s *rsmpb.Snapshot) { s.Machines[1].Name = s.Machines[0].Name }},
		{"empty client", func(s *rsmpb.Snapshot) { s.Clients[0].Client = "" }},
		{"client twice", func(s *rsmpb.Snapshot) { s.Clients[1].Client = s.Clients[0].Client }},
		{"settings beside old clients", func(s *rsmpb.Snapshot) { s.Settings = &rsmpb.Settings{MaxSessions: 5, Machines: []string{"kv"}} }},
		{"session 0", func(s *rsmpb.Snapshot) {
			s.LastSession, s.Sessions = 3, []*rsmpb.SessionRecord{{Session: 0, Label: "a", LastUsed: 1}}
		}},
		{"session above the last given out", func(s *rsmpb.Snapshot) {
			s.LastSession, s.Sessions = 3, []*rsmpb.SessionRecord{{Session: 4, Label: "a", LastUsed: 1}}
		}},
		{"session twice", func(s *rsmpb.Snapshot) {
			s.LastSession, s.Sessions = 3, []*rsmpb.SessionRecord{{Session: 2, Label: "a"}, {Session: 2, Label: "b"}}
		}},
		{"session without label", func(s *rsmpb.Snapshot) {
			s.LastSession, s.Sessions = 3, []*rsmpb.SessionRecord{{Session: 2}}
		}},
		{"session used after the end", func(s *rsmpb.Snapshot) {
			s.LastSession, s.Sessions = 3, []*rsmpb.SessionRecord{{Session: 2, Label: "a", LastUsed: s.EndIndex + 1}}
		}},
		{"more sessions than the bound", func(s *rsmpb.Snapshot) {
			s.Clients, s.LastSession = nil, 3
			s.Settings = &rsmpb.Settings{MaxSessions: 1, Machines: []string{"kv"}}
			s.Sessions = []*rsmpb.SessionRecord{{Session: 2, Label: "a"}, {Session: 3, Label: "b"}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sampleSnapshot()
			tc.mutate(s)
			if got, err := record.DecodeSnapshot(mustEncodeSnapshot(t, s)); err == nil {
				t.Fatalf("decoded %v", got)
			}
		})
	}
}

// TestLeaderStateChangedFieldRejected edits one field of a stored
// leader_state.json and keeps the old checksum: every edit must be caught.
func TestLeaderStateChangedFieldRejected(t *testing.T) {
	orig := encodeLeaderState(sampleLeaderState(), fuzzNow)
	if _, err := decodeLeaderState(orig); err != nil {
		t.Fatalf("the unedited state does not decode: %v", err)
	}
	cases := []struct {
		name string
		edit func(m map[string]any)
	}{
		{"term", func(m map[string]any) { m["term"] = 6 }},
		{"leaderID", func(m map[string]any) { m["leaderID"] = "node-x" }},
		{"leaderAddr", func(m map[string]any) { m["leaderAddr"] = "127.0.0.1:9999" }},
		{"follower applyIndex", func(m map[string]any) {
			m["followers"].([]any)[0].(map[string]any)["applyIndex"] = 41
		}},
		{"follower removed", func(m map[string]any) { m["followers"] = m["followers"].([]any)[:1] }},
		{"followers emptied", func(m map[string]any) { m["followers"] = nil }},
		{"commitIndex", func(m map[string]any) { m["commitIndex"] = 43 }},
		{"lastUpdated", func(m map[string]any) { m["lastUpdated"] = "2025-01-02T03:04:06Z" }},
		{"nonce", func(m map[string]any) { m["nonce"] = "00" }},
		{"counter", func(m map[string]any) { m["counter"] = 1 }},
		{"checksum", func(m map[string]any) { m["checksum"] = "00000000" }},
		{"checksum removed", func(m map[string]any) { delete(m, "checksum") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(orig, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			b, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if ls, err := decodeLeaderState(b); err == nil {
				t.Fatalf("accepted an edited leader state: %+v", ls)
			}
		})
	}
	// A checksummed state without a term or leader is refused too.
	for _, ls := range []leaderState{{LeaderID: "a"}, {Term: 1}} {
		ls.Checksum = ls.sum()
		b, err := json.Marshal(ls)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeLeaderState(b); err == nil {
			t.Errorf("accepted %+v", ls)
		}
	}
}
