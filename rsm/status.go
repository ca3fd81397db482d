package rsm

// State is a node's membership state in a group, as S2C names it.
type State int

const (
	// Joining: discovering the leader, catching up, or attempting leadership.
	Joining State = iota
	// Joined: following a leader, or leading.
	Joined
)

func (s State) String() string {
	if s == Joined {
		return "JOINED"
	}
	return "JOINING"
}

// Role is settled only while Joined.
type Role int

const (
	NoRole Role = iota
	Follower
	Leader
)

func (r Role) String() string {
	switch r {
	case Follower:
		return "FOLLOWER"
	case Leader:
		return "LEADER"
	}
	return "NONE"
}

// Status is a snapshot of a node's view of its group.
type Status struct {
	Group      string `json:"group"`
	ID         string `json:"id"`
	State      string `json:"state"`
	Role       string `json:"role"`
	Term       uint64 `json:"term"`
	LeaderID   string `json:"leaderID,omitempty"`
	LeaderAddr string `json:"leaderAddr,omitempty"`
	// PeerAuth is how the group's peer RPCs are protected, the same on
	// every node of a group: "peer keys" (TLS with keys published in the
	// store, the default), "mutual TLS" (a configured CA) or "plaintext"
	// (PlaintextLoopback).
	PeerAuth string `json:"peerAuth"`
	// ApplyIndex is the last log index applied to this node's machines.
	ApplyIndex uint64 `json:"applyIndex"`
	// SnapshotIndex is the end index of the snapshot this node last loaded
	// or wrote.
	SnapshotIndex uint64 `json:"snapshotIndex"`
	// SnapshotBaseBytes, SnapshotSegmentBytes and SnapshotSegments size
	// that snapshot: its base (the whole state at an index) and the log
	// segments applied after it. A cold start reads both and applies the
	// segments' commands, so its time follows them; the leader writes a
	// new base once the segments reach three times the base, or 1.5 times
	// once the group is quiet (docs/rsm.md, "What it costs"). All zero
	// for a snapshot in the whole-object format.
	SnapshotBaseBytes    uint64 `json:"snapshotBaseBytes,omitempty"`
	SnapshotSegmentBytes uint64 `json:"snapshotSegmentBytes,omitempty"`
	SnapshotSegments     int    `json:"snapshotSegments,omitempty"`
	// Followers are the leader's registered followers (leader only).
	Followers []FollowerStatus `json:"followers,omitempty"`
	// Members are the group's nodes this node knows of, the leader first:
	// on the leader itself and its followers, on a follower those the
	// leader's last heartbeat listed. Empty while no leader is known.
	Members []MemberStatus `json:"members,omitempty"`
	// Problem, if set, is why the node neither leads nor serves: an object
	// in the store that is corrupt or missing, and the reason, or another
	// live process using this node's ID. Requests on the node fail at once
	// with it until the object is repaired or the other process stops.
	Problem string `json:"problem,omitempty"`
}

// FollowerStatus is one follower as its leader sees it.
type FollowerStatus struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	ApplyIndex uint64 `json:"applyIndex"`
	// Meta is what the follower publishes (Node.SetMeta).
	Meta map[string]string `json:"meta,omitempty"`
}

// MemberStatus is a node of the group as this node knows it: from its
// own leadership, or from the leader's heartbeats.
type MemberStatus struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Leader bool   `json:"leader,omitempty"`
	// Meta is what the node publishes (Node.SetMeta), once it has reached
	// the leader (a heartbeat or two after it is set).
	Meta map[string]string `json:"meta,omitempty"`
}
