package kv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tenure-io/tenure/rsm"
)

// seedMachine is a machine with a few keys, for fuzz targets that need
// state.
func seedMachine() *Machine { return seedInto(New()) }

// seedInto applies seedMachine's commands to m.
func seedInto(m *Machine) *Machine {
	for _, c := range []command{
		{op: tagPut, key: "a", value: []byte("1")},
		{op: tagPut, key: "a/b", value: []byte{0, 0xff}},
		{op: tagPut, key: "b", value: nil},
		{op: tagCAS, key: "a", expect: 1, value: []byte("2")},
		{op: tagDelete, key: "b"},
		{op: tagPut, key: "c", value: []byte(strings.Repeat("v", 300))},
	} {
		m.Apply(c.encode())
	}
	return m
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []command{
		{op: tagPut, key: "k", value: []byte("v")},
		{op: tagPut, key: strings.Repeat("k", 200), value: nil},
		{op: tagDelete, key: "k"},
		{op: tagCAS, key: "k", expect: 1 << 40, value: []byte("v")},
	} {
		f.Add(c.encode())
	}
	f.Add([]byte{})
	f.Add([]byte{0x01, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		if got := c.encode(); !bytes.Equal(got, b) {
			t.Fatalf("decode then encode: %x; want %x", got, b)
		}
	})
}

func FuzzDecodeQuery(f *testing.F) {
	for _, q := range []query{
		{op: tagGet, key: "k"},
		{op: tagList, key: "a/", after: "a/1", limit: 10, maxBytes: 1000, keysOnly: true},
		{op: tagList},
	} {
		f.Add(q.encode())
	}
	f.Add([]byte{0x12, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeQuery(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		if got := q.encode(); !bytes.Equal(got, b) {
			t.Fatalf("decode then encode: %x; want %x", got, b)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, r := range []reply{
		{tag: tagPutResult, rev: 7},
		{tag: tagDeleteResult, ok: true, rev: 8},
		{tag: tagCASResult, ok: false, rev: 0},
		{tag: tagError, code: codeInvalidKey, msg: "kv: invalid key: empty"},
		{tag: tagGetResult},
		{tag: tagGetResult, found: true, kv: KeyValue{Value: []byte("v"), CreateRevision: 1, ModRevision: 3}},
		{tag: tagListResult, items: []KeyValue{{Key: "a", Value: []byte("1"), CreateRevision: 1, ModRevision: 2}, {Key: "b"}}, more: true},
	} {
		f.Add(r.encode())
	}
	f.Add([]byte{0x32, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReply(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		if got := r.encode(); !bytes.Equal(got, b) {
			t.Fatalf("decode then encode: %x; want %x", got, b)
		}
		// What a client makes of it must not panic either.
		for _, want := range []byte{tagPutResult, tagGetResult, tagListResult} {
			_, _ = expectReply(b, want)
		}
	})
}

// FuzzApply: any bytes, applied to a machine, give a result that decodes;
// bytes that are not a valid command change nothing.
func FuzzApply(f *testing.F) {
	f.Add(command{op: tagPut, key: "a", value: []byte("x")}.encode())
	f.Add(command{op: tagCAS, key: "a", expect: 2, value: []byte("y")}.encode())
	f.Add(command{op: tagDelete, key: "a/b"}.encode())
	f.Add([]byte{0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := seedMachine()
		before := snap(t, m)
		res := m.Apply(b)
		r, err := decodeReply(res)
		if err != nil {
			t.Fatalf("Apply(%x) = %x, which does not decode: %v", b, res, err)
		}
		c, err := decodeCommand(b)
		if err == nil {
			err = validKey(c.key)
		}
		if err != nil {
			if r.tag != tagError {
				t.Fatalf("Apply(%x) of an invalid command = %x; want an error result", b, res)
			}
			if !bytes.Equal(snap(t, m), before) {
				t.Fatalf("Apply(%x) of an invalid command changed the state", b)
			}
		}
	})
}

// FuzzQuery: any bytes, queried, give a result that decodes, and change
// nothing.
func FuzzQuery(f *testing.F) {
	f.Add(query{op: tagGet, key: "a"}.encode())
	f.Add(query{op: tagList, key: "a", after: "a", limit: 1}.encode())
	f.Add(query{op: tagList, maxBytes: 1}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m := seedMachine()
		before := snap(t, m)
		res, err := m.Query(b)
		if err != nil {
			t.Fatalf("Query(%x): %v; want errors in the result", b, err)
		}
		if _, err := decodeReply(res); err != nil {
			t.Fatalf("Query(%x) = %x, which does not decode: %v", b, res, err)
		}
		if !bytes.Equal(snap(t, m), before) {
			t.Fatalf("Query(%x) changed the state", b)
		}
	})
}

// FuzzRestore: any bytes either restore, and then snapshot and capture
// back to the same bytes, or fail and leave the state alone; read a byte
// at a time, they give the same outcome.
func FuzzRestore(f *testing.F) {
	f.Add(snap(f, seedMachine()))
	f.Add(snap(f, New()))
	f.Add(snap(f, seedEtcdMachine(f)))
	f.Add([]byte("TKVS\x01\x05\x01\x01a\x01x\x01\x06"))
	f.Add([]byte("TKVS\x02"))
	if old, err := os.ReadFile("testdata/snapshot-v1.bin"); err == nil {
		f.Add(old)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := seedMachine()
		before := snap(t, m)
		err := m.Restore(bytes.NewReader(b))
		slow := seedMachine()
		slowErr := slow.Restore(iotest.OneByteReader(bytes.NewReader(b)))
		if (err == nil) != (slowErr == nil) {
			t.Fatalf("restore: %v; a byte at a time: %v", err, slowErr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("error %v matches neither ErrCorruptSnapshot nor ErrSnapshotVersion", err)
			}
			if !bytes.Equal(snap(t, m), before) {
				t.Fatal("a failed restore changed the state")
			}
			return
		}
		if b[4] == 1 {
			// Format version 1 is written back as version 2, which
			// restores to the same bytes.
			b = snap(t, m)
			if err := m.Restore(bytes.NewReader(b)); err != nil {
				t.Fatalf("restoring the version 2 snapshot of a version 1 one: %v", err)
			}
		}
		if got := snap(t, m); !bytes.Equal(got, b) {
			t.Fatalf("restore then snapshot: %.200x; want %.200x", got, b)
		}
		var captured bytes.Buffer
		if n, err := m.Capture().WriteTo(&captured); err != nil || n != int64(len(b)) || !bytes.Equal(captured.Bytes(), b) {
			t.Fatalf("restore then capture: %d bytes, %v; want the %d restored", n, err, len(b))
		}
		if got := snap(t, slow); !bytes.Equal(got, b) {
			t.Fatalf("restore a byte at a time then snapshot: %x; want %x", got, b)
		}
	})
}

// FuzzCapture: the bytes are commands, applied in turn; a view captured
// part way writes the state at its capture, whatever follows.
func FuzzCapture(f *testing.F) {
	f.Add([]byte{3, 0, 1, 4, 0, 2, 5, 1, 1, 0, 2, 3, 0, 1, 9})
	f.Add(bytes.Repeat([]byte{0, 7, 200}, 300))
	f.Add([]byte{1, 1, 0, 2, 2, 2, 0, 3, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		m := seedMachine()
		at, b := int(b[0]), b[1:]
		var v rsm.StateView
		var want []byte
		for i := 0; i+2 < len(b); i += 3 {
			if i/3 == at {
				v, want = m.Capture(), snap(t, m)
			}
			key := fmt.Sprintf("k%d", b[i+1]%64)
			value := bytes.Repeat([]byte{b[i+1]}, int(b[i+2]))
			switch b[i] % 3 {
			case 0:
				m.Apply(command{op: tagPut, key: key, value: value}.encode())
			case 1:
				m.Apply(command{op: tagDelete, key: key}.encode())
			default:
				m.Apply(command{op: tagCAS, key: key, expect: uint64(b[i+2]), value: value}.encode())
			}
		}
		if v == nil {
			v, want = m.Capture(), snap(t, m)
			m.Apply(command{op: tagPut, key: "after", value: []byte("capture")}.encode())
		}
		var got bytes.Buffer
		if _, err := v.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("view: %x; want the state at capture %x", got.Bytes(), want)
		}
	})
}

func snap(t testing.TB, m *Machine) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// FuzzPreparedApply: a command prepared (Prepare, then ApplyPrepared)
// leaves the machine and its reply as Apply does, whatever its bytes; the
// machine keeps nothing of the command's memory, which a cold start reads
// the next segment into once the entries are applied.
func FuzzPreparedApply(f *testing.F) {
	for _, c := range []command{
		{op: tagPut, key: "a", value: []byte("v")},
		{op: tagPut, key: "new", value: nil},
		{op: tagPut, key: "", value: []byte("v")},
		{op: tagDelete, key: "a/b"},
		{op: tagDelete, key: "absent"},
		{op: tagCAS, key: "a", expect: 4, value: []byte("3")},
		{op: tagCAS, key: "a", expect: 1, value: []byte("3")},
		{op: tagCAS, key: "absent", expect: 0, value: []byte("x")},
	} {
		f.Add(c.encode())
	}
	f.Add([]byte{0x01, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		applied, prepared := seedMachine(), seedMachine()
		want := applied.Apply(bytes.Clone(b))
		cmd := bytes.Clone(b)
		got := prepared.ApplyPrepared(cmd, prepared.Prepare(cmd))
		for i := range cmd {
			cmd[i] ^= 0xff
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("prepared reply %x; Apply's %x", got, want)
		}
		var ws, gs bytes.Buffer
		if err := applied.Snapshot(&ws); err != nil {
			t.Fatal(err)
		}
		if err := prepared.Snapshot(&gs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gs.Bytes(), ws.Bytes()) {
			t.Fatal("the state after a prepared command differs from Apply's")
		}
	})
}
