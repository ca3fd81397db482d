package record

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// DecodeEntryBorrowed is DecodeEntry for a Borrower's segment: the
// commands' data are parts of b (unmarshalEntry).
func DecodeEntryBorrowed(b []byte, index uint64, in Interner) (*rsmpb.Entry, error) {
	p, err := Unframe(KindEntry, b)
	if err != nil {
		return nil, err
	}
	e := unmarshalEntry(p, in)
	if e == nil {
		// Not the usual shape, or malformed: proto.Unmarshal decides.
		return DecodeEntry(b, index)
	}
	if err := CheckEntry(e, index); err != nil {
		return nil, err
	}
	return e, nil
}

// Interner shares the strings a run of entries repeats (their writer,
// group, clients and machines) instead of one copy per entry.
type Interner map[string]string

func (in Interner) get(b []byte) string {
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
func unmarshalEntry(p []byte, in Interner) *rsmpb.Entry {
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
func unmarshalCommand(p []byte, in Interner) *rsmpb.Command {
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
