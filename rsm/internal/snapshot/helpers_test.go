package snapshot

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// testEntryMax stands for rsm's bound of a log entry object.
const testEntryMax = record.Header + 63<<20

// newTestStore is a Store of group "g" over st whose store calls are
// made once each, without retries.
func newTestStore(st *store.Store, o Options) *Store {
	if o.Do == nil {
		o.Do = func(ctx context.Context, call func(ctx context.Context) error) error { return call(ctx) }
	}
	if o.Resolve == nil {
		o.Resolve = func(owns func([]byte) bool, max int64) store.ResolveOptions {
			return store.ResolveOptions{Attempts: 1, Owns: owns, MaxSize: max}
		}
	}
	if o.EntryMax == 0 {
		o.EntryMax = testEntryMax
	}
	return New(st, "g", o)
}

func mkEntry(index, term uint64, cmds ...*rsmpb.Command) *rsmpb.Entry {
	return &rsmpb.Entry{Index: index, Term: term, Writer: "w", Nonce: []byte{byte(index), byte(term)}, Noop: len(cmds) == 0, Commands: cmds}
}

func regCmd(label string) *rsmpb.Command { return &rsmpb.Command{Register: true, Client: label} }

func sCmd(session, seq uint64, machine, data string) *rsmpb.Command {
	return &rsmpb.Command{Session: session, Seq: seq, Machine: machine, Data: []byte(data)}
}

// preparer prepares a command as a copy of it, and counts.
type preparer struct{ prepares atomic.Int64 }

func (p *preparer) Prepare(cmd []byte) any {
	p.prepares.Add(1)
	return "prepared:" + string(cmd)
}

// testCaptured is a state of machines "a", "b", … holding data, captured
// at index 4.
func testCaptured(data ...string) *Captured {
	h := &rsmpb.Snapshot{EndIndex: 4, StartIndex: 1, Nonce: []byte("0123456789ab"), Group: "g"}
	c := &Captured{Head: h}
	for i, d := range data {
		h.Machines = append(h.Machines, &rsmpb.MachineState{Name: string(rune('a' + i))})
		c.Views = append(c.Views, BytesView(d))
	}
	return c
}

// encodeCapturedT returns c in the chunked format.
func encodeCapturedT(t testing.TB, c *Captured) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func deleteT(t *testing.T, mem driver.Store, key string) {
	t.Helper()
	if err := mem.Delete(t.Context(), key, driver.Cond{}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}
