package rsm

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/tenure-io/tenure/internal/recordkind"
	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
)

// Objects in the store, under {group}/:
//
//	leader_state.json   JSON, with a CRC-32C of its fields
//	log/{index:020d}    framed protobuf Entry (package record)
//	snapshot            manifest; earlier: chunked or framed protobuf Snapshot (package snapshot)
//	snap/...            base parts and log segments the manifest references (package snapshot)
const (
	leaderStateKey = "leader_state.json"
	logDir         = "log/"
	snapshotKey    = snapshot.Key
	snapDir        = snapshot.Dir
)

func logKey(group string, index uint64) string {
	return fmt.Sprintf("%s/%s%020d", group, logDir, index)
}

// parseLogKey returns the index of a log key under group, or false.
func parseLogKey(group, key string) (uint64, bool) {
	p := group + "/" + logDir
	if len(key) != len(p)+20 || key[:len(p)] != p {
		return 0, false
	}
	n, err := strconv.ParseUint(key[len(p):], 10, 64)
	return n, err == nil && n > 0
}

// leaderState is leader_state.json. It changes only on leadership and
// membership changes; Nonce and Counter make every write's bytes unique.
// Group and Incarnation are absent in records of the previous version (the
// checksum covers only the fields present, so those still verify).
// Kind, recordkind.RSMLeaderState in every record this version writes, is
// outside the checksum, so that a node of the previous version, which
// ignores the field, still verifies the rest during a rolling upgrade.
type leaderState struct {
	Kind        string `json:"kind,omitempty"`
	Term        uint64 `json:"term"`
	LeaderID    string `json:"leaderID"`
	LeaderAddr  string `json:"leaderAddr"`
	Group       string `json:"group,omitempty"`
	Incarnation string `json:"incarnation,omitempty"` // the leader's process: random per Node
	// LeaderKey is the fingerprint of the key the leader proves to its
	// peers (peerauth.go); absent in records of versions without peer
	// authentication, which therefore cannot lead nodes of this one.
	LeaderKey   string         `json:"leaderKey,omitempty"`
	Followers   []followerInfo `json:"followers"`
	CommitIndex uint64         `json:"commitIndex"` // a hint, not the truth
	LastUpdated string         `json:"lastUpdated"` // for people only
	Nonce       string         `json:"nonce"`
	Counter     uint64         `json:"counter"`
	Checksum    string         `json:"checksum"`
}

type followerInfo struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	ApplyIndex uint64 `json:"applyIndex"`
	// Meta is what the follower publishes (Node.SetMeta), as heartbeats
	// carry it: never in leader_state.json.
	Meta map[string]string `json:"-"`
}

func (ls leaderState) sum() string {
	ls.Checksum, ls.Kind = "", ""
	b, _ := json.Marshal(ls)
	return fmt.Sprintf("%08x", crc32.Checksum(b, record.Castagnoli))
}

func encodeLeaderState(ls leaderState, now time.Time) []byte {
	ls.Kind = recordkind.RSMLeaderState
	ls.Nonce = newNonceHex()
	ls.Counter++
	ls.LastUpdated = now.UTC().Format(time.RFC3339)
	ls.Checksum = ls.sum()
	b, _ := json.MarshalIndent(ls, "", "  ")
	return b
}

// decodeLeaderState decodes leader_state.json. A record of another kind
// (an election lock, which also has a leaderID and a term; a shard-lease
// record; a kind this version does not know) is refused with an error
// matching ErrForeignRecord that says what it is.
func decodeLeaderState(b []byte) (leaderState, error) {
	var ls leaderState
	if err := recordkind.Check(b, recordkind.RSMLeaderState); err != nil {
		return leaderState{}, fmt.Errorf("%w: %w", ErrForeignRecord, err)
	}
	if err := json.Unmarshal(b, &ls); err != nil {
		return leaderState{}, fmt.Errorf("leader state does not decode: %w", err)
	}
	if ls.Kind != "" && ls.Kind != recordkind.RSMLeaderState {
		return leaderState{}, fmt.Errorf("%w: it is a record of kind %q", ErrForeignRecord, ls.Kind)
	}
	if ls.Checksum != ls.sum() {
		return leaderState{}, fmt.Errorf("leader state checksum mismatch: stored %q, computed %q", ls.Checksum, ls.sum())
	}
	if ls.Term == 0 || ls.LeaderID == "" {
		return leaderState{}, errors.New("leader state has no term or no leader")
	}
	return ls, nil
}

func newNonceHex() string { return hex.EncodeToString(record.NewNonce()) }
