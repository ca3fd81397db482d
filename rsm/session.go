package rsm

import (
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Group settings: the options that change what apply does. The first
// leader of a group records its own in its seal; every snapshot carries
// them; a node whose options disagree refuses to join. Changing a setting
// of an existing group is not supported yet: a node started with a
// different value is refused, naming the setting.

// compareSettings names the first setting in which node differs from group.
func compareSettings(group, node *rsmpb.Settings) error {
	if group.MaxSessions != node.MaxSessions {
		return &SettingsMismatchError{Setting: "MaxDedupClients",
			Group: strconv.FormatUint(group.MaxSessions, 10), Node: strconv.FormatUint(node.MaxSessions, 10)}
	}
	if !slices.Equal(group.Machines, node.Machines) {
		return &SettingsMismatchError{Setting: "state machines",
			Group: fmt.Sprintf("%q", group.Machines), Node: fmt.Sprintf("%q", node.Machines)}
	}
	return nil
}

// sealSettings is what a new leader's seal carries: its own options if the
// group has recorded none yet (a new group, or one of the previous
// version), nothing otherwise.
func (n *Node) sealSettings() *rsmpb.Settings {
	var s *rsmpb.Settings
	n.rep.do(func(r *replica) {
		if r.settings == nil {
			s = proto.Clone(r.local).(*rsmpb.Settings)
		}
	})
	return s
}

// refuse stops the node for good: its options disagree with the group's.
// The replica calls it on its goroutine, so it only records and cancels.
func (n *Node) refuse(err error) {
	n.mu.Lock()
	if n.refusal == nil {
		n.refusal = err
	}
	n.mu.Unlock()
	n.log.Error("refusing to join the group", "err", err)
	n.cancel()
}

// Done is closed when the node stops: after Leave, or when it refuses to
// join because its options disagree with the group's settings.
func (n *Node) Done() <-chan struct{} { return n.ctx.Done() }

// Err is nil while the node runs. After it stops it is a
// *SettingsMismatchError (matching ErrSettingsMismatch) if the node
// refused to join, ErrClosed otherwise.
func (n *Node) Err() error {
	if n.ctx.Err() == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refusal != nil {
		return n.refusal
	}
	return ErrClosed
}

// commandOf is the log's form of a state request.
func commandOf(req *rsmpb.StateRequest) *rsmpb.Command {
	return &rsmpb.Command{Client: req.Client, Seq: req.Seq, Machine: req.Machine, Data: req.Data,
		Session: req.Session, Register: req.Register, FirstPending: req.FirstPending}
}

func (n *Node) stoppedErr() error {
	if err := n.Err(); err != nil {
		return err
	}
	return ErrClosed
}
