package rsm

import (
	"context"
	"encoding/binary"
	"errors"
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

// validSettings checks settings decoded from the store.
func validSettings(s *rsmpb.Settings) error {
	if s.MaxSessions == 0 || s.MaxSessions > 1<<31 {
		return fmt.Errorf("settings bound the sessions to %d", s.MaxSessions)
	}
	if len(s.Machines) == 0 {
		return errors.New("settings name no state machine")
	}
	for i, m := range s.Machines {
		if m == "" || (i > 0 && s.Machines[i-1] >= m) {
			return fmt.Errorf("settings' machine names %q are not sorted, unique and non-empty", s.Machines)
		}
	}
	return nil
}

// sealSettings is what a new leader's seal carries: its own options if the
// group has recorded none yet (a new group, or one of the previous
// version), nothing otherwise.
func (n *Node) sealSettings() *rsmpb.Settings {
	n.repMu.Lock()
	defer n.repMu.Unlock()
	if n.rep.settings != nil {
		return nil
	}
	return proto.Clone(n.rep.local).(*rsmpb.Settings)
}

// refuse stops the node for good: its options disagree with the group's.
// The replica calls it with repMu held, so it only records and cancels.
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

// ensureSession returns once the node holds a session, registering one
// through the log if it has none. Concurrent callers share one
// registration.
func (n *Node) ensureSession(ctx context.Context) error {
	for {
		n.subMu.Lock()
		if n.session != 0 {
			n.subMu.Unlock()
			return nil
		}
		if ch := n.registering; ch != nil {
			n.subMu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-n.ctx.Done():
				return n.stoppedErr()
			}
		}
		ch := make(chan struct{})
		n.registering = ch
		n.subMu.Unlock()
		id, err := n.register(ctx)
		n.subMu.Lock()
		n.registering = nil
		if err == nil {
			n.session, n.seq, n.awaiting = id, 0, awaiting{}
		}
		n.subMu.Unlock()
		close(ch)
		return err
	}
}

// register opens a session. Its label, unique to this registration, lets
// a retried registration find the session an earlier attempt opened.
func (n *Node) register(ctx context.Context) (uint64, error) {
	label := n.host.cfg.ID + "#" + newNonceHex()[:12]
	req := &rsmpb.StateRequest{Group: n.group, Type: rsmpb.RequestType_COMMAND, Register: true, Client: label}
	res, err := n.roundTrip(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("rsm: registering a session: %w", err)
	}
	if len(res) != 8 || binary.BigEndian.Uint64(res) == 0 {
		return 0, fmt.Errorf("rsm: registering a session: the leader answered %d bytes, not a session number", len(res))
	}
	return binary.BigEndian.Uint64(res), nil
}

// dropSession forgets session old, if it is still the node's: the next
// command registers a new one. Commands numbered under it that cannot
// have been applied are renumbered by their submitters.
func (n *Node) dropSession(old uint64) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	if old != 0 && n.session == old {
		n.session, n.seq, n.awaiting = 0, 0, awaiting{}
	}
}

// settle notes that the node awaits the answer of command seq of session
// no longer.
func (n *Node) settle(session, seq uint64) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	if seq != 0 && session == n.session {
		n.awaiting.remove(seq, n.seq)
	}
}

// awaiting is the set of sequence numbers of a session whose answers its
// node awaits, with the lowest of them: every command carries it
// (Command.first_pending) so that the group keeps the results of the
// commands a retry may ask for again, and forgets the others.
type awaiting struct {
	set   map[uint64]struct{}
	first uint64 // the lowest number in set; 0 when set is empty
}

// add adds seq, the highest number given out so far, and returns the
// lowest awaited.
func (a *awaiting) add(seq uint64) uint64 {
	if a.set == nil {
		a.set = map[uint64]struct{}{}
	}
	a.set[seq] = struct{}{}
	if a.first == 0 {
		a.first = seq
	}
	return a.first
}

// remove removes seq; last is the highest number given out so far.
func (a *awaiting) remove(seq, last uint64) {
	if _, ok := a.set[seq]; !ok {
		return
	}
	delete(a.set, seq)
	if seq != a.first {
		return
	}
	a.first = 0
	for s := seq + 1; s <= last && len(a.set) > 0; s++ {
		if _, ok := a.set[s]; ok {
			a.first = s
			return
		}
	}
}

// sessionDropped reports whether session s is no longer the node's.
func (n *Node) sessionDropped(s uint64) bool {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	return s != n.session
}

func (n *Node) stoppedErr() error {
	if err := n.Err(); err != nil {
		return err
	}
	return ErrClosed
}
