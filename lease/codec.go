package lease

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The assignment record holds every shard, so at a hundred thousand shards
// it is megabytes of JSON that every member reads whenever it changes. The
// encoder below writes exactly what encoding/json writes, without
// reflection and with the shards' keys already sorted; the decoder reads
// the records this encoder writes in one pass and leaves anything else
// (escapes, nulls, other spellings of the field names, numbers that are not
// plain) to encoding/json, so that what is accepted, and how, never
// differs: FuzzDecodeAssignment checks both agree.

// encode returns the record's JSON, byte for byte what json.Marshal
// returns. ids, if not nil, are the keys of a.Shards in sorted order.
func (a Assignment) encode(ids []string) []byte {
	if ids == nil {
		ids = sortedKeys(a.Shards)
	}
	if a.Shards == nil {
		ids = nil
	}
	return encodeRecord(a, a.Shards == nil, ids, func(i int) Entry { return a.Shards[ids[i]] })
}

// encode writes the table's record, as Assignment.encode does.
func (t *table) encode() []byte {
	return encodeRecord(t.hdr, false, t.ids, t.at)
}

// encodeRecord writes hdr with the shards ids, whose entries at returns
// (or "null" for the shards if nullShards).
func encodeRecord(hdr Assignment, nullShards bool, ids []string, at func(i int) Entry) []byte {
	ts, err := hdr.LastUpdated.MarshalJSON()
	if err != nil {
		// A year outside 0-9999: let encoding/json report it.
		a := hdr
		a.Shards = make(map[string]Entry, len(ids))
		for i, id := range ids {
			a.Shards[id] = at(i)
		}
		return a.encodeReflect()
	}
	size := 256
	for i, id := range ids {
		size += len(id) + 64 + len(at(i).Waits)*64
	}
	b := make([]byte, 0, size)
	b = append(b, `{"kind":"`+AssignmentKind+`","epoch":`...)
	b = strconv.AppendUint(b, hdr.Epoch, 10)
	b = append(b, `,"shards":`...)
	if nullShards {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
			b = append(b, ':')
			b = appendEntry(b, at(i))
		}
		b = append(b, '}')
	}
	b = append(b, `,"updatedBy":`...)
	b = appendString(b, hdr.UpdatedBy)
	b = append(b, `,"lastUpdated":`...)
	b = append(b, ts...)
	b = append(b, `,"nonce":`...)
	b = appendString(b, hdr.Nonce)
	if len(hdr.Evicted) > 0 {
		b = append(b, `,"evicted":`...)
		b = appendHolders(b, hdr.Evicted)
	}
	return append(b, '}')
}

func (a Assignment) encodeReflect() []byte {
	a.Kind = AssignmentKind
	b, err := json.Marshal(a)
	if err != nil {
		panic("lease: encoding an assignment: " + err.Error())
	}
	return b
}

func appendEntry(b []byte, e Entry) []byte {
	b = append(b, '{')
	if e.Owner != "" {
		b = append(b, `"owner":`...)
		b = appendString(b, e.Owner)
		b = append(b, ',')
	}
	if e.Session != "" {
		b = append(b, `"session":`...)
		b = appendString(b, e.Session)
		b = append(b, ',')
	}
	b = append(b, `"term":`...)
	b = strconv.AppendUint(b, e.Term, 10)
	if len(e.Waits) > 0 {
		b = append(b, `,"waits":`...)
		b = appendHolders(b, e.Waits)
	}
	return append(b, '}')
}

func appendHolders(b []byte, hs []Holder) []byte {
	b = append(b, '[')
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"owner":`...)
		b = appendString(b, h.Owner)
		b = append(b, `,"session":`...)
		b = appendString(b, h.Session)
		b = append(b, `,"term":`...)
		b = strconv.AppendUint(b, h.Term, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendString writes s as encoding/json does: plain printable ASCII
// as is, anything else through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeFast parses the records encode writes. ok is false for anything
// else, which encoding/json then decides. ids are the shards' keys if they
// came in strictly increasing order (as encode writes them), else nil.
func decodeFast(data []byte) (a Assignment, ids []string, ok bool) {
	return decodeFastWith(data, nil)
}

// decodeFastWith is decodeFast; if add is not nil, it receives each shard's
// entry in order instead of a.Shards.
func decodeFastWith(data []byte, add func(id string, e Entry)) (a Assignment, ids []string, ok bool) {
	p := parser{b: data, intern: map[string]string{}, add: add}
	if !p.lit('{') {
		return a, nil, false
	}
	var seen [7]bool
	sorted := true
	for first := true; ; first = false {
		if first && p.lit('}') {
			break
		}
		key, ok := p.rawString()
		if !ok || !p.lit(':') {
			return a, nil, false
		}
		field := slices.Index([]string{"epoch", "shards", "updatedBy", "lastUpdated", "nonce", "evicted", "kind"}, string(key))
		if field < 0 || seen[field] {
			return a, nil, false
		}
		seen[field] = true
		switch field {
		case 0:
			a.Epoch, ok = p.uint()
		case 1:
			a.Shards, ids, sorted, ok = p.shards()
		case 2:
			a.UpdatedBy, ok = p.str()
		case 3:
			var raw []byte
			if raw, ok = p.rawToken(); ok {
				ok = a.LastUpdated.UnmarshalJSON(raw) == nil
			}
		case 4:
			a.Nonce, ok = p.str()
		case 5:
			a.Evicted, ok = p.holders()
		case 6:
			// Another kind is for the fallback to refuse, by name.
			a.Kind, ok = p.str()
			ok = ok && a.Kind == AssignmentKind
		}
		if !ok {
			return a, nil, false
		}
		if p.lit(',') {
			continue
		}
		if !p.lit('}') {
			return a, nil, false
		}
		break
	}
	p.ws()
	if p.i != len(p.b) {
		return a, nil, false
	}
	if !seen[6] && !seen[0] && !seen[1] && !seen[2] {
		// Without a kind, only the previous version's fields say what it
		// is: the fallback refuses it, by name.
		return a, nil, false
	}
	if !sorted {
		ids = nil
	}
	return a, ids, true
}

type parser struct {
	b      []byte
	i      int
	intern map[string]string // owner and session names, shared by every entry
	add    func(id string, e Entry)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) lit(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// rawString returns the bytes of a string without escapes, which are
// then the string itself, or false.
func (p *parser) rawString() ([]byte, bool) {
	if !p.lit('"') {
		return nil, false
	}
	start, ascii := p.i, true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

func (p *parser) str() (string, bool) {
	s, ok := p.rawString()
	return string(s), ok
}

// name returns a string, shared with every other occurrence of it.
func (p *parser) name() (string, bool) {
	s, ok := p.rawString()
	if !ok {
		return "", false
	}
	if v, ok := p.intern[string(s)]; ok {
		return v, true
	}
	v := string(s)
	p.intern[v] = v
	return v, true
}

// rawToken returns a string token with its quotes.
func (p *parser) rawToken() ([]byte, bool) {
	p.ws()
	start := p.i
	if _, ok := p.rawString(); !ok {
		return nil, false
	}
	return p.b[start:p.i], true
}

// uint reads a plain non-negative integer that fits in a uint64.
func (p *parser) uint() (uint64, bool) {
	p.ws()
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	digits := p.b[start:p.i]
	if len(digits) == 0 || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	return n, err == nil
}

func (p *parser) shards() (m map[string]Entry, ids []string, sorted, ok bool) {
	if !p.lit('{') {
		return nil, nil, false, false
	}
	m = map[string]Entry{}
	sorted = true
	if p.lit('}') {
		return m, ids, sorted, true
	}
	for {
		key, ok := p.rawString()
		if !ok || !p.lit(':') {
			return nil, nil, false, false
		}
		e, ok := p.entry()
		if !ok {
			return nil, nil, false, false
		}
		id := string(key)
		if p.add != nil {
			p.add(id, e)
		} else {
			if n := len(ids); n > 0 && ids[n-1] >= id {
				sorted = false
			}
			ids = append(ids, id)
			m[id] = e
		}
		if p.lit(',') {
			continue
		}
		if !p.lit('}') {
			return nil, nil, false, false
		}
		return m, ids, sorted, true
	}
}

func (p *parser) entry() (e Entry, ok bool) {
	if !p.lit('{') {
		return e, false
	}
	if p.lit('}') {
		return e, true
	}
	var seen [4]bool
	for {
		key, ok := p.rawString()
		if !ok || !p.lit(':') {
			return e, false
		}
		field := -1
		switch string(key) {
		case "owner":
			field = 0
			e.Owner, ok = p.name()
		case "session":
			field = 1
			e.Session, ok = p.name()
		case "term":
			field = 2
			e.Term, ok = p.uint()
		case "waits":
			field = 3
			e.Waits, ok = p.holders()
		}
		if field < 0 || seen[field] || !ok {
			return e, false
		}
		seen[field] = true
		if p.lit(',') {
			continue
		}
		return e, p.lit('}')
	}
}

func (p *parser) holders() ([]Holder, bool) {
	if !p.lit('[') {
		return nil, false
	}
	hs := []Holder{}
	if p.lit(']') {
		return hs, true
	}
	for {
		h, ok := p.holder()
		if !ok {
			return nil, false
		}
		hs = append(hs, h)
		if p.lit(',') {
			continue
		}
		return hs, p.lit(']')
	}
}

func (p *parser) holder() (h Holder, ok bool) {
	if !p.lit('{') {
		return h, false
	}
	if p.lit('}') {
		return h, true
	}
	var seen [3]bool
	for {
		key, ok := p.rawString()
		if !ok || !p.lit(':') {
			return h, false
		}
		field := -1
		switch string(key) {
		case "owner":
			field = 0
			h.Owner, ok = p.name()
		case "session":
			field = 1
			h.Session, ok = p.name()
		case "term":
			field = 2
			h.Term, ok = p.uint()
		}
		if field < 0 || seen[field] || !ok {
			return h, false
		}
		seen[field] = true
		if p.lit(',') {
			continue
		}
		return h, p.lit('}')
	}
}

// sortedUnique reports whether ids are in strictly increasing order.
func sortedUnique(ids []string) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			return false
		}
	}
	return true
}

// decodeTable reads an assignment record into the form members keep,
// straight from the bytes when it is what encode writes, without building
// the map of every shard first.
func decodeTable(data []byte) (*table, error) {
	if len(data) <= maxRecordSize {
		b := newTableBuilder(nil)
		valid := true
		a, _, ok := decodeFastWith(data, func(id string, e Entry) {
			valid = valid && id != "" && (e.Owner == "") == (e.Session == "")
			b.add(id, e)
		})
		if ok && valid && b.sorted {
			b.t.hdr = a
			b.t.hdr.Shards = nil
			return b.t, nil
		}
	}
	// Anything else, errors included, as DecodeAssignment decides it.
	a, ids, err := decodeAssignment(data)
	if err != nil {
		return nil, err
	}
	return newTable(a, ids), nil
}
