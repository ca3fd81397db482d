package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-io/tenure/rsm/rsmtest"
)

// fenceEvent is one line a lock-holding client process of
// TestEtcdFaults reports: it acquired (Token is its key's create
// revision), it is about to call a fenced write of Value, the write's
// Result ("ok" with Rev, "rejected": its key was no longer the holder's,
// "unknown": an error), or it released.
type fenceEvent struct {
	Client string `json:"client"`
	Kind   string `json:"kind"`
	Ev     string `json:"ev"` // acquired, call, write, released
	Token  int64  `json:"token,omitempty"`
	Value  string `json:"value,omitempty"`
	Result string `json:"result,omitempty"`
	Rev    int64  `json:"rev,omitempty"`
	At     int64  `json:"at"` // the client's wall clock, in Unix nanoseconds
}

// histEvent is one event of the group's full history, read with a watch
// from revision 1.
type histEvent struct {
	Key, Value  string
	Rev, Create int64
	Delete      bool
}

// checkFencing checks the writes to resource against the keys under
// lockPrefix, where the holder is the key of lowest create revision (the
// rule of concurrency.Mutex, concurrency.Election and the etcd-leader
// algorithm alike), and against what the clients of events reported:
//
//   - every write to resource was called by a client, once, and at its
//     revision the writer's key (its token) was the holder's;
//   - tokens only grow along the history: once a later holder wrote, no
//     earlier holder's write appears;
//   - every acknowledged write is in the history at the revision it was
//     acknowledged at;
//   - each client's tokens grow from one acquisition to the next, and no
//     two clients hold the same token.
//
// hist must be in revision order. It returns every violation found (at
// most 20).
func checkFencing(lockPrefix, resource string, hist []histEvent, events []fenceEvent) []string {
	var bad []string
	report := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	calls := map[string]fenceEvent{}
	lastTok := map[string]int64{}
	tokClient := map[int64]string{}
	for _, e := range events {
		switch e.Ev {
		case "call":
			calls[e.Value] = e
		case "acquired":
			if e.Token <= lastTok[e.Client] {
				report("%s acquired with token %d after holding with token %d", e.Client, e.Token, lastTok[e.Client])
			}
			lastTok[e.Client] = e.Token
			if c, ok := tokClient[e.Token]; ok && c != e.Client {
				report("%s and %s both acquired with token %d", c, e.Client, e.Token)
			}
			tokClient[e.Token] = e.Client
		}
	}

	live := map[string]int64{} // lock key -> create revision
	written := map[string]int64{}
	var maxTok int64
	var maxVal string
	for _, h := range hist {
		if strings.HasPrefix(h.Key, lockPrefix) {
			if h.Delete {
				delete(live, h.Key)
			} else {
				live[h.Key] = h.Create
			}
			continue
		}
		if h.Key != resource || h.Delete {
			continue
		}
		if rev, dup := written[h.Value]; dup {
			report("write %q is in the history twice, at revisions %d and %d", h.Value, rev, h.Rev)
		}
		written[h.Value] = h.Rev
		c, ok := calls[h.Value]
		if !ok {
			report("write %q at revision %d was never called by a client", h.Value, h.Rev)
			continue
		}
		var holder int64
		for _, cr := range live {
			if holder == 0 || cr < holder {
				holder = cr
			}
		}
		if holder != c.Token {
			report("%s wrote %q at revision %d with token %d while the holder's key had create revision %d", c.Client, h.Value, h.Rev, c.Token, holder)
		}
		if c.Token < maxTok {
			report("%s wrote %q at revision %d with token %d after %q was written with token %d", c.Client, h.Value, h.Rev, c.Token, maxVal, maxTok)
		}
		if c.Token >= maxTok {
			maxTok, maxVal = c.Token, h.Value
		}
	}
	for _, e := range events {
		if e.Ev != "write" || e.Result != "ok" {
			continue
		}
		rev, ok := written[e.Value]
		switch {
		case !ok:
			report("%s's acknowledged write %q at revision %d is not in the history", e.Client, e.Value, e.Rev)
		case rev != e.Rev:
			report("%s's write %q was acknowledged at revision %d but is in the history at %d", e.Client, e.Value, e.Rev, rev)
		}
	}
	return bad
}

// checkLinDurable checks that every write of the workload acknowledged
// before the cold restart is in the history at its revision, and that no
// value was written twice (a write of unknown outcome applied again).
func checkLinDurable(hist []histEvent, ops []porcupine.Operation) []string {
	var bad []string
	puts := map[string][]int64{}
	deletes := map[string]map[int64]bool{}
	for _, h := range hist {
		if !strings.HasPrefix(h.Key, "l/") {
			continue
		}
		if h.Delete {
			if deletes[h.Key] == nil {
				deletes[h.Key] = map[int64]bool{}
			}
			deletes[h.Key][h.Rev] = true
			continue
		}
		puts[h.Value] = append(puts[h.Value], h.Rev)
	}
	for v, revs := range puts {
		if len(revs) > 1 {
			bad = append(bad, fmt.Sprintf("value %q written %d times, at revisions %v", v, len(revs), revs))
		}
	}
	for _, op := range ops {
		in, out := op.Input.(rsmtest.KVInput), op.Output.(rsmtest.KVOutput)
		if out.Unknown {
			continue
		}
		switch {
		case in.Op == rsmtest.KVPut || in.Op == rsmtest.KVCAS && out.Found:
			if revs := puts[in.Value]; len(revs) != 1 || revs[0] != int64(out.Rev) {
				bad = append(bad, fmt.Sprintf("%s acknowledged at revision %d; in the history at %v", in.Op, out.Rev, revs))
			}
		case in.Op == rsmtest.KVDelete && out.Found:
			if !deletes[in.Key][int64(out.Rev)] {
				bad = append(bad, fmt.Sprintf("delete of %s acknowledged at revision %d is not in the history", in.Key, out.Rev))
			}
		}
		if len(bad) >= 20 {
			break
		}
	}
	return bad
}

// TestCheckFencingFindsViolations plants each kind of violation in a
// history that passes, and checks that checkFencing reports it.
func TestCheckFencingFindsViolations(t *testing.T) {
	const lock, res = "f/lock/", "f/res"
	// a holds with token 2 and writes at 3; its key is deleted at 4 (its
	// lease expired); b puts its key at 5, holds, and writes at 6 and 7.
	good := func() ([]histEvent, []fenceEvent) {
		hist := []histEvent{
			{Key: lock + "a", Rev: 2, Create: 2},
			{Key: res, Value: "a/2/1", Rev: 3, Create: 3},
			{Key: lock + "a", Rev: 4, Delete: true},
			{Key: lock + "b", Rev: 5, Create: 5},
			{Key: res, Value: "b/5/1", Rev: 6, Create: 3},
			{Key: res, Value: "b/5/2", Rev: 7, Create: 3},
		}
		events := []fenceEvent{
			{Client: "a", Ev: "acquired", Token: 2},
			{Client: "a", Ev: "call", Token: 2, Value: "a/2/1"},
			{Client: "a", Ev: "write", Token: 2, Value: "a/2/1", Result: "ok", Rev: 3},
			{Client: "b", Ev: "acquired", Token: 5},
			{Client: "b", Ev: "call", Token: 5, Value: "b/5/1"},
			{Client: "b", Ev: "write", Token: 5, Value: "b/5/1", Result: "ok", Rev: 6},
			{Client: "b", Ev: "call", Token: 5, Value: "b/5/2"},
			{Client: "b", Ev: "write", Token: 5, Value: "b/5/2", Result: "unknown"},
			// a, paused past its lease, tries again and is rejected.
			{Client: "a", Ev: "call", Token: 2, Value: "a/2/2"},
			{Client: "a", Ev: "write", Token: 2, Value: "a/2/2", Result: "rejected"},
		}
		return hist, events
	}
	if h, e := good(); len(checkFencing(lock, res, h, e)) != 0 {
		t.Fatalf("a good history is reported: %q", checkFencing(lock, res, h, e))
	}
	for _, c := range []struct {
		name  string
		plant func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent)
		want  string
	}{
		{"a stale holder writes after the next one", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return append(h, histEvent{Key: res, Value: "a/2/2", Rev: 8, Create: 3}), e
		}, "with token 2 after \"b/5/2\" was written with token 5"},
		{"a writer whose key is not the holder's", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			// b writes at 4 while a's key still is the holder's.
			h = append(h[:2:2], histEvent{Key: res, Value: "b/5/0", Rev: 4})
			return h, append(e[:3:3], fenceEvent{Client: "b", Ev: "call", Token: 5, Value: "b/5/0"})
		}, "while the holder's key had create revision 2"},
		{"an acknowledged write is missing", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return h[:5], append(e, fenceEvent{Client: "b", Ev: "write", Token: 5, Value: "b/5/2", Result: "ok", Rev: 7})
		}, "acknowledged write \"b/5/2\" at revision 7 is not in the history"},
		{"an acknowledged write at another revision", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			e[5].Rev = 9
			return h, e
		}, "acknowledged at revision 9 but is in the history at 6"},
		{"a write nobody called", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return append(h, histEvent{Key: res, Value: "c/5/1", Rev: 8}), e
		}, "never called"},
		{"a write applied twice", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return append(h, histEvent{Key: res, Value: "b/5/2", Rev: 8}), e
		}, "in the history twice"},
		{"a token that shrinks", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return h, append(e, fenceEvent{Client: "b", Ev: "acquired", Token: 4})
		}, "b acquired with token 4 after holding with token 5"},
		{"two clients with one token", func(h []histEvent, e []fenceEvent) ([]histEvent, []fenceEvent) {
			return h, append(e, fenceEvent{Client: "c", Ev: "acquired", Token: 5})
		}, "b and c both acquired with token 5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, e := c.plant(good())
			bad := checkFencing(lock, res, h, e)
			if !strings.Contains(strings.Join(bad, "\n"), c.want) {
				t.Fatalf("violations %q; want one saying %q", bad, c.want)
			}
		})
	}
}

// TestCheckLinDurableFindsViolations plants a lost write, a write at
// another revision, a lost delete and a write applied twice in a history
// that passes, and checks that checkLinDurable reports each.
func TestCheckLinDurableFindsViolations(t *testing.T) {
	op := func(in rsmtest.KVInput, out rsmtest.KVOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out}
	}
	ops := []porcupine.Operation{
		op(rsmtest.KVInput{Op: rsmtest.KVPut, Key: "l/a", Value: "w0-1"}, rsmtest.KVOutput{Rev: 2}),
		op(rsmtest.KVInput{Op: rsmtest.KVCAS, Key: "l/a", Value: "w0-2", Expect: 2}, rsmtest.KVOutput{Found: true, Rev: 3}),
		op(rsmtest.KVInput{Op: rsmtest.KVPut, Key: "l/b", Value: "w1-1"}, rsmtest.KVOutput{Unknown: true}),
		op(rsmtest.KVInput{Op: rsmtest.KVDelete, Key: "l/a"}, rsmtest.KVOutput{Found: true, Rev: 5}),
	}
	hist := []histEvent{
		{Key: "l/a", Value: "w0-1", Rev: 2, Create: 2},
		{Key: "l/a", Value: "w0-2", Rev: 3, Create: 2},
		{Key: "l/b", Value: "w1-1", Rev: 4, Create: 4},
		{Key: "l/a", Rev: 5, Delete: true},
	}
	if bad := checkLinDurable(hist, ops); len(bad) != 0 {
		t.Fatalf("a good history is reported: %q", bad)
	}
	for _, c := range []struct {
		name string
		hist []histEvent
		want string
	}{
		{"a lost put", slices.Delete(slices.Clone(hist), 0, 1), "put acknowledged at revision 2; in the history at []"},
		{"a cas at another revision", []histEvent{hist[0], {Key: "l/a", Value: "w0-2", Rev: 6, Create: 2}, hist[2], hist[3]}, "cas acknowledged at revision 3; in the history at [6]"},
		{"a lost delete", hist[:3], "delete of l/a acknowledged at revision 5 is not in the history"},
		{"an unknown write applied twice", append(slices.Clone(hist), histEvent{Key: "l/b", Value: "w1-1", Rev: 6, Create: 4}), `value "w1-1" written 2 times`},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := checkLinDurable(c.hist, ops)
			if !strings.Contains(strings.Join(bad, "\n"), c.want) {
				t.Fatalf("violations %q; want one saying %q", bad, c.want)
			}
		})
	}
}
