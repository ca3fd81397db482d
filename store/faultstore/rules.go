package faultstore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tenure-io/tenure/store/driver"
)

// Action is what an injected fault does to a call.
type Action int

const (
	// Fail returns an error of the rule's Kind without reaching the store.
	Fail Action = iota
	// Hang loses the request before it reaches the store: the caller waits
	// Delay, then gets a timeout (a Transient error matching
	// os.ErrDeadlineExceeded); with no Delay it waits until its ctx ends.
	Hang
	// ApplyThenFail is ambiguous success: the call reaches the store and
	// takes effect, then the caller gets a Transient error (a reset
	// connection, matching syscall.ECONNRESET) instead of the answer,
	// whatever the answer was. Delay, if set, passes before the error.
	ApplyThenFail
	// ApplyThenHang applies the call, then loses the response: the caller
	// waits Delay and gets a timeout, or with no Delay waits until its ctx
	// ends.
	ApplyThenHang
)

var actionNames = []string{"fail", "hang", "apply-then-fail", "apply-then-hang"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Rule injects a fault into some of the calls it matches. Rules are tried
// in the order they were added; the first that fires decides the call, and
// later rules do not see it.
type Rule struct {
	// Ops is the set of operations the rule applies to. It must not be
	// empty: use AllOps for every operation.
	Ops Op
	// Prefix restricts the rule to keys that start with it (for List, to
	// listed prefixes that start with it). Empty matches every key.
	Prefix string
	// P is the chance that a matching call is hit, drawn from the Store's
	// seeded source: 1 (or more) hits every call, 0 (or less) none.
	P float64
	// Skip lets the first Skip matching calls through untouched.
	Skip int
	// Times removes the rule after it has hit this many calls; 0 keeps it
	// until it is removed.
	Times int

	Action Action
	// Kind classifies the error a Fail rule returns. The zero Kind,
	// driver.Unknown, injects an error no classification recognises.
	Kind driver.Kind
	// Err, for Fail only, is wrapped by the injected error, so that
	// errors.As reaches it as it would reach an SDK's error type.
	Err error
	// Delay is how long the caller waits before it sees the fault. It is
	// optional for Fail and ApplyThenFail; for Hang and ApplyThenHang zero
	// means until the caller's ctx ends.
	Delay time.Duration
}

// Validate reports the first field that makes the rule invalid, naming it.
func (r Rule) Validate() error {
	switch {
	case r.Ops == 0:
		return errors.New("faultstore: Rule.Ops is empty; use AllOps for every operation")
	case r.Ops&^AllOps != 0:
		return fmt.Errorf("faultstore: Rule.Ops %v holds unknown operations", r.Ops)
	case math.IsNaN(r.P):
		return errors.New("faultstore: Rule.P is NaN")
	case r.Skip < 0:
		return fmt.Errorf("faultstore: Rule.Skip is %d; it must not be negative", r.Skip)
	case r.Times < 0:
		return fmt.Errorf("faultstore: Rule.Times is %d; it must not be negative", r.Times)
	case r.Delay < 0:
		return fmt.Errorf("faultstore: Rule.Delay is %v; it must not be negative", r.Delay)
	case r.Action < Fail || r.Action > ApplyThenHang:
		return fmt.Errorf("faultstore: Rule.Action %v is not an Action", r.Action)
	case r.Action != Fail && (r.Kind != driver.Unknown || r.Err != nil):
		return fmt.Errorf("faultstore: Rule.Kind and Rule.Err apply to Fail only, not %v", r.Action)
	}
	return nil
}

func (r Rule) matches(op Op, key string) bool {
	return r.Ops&op != 0 && strings.HasPrefix(key, r.Prefix)
}

// rule is a Rule with its place in the Store's list and its counters.
type rule struct {
	Rule
	id      uint64
	knob    knob // zero for rules added with AddRule or a *Next method
	matched int
	hits    int
}

// knob identifies a rule set by a rate method, so that calling the method
// again with the same ops (and kind) replaces the rule instead of adding one.
type knob struct {
	name string
	ops  Op
	kind driver.Kind
}

// fires reports whether a call with chance p is hit. It draws only for
// 0 < p < 1, so deterministic rules do not shift a seeded sequence.
func fires(r *rand.Rand, p float64) bool {
	switch {
	case p >= 1:
		return true
	case p > 0:
		return r.Float64() < p
	}
	return false
}
