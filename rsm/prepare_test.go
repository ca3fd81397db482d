package rsm

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// preparer is a tape that prepares its commands: Prepare returns a copy
// of the command, which ApplyPrepared checks it is given back with.
type preparer struct {
	tape
	prepares, applied atomic.Int64
	mismatch          atomic.Value // a string: what ApplyPrepared was given against its command
}

func (*preparer) BorrowsCommands() {}

func (p *preparer) Prepare(cmd []byte) any {
	p.prepares.Add(1)
	return "prepared:" + string(cmd)
}

func (p *preparer) ApplyPrepared(cmd []byte, prepared any) []byte {
	p.applied.Add(1)
	if want := "prepared:" + string(cmd); prepared != want {
		p.mismatch.Store(fmt.Sprintf("%q given %v", cmd, prepared))
	}
	return p.Apply(cmd)
}

// TestPreparers: a cold start prepares commands only for the Preparers of
// a group whose machines all borrow their commands.
func TestPreparers(t *testing.T) {
	p := &preparer{}
	for _, c := range []struct {
		machines map[string]StateMachine
		want     []string
	}{
		{map[string]StateMachine{"a": p}, []string{"a"}},
		{map[string]StateMachine{"a": p, "b": &lender{}}, []string{"a"}},
		{map[string]StateMachine{"a": p, "b": &tape{}}, nil},
		{map[string]StateMachine{"b": &lender{}}, nil},
	} {
		got := preparers(c.machines)
		var names []string
		for name := range got {
			names = append(names, name)
		}
		if fmt.Sprint(names) != fmt.Sprint(c.want) {
			t.Errorf("preparers(%d machines) = %v, want %v", len(c.machines), names, c.want)
		}
	}
}

// TestReplicaAppliesPrepared: a prepared command goes to ApplyPrepared
// with what was prepared for it; one the session table finds applied
// already is not applied again, prepared or not.
func TestReplicaAppliesPrepared(t *testing.T) {
	p := &preparer{}
	r, err := newReplica(map[string]StateMachine{"tape": p}, 8)
	if err != nil {
		t.Fatal(err)
	}
	r.apply(settingsSeal(1, 1, 8, "tape"))
	r.apply(mkEntry(2, 1, regCmd("node-0")))
	_, res := r.applyPrepared(mkEntry(3, 1, sCmd(1, 1, "tape", "x"), sCmd(1, 2, "tape", "y")), []any{"prepared:x", nil})
	if !equalResults(res, []result{okResult("1:x"), okResult("2:y")}) {
		t.Fatalf("results %+v", res)
	}
	if p.applied.Load() != 1 {
		t.Fatalf("ApplyPrepared called %d times; want once, for the prepared command", p.applied.Load())
	}
	_, res = r.applyPrepared(mkEntry(4, 1, sCmd(1, 2, "tape", "y")), []any{"prepared:y"}) // a retry
	if !equalResults(res, []result{okResult("2:y")}) || p.applied.Load() != 1 || len(p.cmds) != 2 {
		t.Fatalf("a retry: results %+v, ApplyPrepared %d times, %d applied", res, p.applied.Load(), len(p.cmds))
	}
	if v := p.mismatch.Load(); v != nil {
		t.Fatal(v)
	}
}
