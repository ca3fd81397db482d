package lease_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// randomAssignment makes an assignment with names that need escaping now
// and then, so that both of the encoder's paths are taken.
func randomAssignment(rng *rand.Rand, n int) lease.Assignment {
	names := []string{"a", "member-1", "b c", "é", "x<y>&z", "q\"uote", "back\\slash", "tab\t", "\u2028", string([]byte{0xff, 'x'})}
	name := func() string { return names[rng.IntN(len(names))] }
	holders := func() []lease.Holder {
		if rng.IntN(3) > 0 {
			return nil
		}
		hs := make([]lease.Holder, 1+rng.IntN(3))
		for i := range hs {
			hs[i] = lease.Holder{Owner: name(), Session: name(), Term: rng.Uint64()}
		}
		return hs
	}
	a := lease.Assignment{Epoch: rng.Uint64(), Shards: map[string]lease.Entry{}, UpdatedBy: name(), Nonce: name(),
		LastUpdated: time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).UTC(), Evicted: holders()}
	for i := 0; i < n; i++ {
		e := lease.Entry{Term: rng.Uint64N(100), Waits: holders()}
		if rng.IntN(4) > 0 {
			e.Owner, e.Session = name(), name()
		}
		a.Shards[fmt.Sprintf("%s-%d", name(), i)] = e
	}
	return a
}

// TestEncodeIsEncodingJSON: the assignment's encoder writes exactly what
// encoding/json writes, so that every reader, earlier versions included,
// reads the same record.
func TestEncodeIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		a := randomAssignment(rng, rng.IntN(20))
		if i == 0 {
			a.Shards = nil
		}
		got, want := a.Encode(), lease.EncodeReflect(a)
		if !bytes.Equal(got, want) {
			t.Fatalf("Encode:\n%s\nencoding/json:\n%s", got, want)
		}
		if tab := lease.TableEncode(a); a.Shards != nil && !bytes.Equal(tab, want) {
			t.Fatalf("from the compact form:\n%s\nencoding/json:\n%s", tab, want)
		}
		back, err := lease.DecodeAssignment(got)
		if err != nil {
			// A shard ID with invalid UTF-8 comes back replaced and is
			// refused: the decoder's rule, not the encoder's.
			continue
		}
		var slow lease.Assignment
		if err := json.Unmarshal(got, &slow); err != nil {
			t.Fatal(err)
		}
		if slow.Shards == nil {
			slow.Shards = map[string]lease.Entry{}
		}
		if !reflect.DeepEqual(back, slow) {
			t.Fatalf("decoded %+v\nencoding/json %+v", back, slow)
		}
	}
}

// TestDecodeFastTakesWhatEncodeWrites: the one-pass decoder, not its
// fallback, reads the records members write with plain names.
func TestDecodeFastTakesWhatEncodeWrites(t *testing.T) {
	a := lease.Assignment{Kind: lease.AssignmentKind, Epoch: 7, Shards: map[string]lease.Entry{
		"s1": {Owner: "m1", Session: "S1", Term: 3, Waits: []lease.Holder{{Owner: "m2", Session: "S2", Term: 2}}},
		"s2": {Term: 1},
	}, UpdatedBy: "m1", LastUpdated: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Nonce: "N",
		Evicted: []lease.Holder{{Owner: "m3", Session: "S3"}}}
	got, ok := lease.DecodeFast(a.Encode())
	if !ok {
		t.Fatalf("the one-pass decoder refused %s", a.Encode())
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("decoded %+v; want %+v", got, a)
	}
}

// FuzzDecodeAssignment: whatever the one-pass decoder accepts, encoding/json
// decodes to the same assignment; anything accepted re-encodes to a record
// that decodes again.
func FuzzDecodeAssignment(f *testing.F) {
	f.Add([]byte(`{"epoch":3,"shards":{"s1":{"owner":"a","session":"x","term":2,"waits":[{"owner":"b","session":"y","term":1}]}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"shards":{"":{}}}`))
	f.Add([]byte(`{"epoch":01,"shards":{"a":{"term":1e3}}}`))
	f.Add([]byte(`{"shards":{"b":{"term":1},"a":{"term":2},"a":{"term":3}},"evicted":[],"lastUpdated":"2026-01-02T03:04:05Z"}`))
	f.Add(randomAssignment(rand.New(rand.NewPCG(1, 1)), 5).Encode())
	f.Add([]byte(`{"kind":"tenure.lease.assignment","epoch":3,"shards":{}}`))
	f.Add([]byte(`{"kind":"tenure.lock","epoch":3,"shards":{}}`))
	f.Add([]byte(`{"epoch":3,"shards":{},"leaderID":"a"}`))
	f.Add([]byte(`{"kind":"tenure.lease.assignment"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := lease.DecodeFast(data); ok {
			var slow lease.Assignment
			dec := json.NewDecoder(bytes.NewReader(data))
			if err := dec.Decode(&slow); err != nil || dec.More() {
				t.Fatalf("the one-pass decoder accepted what encoding/json refuses (%v): %q", err, data)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("decoders differ on %q:\none-pass %+v\nencoding/json %+v", data, fast, slow)
			}
		}
		a, err := lease.DecodeAssignment(data)
		// Members read records straight into their compact form: the
		// same record, the same errors.
		viaTable, terr := lease.DecodeTable(data)
		if (err == nil) != (terr == nil) || err == nil && string(viaTable.Encode()) != string(a.Encode()) {
			t.Fatalf("DecodeAssignment (%v) and the compact form (%v) differ on %q", err, terr, data)
		}
		if err != nil {
			return
		}
		if _, err := lease.DecodeAssignment(a.Encode()); err != nil {
			t.Fatalf("re-encoded assignment does not decode: %v", err)
		}
	})
}
