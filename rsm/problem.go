package rsm

import (
	"errors"
	"strings"

	"github.com/tenure-io/tenure/store"
)

func (n *Node) noteCorrupt(err error) {
	var c *CorruptError
	switch {
	case !errors.As(err, &c):
	case errors.Is(c.Err, errMissing):
		n.log.Error("an object the group depends on is missing from the store", "key", c.Key, "err", c.Err)
	default:
		n.m.corrupt.WithLabelValues(n.group, objectKind(n.group, c.Key)).Inc()
		n.log.Error("corrupt object in the store; it is not applied", "key", c.Key, "err", c.Err)
	}
}

// recordProblem reports err and, if it is a corrupt or missing object, records it
// as the reason the node neither leads nor serves: Status shows it, the
// refused gauge counts it and requests fail at once with it, until the
// node joins again.
func (n *Node) recordProblem(err error) {
	err = storeCorrupt(err)
	n.noteCorrupt(err)
	n.setProblem(err)
}

// storeCorrupt returns err as a *CorruptError naming its key if it is a
// store's report of its own damaged data (store.ErrCorrupt: a file://
// pack missing a segment between others, a Route 53 record tenure did not
// write), else err: such an object is refused as a corrupt one is.
func storeCorrupt(err error) error {
	var c *CorruptError
	var s *store.Error
	if errors.Is(err, store.ErrCorrupt) && !errors.As(err, &c) && errors.As(err, &s) {
		return &CorruptError{Key: s.Key, Err: err}
	}
	return err
}

// setProblem is recordProblem for an error already reported.
func (n *Node) setProblem(err error) {
	kind, p := problemOf(n.group, err)
	if p == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.problem == nil {
		close(n.refused)
	} else if was, _ := problemOf(n.group, n.problem); was != kind {
		n.m.refused.WithLabelValues(n.group, was).Set(0)
	}
	n.problem = p
	n.m.refused.WithLabelValues(n.group, kind).Set(1)
}

// problemOf returns the refused gauge's object label and the problem in
// err that stops a node from leading or serving; nil if there is none.
// Another process writing as this node is seen in leader_state.json.
func problemOf(group string, err error) (string, error) {
	var c *CorruptError
	var d *DuplicateIDError
	switch {
	case errors.As(err, &c):
		return objectKind(group, c.Key), c
	case errors.As(err, &d):
		return "leader_state", d
	}
	return "", nil
}

func objectKind(group, key string) string {
	switch {
	case key == group+"/"+leaderStateKey:
		return "leader_state"
	case key == group+"/"+snapshotKey, strings.HasPrefix(key, group+"/"+snapDir):
		return "snapshot"
	}
	return "log"
}
