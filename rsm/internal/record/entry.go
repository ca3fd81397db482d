package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// EncodeEntry marshals e behind room for the frame's header and fills the
// header in, as Frame does: one buffer per entry, not a second one for the
// frame.
func EncodeEntry(e *rsmpb.Entry) ([]byte, error) {
	return AppendEntry(make([]byte, 0, Header+proto.Size(e)), e)
}

// AppendEntry appends e to b, framed as EncodeEntry frames it.
func AppendEntry(b []byte, e *rsmpb.Entry) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, Header)...)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, e)
	if err != nil {
		return nil, err
	}
	copy(b[start:], Magic)
	b[start+len(Magic)] = KindEntry
	binary.BigEndian.PutUint32(b[start+len(Magic)+1:], crc32.Checksum(b[start+Header:], Castagnoli))
	return b, nil
}

// DecodeEntry decodes a log object read at index.
func DecodeEntry(b []byte, index uint64) (*rsmpb.Entry, error) {
	p, err := Unframe(KindEntry, b)
	if err != nil {
		return nil, err
	}
	e := new(rsmpb.Entry)
	if err := proto.Unmarshal(p, e); err != nil {
		return nil, fmt.Errorf("entry does not decode: %w", err)
	}
	if err := CheckEntry(e, index); err != nil {
		return nil, err
	}
	return e, nil
}

// CheckEntry checks an entry decoded from a log object read at index.
func CheckEntry(e *rsmpb.Entry, index uint64) error {
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
		if err := ValidSettings(e.Settings); err != nil {
			return err
		}
	}
	return nil
}

// EncodeSnapshot frames s in the first snapshot format (KindSnapshot),
// which is still read.
func EncodeSnapshot(s *rsmpb.Snapshot) ([]byte, error) {
	p, err := proto.Marshal(s)
	if err != nil {
		return nil, err
	}
	return Frame(KindSnapshot, p), nil
}

// DecodeSnapshot decodes and checks a snapshot of the first format.
func DecodeSnapshot(b []byte) (*rsmpb.Snapshot, error) {
	p, err := Unframe(KindSnapshot, b)
	if err != nil {
		return nil, err
	}
	s := new(rsmpb.Snapshot)
	if err := proto.Unmarshal(p, s); err != nil {
		return nil, fmt.Errorf("snapshot does not decode: %w", err)
	}
	if err := CheckSnapshot(s); err != nil {
		return nil, err
	}
	return s, nil
}

// CheckSnapshot checks a decoded snapshot's fields (either format).
func CheckSnapshot(s *rsmpb.Snapshot) error {
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
		if err := ValidSettings(s.Settings); err != nil {
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
		if len(c.Earlier) > MaxEarlierResults {
			return fmt.Errorf("snapshot holds session %d with %d earlier results, above the bound %d", c.Session, len(c.Earlier), MaxEarlierResults)
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

// MaxEarlierResults bounds the results a session keeps besides its last:
// a node awaiting more answers than this at once may find the oldest
// replaced (ErrApplicationResultUnavailable) if it must retry them.
const MaxEarlierResults = 1024

// ValidSettings checks settings decoded from the store.
func ValidSettings(s *rsmpb.Settings) error {
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
