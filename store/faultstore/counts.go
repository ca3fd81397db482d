package faultstore

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"

	"github.com/tenure-io/tenure/store/driver"
)

// Op is a set of store operations. A single bit names one kind of call, as
// counted; rules and knobs take any union, such as OpGet|OpList or Writes.
// The zero Op is the empty set.
type Op uint8

// The kinds of call. A Put is a create when its condition is IfAbsent and a
// compare-and-swap otherwise (the portable layer sends no unconditional Put;
// a driver caller that does is counted under OpPutCAS). Deletes with and
// without a condition are both OpDelete.
const (
	OpGet Op = 1 << iota
	OpPutCreate
	OpPutCAS
	OpDelete
	OpList

	Reads  = OpGet | OpList
	Writes = OpPutCreate | OpPutCAS | OpDelete
	AllOps = Reads | Writes
)

const numOps = 5

var opNames = [numOps]string{"get", "put-create", "put-cas", "delete", "list"}

// String returns the names of the operations in o joined by "|", such as
// "put-create|put-cas", or "none" for the empty set.
func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	var parts []string
	for i := range numOps {
		if o&(1<<i) != 0 {
			parts = append(parts, opNames[i])
		}
	}
	if rest := o &^ AllOps; rest != 0 {
		parts = append(parts, fmt.Sprintf("Op(%#x)", uint8(rest)))
	}
	return strings.Join(parts, "|")
}

// index returns the counter slot of a single-bit Op.
func (o Op) index() int { return bits.TrailingZeros8(uint8(o)) }

// Result is the outcome of a call as its caller saw it: OK, or the
// classification of the error it got (driver.Kind), injected or not.
type Result uint8

const (
	OK Result = iota
	NotFound
	PreconditionFailed
	Conflict
	Throttled
	Transient
	Permanent
	InvalidArgument
	Canceled
	TooLarge
	Unknown

	numResults = iota
)

var resultNames = [numResults]string{
	"ok", "not_found", "precondition_failed", "conflict", "throttled",
	"transient", "permanent", "invalid_argument", "canceled", "too_large", "unknown",
}

// String returns the result's name in snake case, as it appears in metrics.
func (r Result) String() string {
	if int(r) < numResults {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// ResultOf returns the Result for an error of the given kind.
func ResultOf(kind driver.Kind) Result {
	switch kind {
	case driver.NotFound:
		return NotFound
	case driver.PreconditionFailed:
		return PreconditionFailed
	case driver.Conflict:
		return Conflict
	case driver.Throttled:
		return Throttled
	case driver.Transient:
		return Transient
	case driver.Permanent:
		return Permanent
	case driver.InvalidArgument:
		return InvalidArgument
	case driver.Canceled:
		return Canceled
	case driver.TooLarge:
		return TooLarge
	}
	return Unknown
}

// Key identifies one counter: a single operation and a result.
type Key struct {
	Op     Op
	Result Result
}

// Snapshot is a copy of a Store's counters taken by Counts. It holds only
// non-zero counters, so a test can compare it with a literal such as
//
//	faultstore.Snapshot{{faultstore.OpGet, faultstore.OK}: 2}
type Snapshot map[Key]int64

// Get returns the number of calls of the operations in ops with result r.
func (s Snapshot) Get(ops Op, r Result) int64 {
	var n int64
	for k, v := range s {
		if k.Op&ops != 0 && k.Result == r {
			n += v
		}
	}
	return n
}

// OpTotal returns the number of calls of the operations in ops, whatever
// their result.
func (s Snapshot) OpTotal(ops Op) int64 {
	var n int64
	for k, v := range s {
		if k.Op&ops != 0 {
			n += v
		}
	}
	return n
}

// ResultTotal returns the number of calls of any operation with result r.
func (s Snapshot) ResultTotal(r Result) int64 {
	var n int64
	for k, v := range s {
		if k.Result == r {
			n += v
		}
	}
	return n
}

// Total returns the number of calls: the requests a real store would have
// billed, counting those that failed.
func (s Snapshot) Total() int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

// Sub returns the calls made between an earlier snapshot and s, so that a
// benchmark can measure one phase without resetting the counters that other
// phases read.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	out := Snapshot{}
	for k, v := range s {
		if d := v - earlier[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range earlier {
		if _, ok := s[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// String returns one line per operation with its results in a fixed order,
// then the total, for example:
//
//	get ok=1 not_found=1
//	put-create ok=1 precondition_failed=1
//	total 4
func (s Snapshot) String() string {
	keys := make([]Key, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Op != keys[j].Op {
			return keys[i].Op < keys[j].Op
		}
		return keys[i].Result < keys[j].Result
	})
	var b strings.Builder
	for i, k := range keys {
		switch {
		case i == 0:
			b.WriteString(k.Op.String())
		case k.Op != keys[i-1].Op:
			b.WriteString("\n" + k.Op.String())
		}
		fmt.Fprintf(&b, " %s=%d", k.Result, s[k])
	}
	if len(keys) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "total %d\n", s.Total())
	return b.String()
}
