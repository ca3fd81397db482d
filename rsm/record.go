package rsm

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/internal/recordkind"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Objects in the store, under {group}/:
//
//	leader_state.json   JSON, with a CRC-32C of its fields
//	log/{index:020d}    framed protobuf Entry
//	snapshot            manifest (snapinc.go); earlier: chunked (snapfile.go) or framed protobuf Snapshot
//	snap/...            base parts and log segments the manifest references (snapinc.go)
//
// A frame is magic "TNR1", one kind byte, the CRC-32C (Castagnoli) of the
// payload, big-endian, then the payload.
const (
	leaderStateKey = "leader_state.json"
	logDir         = "log/"
	snapshotKey    = "snapshot"
	frameMagic     = "TNR1"
	kindEntry      = 'E'
	kindSnapshot   = 'S'
	frameHeader    = len(frameMagic) + 1 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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

func frame(kind byte, payload []byte) []byte {
	b := make([]byte, frameHeader+len(payload))
	copy(b, frameMagic)
	b[len(frameMagic)] = kind
	binary.BigEndian.PutUint32(b[len(frameMagic)+1:], crc32.Checksum(payload, castagnoli))
	copy(b[frameHeader:], payload)
	return b
}

// frameNames names the kinds of frame, for errors.
var frameNames = map[byte]string{
	kindEntry: "log entry", kindSnapshot: "snapshot", kindChunked: "chunked snapshot or base part",
	kindManifest: "snapshot manifest", kindSegment: "log segment",
}

// frameKindError says that b, which does not start with want's frame, is
// another kind of object: a frame of another kind, or a JSON record (a
// lock, a lease record, another program's), each matching
// ErrForeignRecord; nil when b is neither (corrupt bytes, left to the
// caller).
func frameKindError(b []byte, want byte) error {
	if len(b) > len(frameMagic) && string(b[:len(frameMagic)]) == frameMagic && b[len(frameMagic)] != want {
		got, ok := frameNames[b[len(frameMagic)]]
		if !ok {
			got = fmt.Sprintf("frame of kind %q, which this version does not know,", b[len(frameMagic)])
		}
		return fmt.Errorf("%w: it is a %s, not a %s", ErrForeignRecord, got, frameNames[want])
	}
	if d := recordkind.Describe(b); d != "" {
		return fmt.Errorf("%w: %s, not a %s", ErrForeignRecord, d, frameNames[want])
	}
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) {
		// Only the start was read (a base's header), or it is cut short.
		return fmt.Errorf("%w: it starts as a JSON object, not as a %s", ErrForeignRecord, frameNames[want])
	}
	return nil
}

func unframe(kind byte, b []byte) ([]byte, error) {
	if len(b) < frameHeader || string(b[:len(frameMagic)]) != frameMagic || b[len(frameMagic)] != kind {
		if err := frameKindError(b, kind); err != nil {
			return nil, err
		}
	}
	if len(b) < frameHeader {
		return nil, fmt.Errorf("%d bytes is shorter than the %d-byte header", len(b), frameHeader)
	}
	if string(b[:len(frameMagic)]) != frameMagic {
		return nil, fmt.Errorf("bad magic %q (want %q)", b[:len(frameMagic)], frameMagic)
	}
	payload := b[frameHeader:]
	if got, want := crc32.Checksum(payload, castagnoli), binary.BigEndian.Uint32(b[len(frameMagic)+1:]); got != want {
		return nil, fmt.Errorf("checksum mismatch: computed %08x, stored %08x", got, want)
	}
	return payload, nil
}

// encodeEntry marshals e behind room for the frame's header and fills the
// header in, as frame does: one buffer per entry, not a second one for the
// frame.
func encodeEntry(e *rsmpb.Entry) ([]byte, error) {
	return appendEntry(make([]byte, 0, frameHeader+proto.Size(e)), e)
}

// appendEntry appends e to b, framed as encodeEntry frames it.
func appendEntry(b []byte, e *rsmpb.Entry) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, e)
	if err != nil {
		return nil, err
	}
	copy(b[start:], frameMagic)
	b[start+len(frameMagic)] = kindEntry
	binary.BigEndian.PutUint32(b[start+len(frameMagic)+1:], crc32.Checksum(b[start+frameHeader:], castagnoli))
	return b, nil
}

// decodeEntry decodes a log object read at index.
func decodeEntry(b []byte, index uint64) (*rsmpb.Entry, error) {
	p, err := unframe(kindEntry, b)
	if err != nil {
		return nil, err
	}
	e := new(rsmpb.Entry)
	if err := proto.Unmarshal(p, e); err != nil {
		return nil, fmt.Errorf("entry does not decode: %w", err)
	}
	if err := checkEntry(e, index); err != nil {
		return nil, err
	}
	return e, nil
}

// checkEntry checks an entry decoded from a log object read at index.
func checkEntry(e *rsmpb.Entry, index uint64) error {
	switch {
	case e.Index != index:
		return fmt.Errorf("entry says index %d, stored at %d", e.Index, index)
	case e.Term == 0:
		return errors.New("entry has term 0")
	case len(e.Nonce) == 0:
		return errors.New("entry has no nonce")
	case e.Noop && len(e.Commands) > 0:
		return errors.New("no-op entry carries commands")
	case e.Commit >= e.Index:
		return fmt.Errorf("entry at %d says index %d was committed before it", e.Index, e.Commit)
	}
	for i, c := range e.Commands {
		switch {
		case c.Register:
			if c.Client == "" || c.Session != 0 || c.Seq != 0 {
				return fmt.Errorf("command %d registers a session without a label, or with a session or sequence number", i)
			}
		case c.Session != 0:
			if c.Seq == 0 || c.Client != "" {
				return fmt.Errorf("command %d of session %d has no sequence number, or a client", i, c.Session)
			}
		case c.Client == "" || c.Seq == 0:
			return fmt.Errorf("command %d has no session, client or sequence number", i)
		}
	}
	if e.Settings != nil {
		if !e.Noop {
			return errors.New("settings on an entry that is not a seal")
		}
		if err := validSettings(e.Settings); err != nil {
			return err
		}
	}
	return nil
}

func encodeSnapshot(s *rsmpb.Snapshot) ([]byte, error) {
	p, err := proto.Marshal(s)
	if err != nil {
		return nil, err
	}
	return frame(kindSnapshot, p), nil
}

func decodeSnapshot(b []byte) (*rsmpb.Snapshot, error) {
	p, err := unframe(kindSnapshot, b)
	if err != nil {
		return nil, err
	}
	s := new(rsmpb.Snapshot)
	if err := proto.Unmarshal(p, s); err != nil {
		return nil, fmt.Errorf("snapshot does not decode: %w", err)
	}
	if err := checkSnapshot(s); err != nil {
		return nil, err
	}
	return s, nil
}

// checkSnapshot checks a decoded snapshot's fields (either format).
func checkSnapshot(s *rsmpb.Snapshot) error {
	switch {
	case s.EndIndex == 0:
		return errors.New("snapshot has end index 0")
	case s.StartIndex == 0 || s.StartIndex > s.EndIndex+1:
		return fmt.Errorf("snapshot start index %d does not fit end index %d", s.StartIndex, s.EndIndex)
	case len(s.Nonce) == 0:
		return errors.New("snapshot has no nonce")
	}
	seen := map[string]bool{}
	for _, m := range s.Machines {
		if seen[m.Name] {
			return fmt.Errorf("snapshot holds machine %q twice", m.Name)
		}
		seen[m.Name] = true
	}
	clients := map[string]bool{}
	for _, c := range s.Clients {
		if c.Client == "" || clients[c.Client] {
			return fmt.Errorf("snapshot holds an empty or repeated client %q", c.Client)
		}
		clients[c.Client] = true
	}
	if s.Settings != nil {
		if err := validSettings(s.Settings); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if len(s.Clients) > 0 {
			return errors.New("snapshot holds settings and the previous version's clients")
		}
		if uint64(len(s.Sessions)) > s.Settings.MaxSessions {
			return fmt.Errorf("snapshot holds %d sessions, above its bound %d", len(s.Sessions), s.Settings.MaxSessions)
		}
	}
	sessions := map[uint64]bool{}
	for _, c := range s.Sessions {
		if c.Session == 0 || c.Session > s.LastSession || sessions[c.Session] {
			return fmt.Errorf("snapshot holds session %d: zero, repeated or above the last given out (%d)", c.Session, s.LastSession)
		}
		if c.Label == "" || c.LastUsed > s.EndIndex {
			return fmt.Errorf("snapshot holds session %d without a label or used after the snapshot's end", c.Session)
		}
		if len(c.Earlier) > maxEarlierResults {
			return fmt.Errorf("snapshot holds session %d with %d earlier results, above the bound %d", c.Session, len(c.Earlier), maxEarlierResults)
		}
		for i, e := range c.Earlier {
			if e.Seq == 0 || e.Seq >= c.Seq || (i > 0 && c.Earlier[i-1].Seq >= e.Seq) {
				return fmt.Errorf("snapshot holds session %d with earlier results out of order or not before its last (%d)", c.Session, c.Seq)
			}
		}
		sessions[c.Session] = true
	}
	return nil
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
}

func (ls leaderState) sum() string {
	ls.Checksum, ls.Kind = "", ""
	b, _ := json.Marshal(ls)
	return fmt.Sprintf("%08x", crc32.Checksum(b, castagnoli))
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

func newNonce() []byte {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return b
}

func newNonceHex() string { return hex.EncodeToString(newNonce()) }
