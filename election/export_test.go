package election

import "time"

// Test hooks. They are set before Start and never changed while running.

type Transition = transition

func (t Transition) Leading() bool { return t.leading }

func SetHookStep(e *Elector, f func())                 { e.hookStep = f }
func SetHookTransition(e *Elector, f func(Transition)) { e.hookTransition = f }

var DecodePeerResponse = decodePeerResponse

func (t Transition) Term() uint64        { return t.term }
func (t Transition) At() time.Time       { return t.at }
func (t Transition) Deadline() time.Time { return t.deadline }
