package election

import (
	"net/http"
	"time"
)

// Test hooks. They are set before Start and never changed while running.

type Transition = transition

func (t Transition) Leading() bool { return t.leading }

func SetHookStep(e *Elector, f func())                 { e.hookStep = f }
func SetHookTransition(e *Elector, f func(Transition)) { e.hookTransition = f }

var DecodePeerResponse = decodePeerResponse

func (t Transition) Term() uint64        { return t.term }
func (t Transition) At() time.Time       { return t.at }
func (t Transition) Deadline() time.Time { return t.deadline }

// SetPeerHTTPClient makes the elector ask the leader through c instead of
// the client it would build from PeerClientTLS, so that a test can put a
// fault-injecting transport between a follower and the leader.
func SetPeerHTTPClient(e *Elector, c *http.Client) { e.testPeerClient = c }

var ErrPeerNotLeading = errPeerNotLeading
