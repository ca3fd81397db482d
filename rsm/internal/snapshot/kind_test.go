package snapshot

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// TestFramesRefuseOtherKinds: a JSON record, or a log entry, where a
// segment or a base belongs is
// refused with ErrForeignRecord saying what it is: here a segment's and a
// base's decoders (rsm's test of the same name runs the others).
func TestFramesRefuseOtherKinds(t *testing.T) {
	entry, err := record.EncodeEntry(&rsmpb.Entry{Index: 1, Term: 1, Nonce: []byte("n"), Noop: true})
	if err != nil {
		t.Fatal(err)
	}
	lock := []byte(`{"kind":"tenure.lock","leaderID":"a","leaderAddr":"h:1","lastUpdated":"2026-11-29T05:00:00Z","term":7,"leaseMillis":15000,"session":"s","nonce":"n","counter":1,"released":false}`)
	decoders := map[string]func([]byte) error{
		"segment": func(b []byte) error { _, err := splitSegment(b, 1, 1); return err },
		"base":    func(b []byte) error { _, err := openChunked(bytes.NewReader(b)); return err },
	}
	for name, decode := range decoders {
		objects := map[string][]byte{"an election lock record": lock, "a JSON object without a kind": []byte(`{"hello":"world","padding":"0123456789"}`)}
		objects["a log entry"] = entry
		for what, data := range objects {
			err := decode(data)
			named := err != nil && strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimPrefix(what, "an "), "a "))
			if name == "base" && what != "a log entry" {
				named = err != nil && strings.Contains(err.Error(), "JSON object") // only its header is read
			}
			if !errors.Is(err, record.ErrForeignRecord) || !named {
				t.Errorf("%s decoder on %s: %v; want ErrForeignRecord naming it", name, what, err)
			}
		}
	}
}
