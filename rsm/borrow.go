package rsm

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// A Borrower is a StateMachine whose Apply keeps nothing of its command
// once it returns, and returns no memory of it (as io.Writer's Write must
// not retain p). When every machine of a group is one, a cold start hands
// them the commands of a snapshot's log segments where the segments were
// read, in memory it then reads the next segments into: no copy of each
// command, and no garbage from one, for the collector (kv's Machine is
// one). Other machines get commands of their own.
type Borrower interface {
	StateMachine
	// BorrowsCommands marks the promise; it is never called.
	BorrowsCommands()
}

// A Preparer is a Borrower that does part of applying a command ahead of
// Apply, off the goroutine that applies: a cold start calls Prepare for
// the commands of a snapshot's log segments on the goroutines that decode
// them, concurrently and in no particular order, and then ApplyPrepared,
// in the log's order, where it would call Apply. What is slow and needs no
// state belongs in Prepare (decoding a command, copying what Apply would
// keep of it); kv's Machine copies a put's value there, and the page
// faults of a cold start's fresh memory go with it. Prepare is lent its
// command as Apply is, reads no state of the machine and changes none;
// ApplyPrepared must return what Apply would for the command. A prepared
// command may never be applied (a retry found in the log twice, a load
// abandoned): what Prepare returns is only memory.
type Preparer interface {
	Borrower
	// Prepare returns what ApplyPrepared is then given with cmd.
	Prepare(cmd []byte) any
	// ApplyPrepared applies cmd as Apply does, with what Prepare
	// returned for it.
	ApplyPrepared(cmd []byte, prepared any) []byte
}

// preparers returns the Preparers among machines when all of them are
// Borrowers (a cold start lends their commands), else nil.
func preparers(machines map[string]StateMachine) map[string]Preparer {
	if !borrowsAll(machines) {
		return nil
	}
	var out map[string]Preparer
	for name, m := range machines {
		if p, ok := m.(Preparer); ok {
			if out == nil {
				out = map[string]Preparer{}
			}
			out[name] = p
		}
	}
	return out
}

// borrowsAll reports whether every machine is a Borrower.
func borrowsAll(machines map[string]StateMachine) bool {
	for _, m := range machines {
		if _, ok := m.(Borrower); !ok {
			return false
		}
	}
	return len(machines) > 0
}

// decodeEntryBorrowed is decodeEntry for a Borrower's segment: the
// commands' data are parts of b (unmarshalEntry).
func decodeEntryBorrowed(b []byte, index uint64, in interner) (*rsmpb.Entry, error) {
	p, err := unframe(kindEntry, b)
	if err != nil {
		return nil, err
	}
	e := unmarshalEntry(p, in)
	if e == nil {
		// Not the usual shape, or malformed: proto.Unmarshal decides.
		return decodeEntry(b, index)
	}
	if err := checkEntry(e, index); err != nil {
		return nil, err
	}
	return e, nil
}

// interner shares the strings a run of entries repeats (their writer,
// group, clients and machines) instead of one copy per entry.
type interner map[string]string

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	if len(in) >= 1024 {
		return string(b)
	}
	s := string(b)
	in[s] = s
	return s
}

// unmarshalEntry decodes p into the Entry proto.Unmarshal would, except
// that its commands' data are parts of p, not copies; nil if p is not of
// the shape every entry this version writes has (only the fields it
// knows, each of its wire type, no settings) or does not decode: the
// caller then uses proto.Unmarshal, whose result and errors are the
// reference (FuzzDecodeEntry compares the two).
func unmarshalEntry(p []byte, in interner) *rsmpb.Entry {
	e := &rsmpb.Entry{}
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil
		}
		p = p[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2 || num == 5 || num == 7):
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return nil
			}
			p = p[n:]
			switch num {
			case 1:
				e.Index = v
			case 2:
				e.Term = v
			case 5:
				e.Noop = protowire.DecodeBool(v)
			case 7:
				e.Commit = v
			}
		case typ == protowire.BytesType && (num == 3 || num == 4 || num == 6 || num == 8):
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return nil
			}
			p = p[n:]
			switch num {
			case 3, 8:
				if !utf8.Valid(v) {
					return nil
				}
				if num == 3 {
					e.Writer = in.get(v)
				} else {
					e.Group = in.get(v)
				}
			case 4:
				e.Nonce = append([]byte{}, v...) // small, and the replica may keep it
			case 6:
				c := unmarshalCommand(v, in)
				if c == nil {
					return nil
				}
				e.Commands = append(e.Commands, c)
			}
		default:
			return nil
		}
	}
	return e
}

// unmarshalCommand is unmarshalEntry for a command: its data is part of p.
func unmarshalCommand(p []byte, in interner) *rsmpb.Command {
	c := &rsmpb.Command{}
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil
		}
		p = p[n:]
		switch {
		case typ == protowire.VarintType && (num == 2 || num == 20 || num == 21 || num == 22):
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return nil
			}
			p = p[n:]
			switch num {
			case 2:
				c.Seq = v
			case 20:
				c.Session = v
			case 21:
				c.Register = protowire.DecodeBool(v)
			case 22:
				c.FirstPending = v
			}
		case typ == protowire.BytesType && (num == 1 || num == 3 || num == 4):
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return nil
			}
			p = p[n:]
			switch num {
			case 1, 3:
				if !utf8.Valid(v) {
					return nil
				}
				if num == 1 {
					c.Client = in.get(v)
				} else {
					c.Machine = in.get(v)
				}
			case 4:
				c.Data = v[:len(v):len(v)]
			}
		default:
			return nil
		}
	}
	return c
}
