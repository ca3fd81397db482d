package kv

import (
	"bytes"
	"testing"
)

// TestRestoreEndAcrossReadBuffers: snapshots whose last fields, checksum
// and end fall on each side of the read buffer's end restore whole. The
// buffer refilled for them is handed on like any other (checked under
// -race); large revisions make the fields long enough to reach it.
func TestRestoreEndAcrossReadBuffers(t *testing.T) {
	defer func(n int64) { restoreLendFrom = n }(restoreLendFrom)
	restoreLendFrom = 0 // lend from the first value
	retired := 0
	for n := snapReadBuffer - 120; n <= snapReadBuffer; n++ {
		m := New()
		m.rev = 1 << 45 // 7-byte varints
		m.Apply(command{op: tagPut, key: "k", value: bytes.Repeat([]byte{byte(n)}, n)}.encode())
		want := snap(t, m)
		// Where the reader's first buffer ends: past the value, within
		// the revisions, the checksum or at the very end.
		if end := len(want); end > snapReadBuffer && end-snapReadBuffer <= 18 {
			retired++
		}
		r := New()
		if err := r.Restore(bytes.NewReader(want)); err != nil {
			t.Fatalf("value of %d bytes: %v", n, err)
		}
		if got := snap(t, r); !bytes.Equal(got, want) {
			t.Fatalf("value of %d bytes: the restored machine's snapshot differs", n)
		}
	}
	if retired == 0 {
		t.Fatal("no snapshot ended just past the read buffer")
	}
}
