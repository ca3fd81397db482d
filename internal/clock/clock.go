// Package clock is the time source of tenure's components, injectable so
// that tests can control it. Decisions use only differences of Now (which
// carries a monotonic reading); Wall is for timestamps shown to people.
package clock

import "time"

// Clock tells time and makes timers.
type Clock interface {
	// Now returns the current time with a monotonic reading. Only
	// differences between values of Now are meaningful.
	Now() time.Time
	// Wall returns the wall-clock time, for timestamps written for people.
	// No decision may depend on it.
	Wall() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer returns a timer that sends on C after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable timer.
type Timer interface {
	// C is the timer's channel; nil for timers made by AfterFunc.
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time  { return time.Now() }
func (Real) Wall() time.Time { return time.Now().UTC().Round(0) }
func (Real) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// WallOffset is the real clock with its wall time shifted by a changeable
// offset: a wall-clock jump (an NTP step) that leaves monotonic time alone,
// as on a real machine. Used to show that no decision reads the wall clock.
type WallOffset struct {
	Real
	offset func() time.Duration
}

// NewWallOffset returns a clock whose Wall is the real wall time plus
// offset().
func NewWallOffset(offset func() time.Duration) WallOffset { return WallOffset{offset: offset} }

func (w WallOffset) Wall() time.Time { return w.Real.Wall().Add(w.offset()) }
