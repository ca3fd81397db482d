package lease

import "time"

// SetHook installs a test hook on a MemberLeases coordinator before Start.
func SetHook(c *Coordinator, f func(shard string, leading bool, term uint64, at, deadline time.Time)) {
	c.impl.(*memberMode).hook = f
}

var Balance = balance

// SetHookStep installs a function run at the top of every round of a
// MemberLeases coordinator, before Start.
func SetHookStep(c *Coordinator, f func()) { c.impl.(*memberMode).hookStep = f }
