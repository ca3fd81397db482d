package kv

import (
	"bytes"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// putWireSeeds are PutRequests and near misses: every field, fields
// repeated, unknown fields of every wire type, known numbers with another
// wire type, and malformed encodings.
func putWireSeeds(tb testing.TB) [][]byte {
	marshal := func(r *pb.PutRequest) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	full := marshal(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: -7, PrevKv: true, IgnoreValue: true, IgnoreLease: true})
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(nil, num, protowire.VarintType), v)
	}
	bytesField := func(num protowire.Number, v string) []byte {
		return protowire.AppendString(tag(nil, num, protowire.BytesType), v)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return [][]byte{
		{},
		marshal(&pb.PutRequest{Key: []byte("key"), Value: bytes.Repeat([]byte{'v'}, 1024)}),
		full,
		cat(bytesField(1, "a"), bytesField(1, "b"), bytesField(2, "x"), bytesField(2, "")),
		cat(varint(4, 1), varint(4, 0), varint(5, 2), varint(3, 1<<63)),
		// A bool in ten bytes, the longest varint.
		cat(bytesField(1, "k"), tag(nil, 6, protowire.VarintType), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}),
		// Unknown fields of each wire type, a group with a group inside.
		cat(bytesField(1, "k"), varint(7, 300), protowire.AppendFixed32(tag(nil, 8, protowire.Fixed32Type), 1),
			protowire.AppendFixed64(tag(nil, 9, protowire.Fixed64Type), 2), bytesField(10, "u"),
			tag(nil, 11, protowire.StartGroupType), varint(1, 1), tag(nil, 12, protowire.StartGroupType),
			tag(nil, 12, protowire.EndGroupType), tag(nil, 11, protowire.EndGroupType), bytesField(2, "v")),
		// Known numbers with another wire type.
		cat(varint(1, 5), bytesField(1, "k"), bytesField(3, "lease"), protowire.AppendFixed64(tag(nil, 2, protowire.Fixed64Type), 3),
			bytesField(4, "x")),
		cat(tag(nil, 1, protowire.StartGroupType), tag(nil, 1, protowire.EndGroupType)),
		bytesField(protowire.MaxValidNumber, "top"),
		// Malformed.
		full[:len(full)-1],
		cat(bytesField(1, "k"), []byte{0x12, 0x05, 'a'}),
		tag(nil, 1, protowire.EndGroupType),
		tag(nil, 3, protowire.StartGroupType),
		cat(tag(nil, 3, protowire.StartGroupType), tag(nil, 4, protowire.EndGroupType)),
		{0x00, 0x01},
		{0x0e, 0x00}, {0x0f, 0x00},
		protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3),
		append(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), 0x00),
		protowire.AppendVarint(nil, 1<<40),
		{0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},
		{0x80},
		[]byte(strings.Repeat("\x5b", 3)),
	}
}

// FuzzParsePut: parsePut reads any bytes as proto.Unmarshal reads them
// into a PutRequest, or both refuse them, and decodePut's error is
// unmarshal's.
func FuzzParsePut(f *testing.F) {
	for _, b := range putWireSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.PutRequest
		want := proto.Unmarshal(b, &r)
		p, ok := parsePut(b)
		if ok != (want == nil) {
			t.Fatalf("%x: parsePut ok %v; proto.Unmarshal: %v", b, ok, want)
		}
		if !ok {
			_, err := decodePut(b)
			if wantErr := unmarshal(&pb.PutRequest{}, b); err == nil || err.Error() != wantErr.Error() {
				t.Fatalf("%x: decodePut: %v; want %v", b, err, wantErr)
			}
			return
		}
		if !bytes.Equal(p.key, r.Key) || !bytes.Equal(p.value, r.Value) || p.lease != r.Lease ||
			p.prevKV != r.PrevKv || p.ignoreValue != r.IgnoreValue || p.ignoreLease != r.IgnoreLease {
			t.Fatalf("%x: parsePut %+v; proto.Unmarshal %v", b, p, &r)
		}
		var filled pb.PutRequest
		p.fill(&filled)
		if !bytes.Equal(filled.Key, r.Key) || !bytes.Equal(filled.Value, r.Value) || filled.Lease != r.Lease ||
			filled.PrevKv != r.PrevKv || filled.IgnoreValue != r.IgnoreValue || filled.IgnoreLease != r.IgnoreLease {
			t.Fatalf("%x: fill %v; proto.Unmarshal %v", b, &filled, &r)
		}
		if len(p.value) > 0 && &filled.Value[0] == &p.value[0] {
			t.Fatalf("fill kept the command's value")
		}
		if (checkPutRequest(&r) == nil) != (p.check() == nil) {
			t.Fatalf("%x: check %v; checkPutRequest %v", b, p.check(), checkPutRequest(&r))
		}
	})
}

// TestPutWireSeeds checks that the seeds hold both kinds: some parse,
// some are refused, so the fuzz target compares both ways from its start.
func TestPutWireSeeds(t *testing.T) {
	var good, bad int
	for _, b := range putWireSeeds(t) {
		if _, ok := parsePut(b); ok {
			good++
		} else {
			bad++
		}
		if err := proto.Unmarshal(b, &pb.PutRequest{}); (err == nil) != func() bool { _, ok := parsePut(b); return ok }() {
			t.Errorf("%x: proto.Unmarshal %v, parsePut disagrees", b, err)
		}
	}
	if good < 8 || bad < 10 {
		t.Errorf("%d seeds parse, %d are refused; want both kinds", good, bad)
	}
}

// TestEtcdPutUnknownFields: a Put carrying fields etcd's PutRequest does
// not have, or a known field of another wire type, applies as the Put
// without them, through Apply and through a cold start's Prepare.
func TestEtcdPutUnknownFields(t *testing.T) {
	plain, err := PutCommand(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	extra := append(bytes.Clone(plain), protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)...)
	extra = append(extra, protowire.AppendFixed32(protowire.AppendTag(nil, 3, protowire.Fixed32Type), 9)...)
	for name, apply := range map[string]func(m *Machine, c []byte) []byte{
		"Apply":         func(m *Machine, c []byte) []byte { return m.Apply(c) },
		"ApplyPrepared": func(m *Machine, c []byte) []byte { return m.ApplyPrepared(c, m.Prepare(c)) },
	} {
		a, b := New(), New()
		ra, rb := apply(a, plain), apply(b, extra)
		if !bytes.Equal(ra, rb) {
			t.Errorf("%s: result %x with unknown fields; %x without", name, rb, ra)
		}
		ga, _ := a.Query(mustRange(t, "k"))
		gb, _ := b.Query(mustRange(t, "k"))
		if !bytes.Equal(ga, gb) {
			t.Errorf("%s: state %x with unknown fields; %x without", name, gb, ga)
		}
	}
}

func mustRange(t *testing.T, key string) []byte {
	t.Helper()
	q, err := RangeQuery(&pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}
