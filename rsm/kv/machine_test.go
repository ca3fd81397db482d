package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tenure-io/tenure/rsm/kv"
)

// TestOperations runs one script of operations on a fresh machine; each
// step sees the state the steps before it left.
func TestOperations(t *testing.T) {
	d := newDirect()
	c := kv.NewClient(d)
	ctx := t.Context()
	put := func(k, v string) func() string {
		return func() string {
			rev, err := c.Put(ctx, k, []byte(v))
			return result(fmt.Sprintf("rev=%d", rev), err)
		}
	}
	get := func(k string) func() string {
		return func() string {
			it, err := c.Get(ctx, k)
			if errors.Is(err, kv.ErrNotFound) {
				return "not found"
			}
			return result(fmt.Sprintf("%q create=%d mod=%d", it.Value, it.CreateRevision, it.ModRevision), err)
		}
	}
	del := func(k string) func() string {
		return func() string {
			ok, rev, err := c.Delete(ctx, k)
			return result(fmt.Sprintf("existed=%v rev=%d", ok, rev), err)
		}
	}
	cas := func(k string, expect uint64, v string) func() string {
		return func() string {
			ok, rev, err := c.CAS(ctx, k, expect, []byte(v))
			return result(fmt.Sprintf("swapped=%v rev=%d", ok, rev), err)
		}
	}
	revision := func() string { return fmt.Sprintf("revision=%d", d.m.Revision()) }
	steps := []struct {
		name string
		do   func() string
		want string
	}{
		{"get of a missing key", get("a"), "not found"},
		{"put creates", put("a", "1"), "rev=1"},
		{"get after put", get("a"), `"1" create=1 mod=1`},
		{"put overwrites", put("a", "2"), "rev=2"},
		{"overwrite keeps the create revision", get("a"), `"2" create=1 mod=2`},
		{"cas at a stale revision fails", cas("a", 1, "x"), "swapped=false rev=2"},
		{"a failed cas leaves the revision", revision, "revision=2"},
		{"a failed cas leaves the value", get("a"), `"2" create=1 mod=2`},
		{"cas at the current revision swaps", cas("a", 2, "3"), "swapped=true rev=3"},
		{"cas 0 creates an absent key", cas("b", 0, "b"), "swapped=true rev=4"},
		{"cas 0 fails on an existing key", cas("b", 0, "c"), "swapped=false rev=4"},
		{"cas on an absent key reports 0", cas("c", 4, "c"), "swapped=false rev=0"},
		{"delete of an absent key", del("c"), "existed=false rev=4"},
		{"delete of an absent key leaves the revision", revision, "revision=4"},
		{"delete", del("a"), "existed=true rev=5"},
		{"get after delete", get("a"), "not found"},
		{"put after delete creates anew", put("a", ""), "rev=6"},
		{"empty value", get("a"), `"" create=6 mod=6`},
		{"empty key", put("", "x"), "error: invalid key"},
		{"key too long", put(strings.Repeat("k", kv.MaxKeySize+1), "x"), "error: invalid key"},
		{"longest key", put(strings.Repeat("k", kv.MaxKeySize), "x"), "rev=7"},
		{"key not UTF-8", get("\xff"), "error: invalid key"},
		{"refused requests leave the revision", revision, "revision=7"},
		{"binary value", put("bin", "\x00\xff\n"), "rev=8"},
		{"binary value read back", get("bin"), `"\x00\xff\n" create=8 mod=8`},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: got %s; want %s", s.name, got, s.want)
		}
	}
}

func result(ok string, err error) string {
	switch {
	case errors.Is(err, kv.ErrInvalidKey):
		return "error: invalid key"
	case err != nil:
		return "error: " + err.Error()
	}
	return ok
}

func TestList(t *testing.T) {
	d := newDirect()
	c := kv.NewClient(d)
	ctx := t.Context()
	for _, k := range []string{"b", "a/2", "a", "a/1", "ab", "a/3", "a/"} {
		if _, err := c.Put(ctx, k, []byte("v"+k)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		prefix string
		opts   kv.ListOptions
		want   string // keys, then "+" if more
	}{
		{"everything in order", "", kv.ListOptions{}, "a a/ a/1 a/2 a/3 ab b"},
		{"prefix", "a/", kv.ListOptions{}, "a/ a/1 a/2 a/3"},
		{"limit", "a/", kv.ListOptions{Limit: 2}, "a/ a/1 +"},
		{"limit equal to the matches", "a/", kv.ListOptions{Limit: 4}, "a/ a/1 a/2 a/3"},
		{"after", "a/", kv.ListOptions{After: "a/1", Limit: 2}, "a/2 a/3"},
		{"after before the prefix", "a/", kv.ListOptions{After: "0"}, "a/ a/1 a/2 a/3"},
		{"after a key that does not exist", "a/", kv.ListOptions{After: "a/15"}, "a/2 a/3"},
		{"after past the prefix", "a/", kv.ListOptions{After: "b"}, ""},
		{"no match", "zz", kv.ListOptions{}, ""},
		{"a byte budget returns at least one", "", kv.ListOptions{MaxBytes: 1}, "a +"},
		{"a byte budget for two", "", kv.ListOptions{MaxBytes: 100}, "a a/ +"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.List(ctx, tc.prefix, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, it := range res.Items {
				keys = append(keys, it.Key)
				if string(it.Value) != "v"+it.Key {
					t.Errorf("%q has value %q", it.Key, it.Value)
				}
			}
			if res.More {
				keys = append(keys, "+")
			}
			if got := strings.Join(keys, " "); got != tc.want {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
	t.Run("keys only", func(t *testing.T) {
		res, err := c.List(ctx, "a/", kv.ListOptions{KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			if it.Value != nil || it.ModRevision == 0 || it.CreateRevision == 0 {
				t.Errorf("item %+v: want revisions and no value", it)
			}
		}
	})
	t.Run("paging visits every key once", func(t *testing.T) {
		var keys []string
		opts := kv.ListOptions{Limit: 1}
		for {
			res, err := c.List(ctx, "", opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range res.Items {
				keys = append(keys, it.Key)
			}
			if !res.More {
				break
			}
			opts.After = res.Items[len(res.Items)-1].Key
		}
		if got := strings.Join(keys, " "); got != "a a/ a/1 a/2 a/3 ab b" {
			t.Errorf("pages gave %q", got)
		}
	})
	for _, bad := range []kv.ListOptions{{Limit: kv.MaxListLimit + 1}, {Limit: -1}, {MaxBytes: -1}, {After: strings.Repeat("x", kv.MaxKeySize+1)}} {
		if _, err := c.List(ctx, "", bad); !errors.Is(err, kv.ErrInvalidArgument) {
			t.Errorf("List(%+v): %v; want ErrInvalidArgument", bad, err)
		}
	}
}

// randomCommands applies n random operations on a small key space through
// c and returns a transcript of their results.
func randomCommands(t *testing.T, c *kv.Client, seed uint64, n int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	var out strings.Builder
	ctx := t.Context()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k/%02d", r.IntN(40))
		v := make([]byte, r.IntN(20))
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		switch r.IntN(4) {
		case 0, 1:
			rev, err := c.Put(ctx, k, v)
			fmt.Fprintln(&out, "put", k, rev, err)
		case 2:
			ok, rev, err := c.Delete(ctx, k)
			fmt.Fprintln(&out, "del", k, ok, rev, err)
		case 3:
			ok, rev, err := c.CAS(ctx, k, uint64(r.IntN(int(i+2))), v)
			fmt.Fprintln(&out, "cas", k, ok, rev, err)
		}
	}
	return out.String()
}

func snapshot(t *testing.T, m *kv.Machine) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// answers reads every key and lists everything, as a transcript.
func answers(t *testing.T, c *kv.Client) string {
	t.Helper()
	var out strings.Builder
	for i := 0; i < 42; i++ {
		k := fmt.Sprintf("k/%02d", i)
		it, err := c.Get(t.Context(), k)
		fmt.Fprintf(&out, "%s %q %d %d %v\n", k, it.Value, it.CreateRevision, it.ModRevision, err)
	}
	res, err := c.List(t.Context(), "k/", kv.ListOptions{Limit: 1000})
	fmt.Fprintf(&out, "%+v %v\n", res, err)
	return out.String()
}

func TestSnapshotRestore(t *testing.T) {
	a := newDirect()
	randomCommands(t, kv.NewClient(a), 1, 500)
	snap := snapshot(t, a.m)

	b := newDirect()
	if _, err := kv.NewClient(b).Put(t.Context(), "gone", []byte("replaced by the restore")); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if b.m.Revision() != a.m.Revision() || b.m.Len() != a.m.Len() {
		t.Fatalf("restored revision %d, %d keys; want %d, %d", b.m.Revision(), b.m.Len(), a.m.Revision(), a.m.Len())
	}
	if got, want := answers(t, kv.NewClient(b)), answers(t, kv.NewClient(a)); got != want {
		t.Fatalf("restored machine answers differently:\n%s\nwant:\n%s", got, want)
	}
	if !bytes.Equal(snapshot(t, b.m), snap) {
		t.Fatal("a restored machine's snapshot differs from the one it restored")
	}
	// And they go on alike.
	if got, want := randomCommands(t, kv.NewClient(b), 2, 300), randomCommands(t, kv.NewClient(a), 2, 300); got != want {
		t.Fatalf("after the restore, the same commands gave different results")
	}
	if !bytes.Equal(snapshot(t, a.m), snapshot(t, b.m)) {
		t.Fatal("snapshots differ after the same commands")
	}
}

func TestSnapshotEmpty(t *testing.T) {
	m := kv.New()
	snap := snapshot(t, m)
	n := kv.New()
	if err := n.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if n.Revision() != 0 || n.Len() != 0 {
		t.Fatalf("restored an empty snapshot: revision %d, %d keys", n.Revision(), n.Len())
	}
}

func TestDeterminism(t *testing.T) {
	var snaps [2][]byte
	var transcripts [2]string
	for i := range snaps {
		d := newDirect()
		transcripts[i] = randomCommands(t, kv.NewClient(d), 7, 1000)
		// Malformed commands are applied too, as no-ops with an error result.
		for _, cmd := range [][]byte{nil, {0x01}, {0x7f, 1, 2}, {0x01, 1, 'k', 5, 'x'}} {
			transcripts[i] += fmt.Sprintf("%x\n", d.m.Apply(cmd))
		}
		snaps[i] = snapshot(t, d.m)
	}
	if transcripts[0] != transcripts[1] {
		t.Fatal("the same commands gave different results")
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatal("the same commands left different snapshots")
	}
}

func TestRestoreRejects(t *testing.T) {
	src := newDirect()
	randomCommands(t, kv.NewClient(src), 3, 100)
	good := snapshot(t, src.m)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, kv.ErrCorruptSnapshot},
		{"not a snapshot", []byte("hello, world"), kv.ErrCorruptSnapshot},
		{"unknown version", append([]byte("TKVS\x03"), good[5:]...), kv.ErrSnapshotVersion},
		{"flipped bit in the body", flip(len(good) / 2), kv.ErrCorruptSnapshot},
		{"flipped bit in the checksum", flip(len(good) - 1), kv.ErrCorruptSnapshot},
		{"truncated", good[:len(good)-3], kv.ErrCorruptSnapshot},
		{"no checksum", good[:len(good)-4], kv.ErrCorruptSnapshot},
		{"trailing bytes", append(bytes.Clone(good), 0), kv.ErrCorruptSnapshot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newDirect()
			if _, err := kv.NewClient(m).Put(context.Background(), "keep", []byte("me")); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, m.m)
			err := m.m.Restore(bytes.NewReader(tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore: %v; want %v", err, tc.want)
			}
			if !bytes.Equal(snapshot(t, m.m), before) {
				t.Fatal("a failed restore changed the state")
			}
		})
	}
}

// A command that does not decode leaves the state alone and its result
// says why.
func TestApplyMalformed(t *testing.T) {
	m := kv.New()
	want := m.Revision()
	for _, cmd := range [][]byte{nil, {}, {0x01}, {0x02, 0x05, 'a'}, {0x09}, {0x02, 0x01, 'a', 0x00}, {0x03, 0x01, 'a', 0x80, 0x00, 0x00}} {
		res := m.Apply(cmd)
		if len(res) == 0 || res[0] != 0x2F {
			t.Errorf("Apply(%x) = %x; want an error result", cmd, res)
		}
		if len(cmd) > 0 && cmd[0] == 0x09 {
			// An etcd command, even a malformed one, ends the legacy
			// era: the empty group moves to an empty etcd's revision 1.
			want = 1
		}
		if m.Revision() != want {
			t.Fatalf("Apply(%x) changed the revision", cmd)
		}
	}
	res, err := m.Query([]byte{0x42})
	if err != nil || len(res) == 0 || res[0] != 0x2F {
		t.Errorf("Query of garbage: %x, %v; want an error result", res, err)
	}
}

// The client reports a malformed error result from the machine as
// ErrMalformed.
func TestClientMalformedResult(t *testing.T) {
	c := kv.NewClient(garbage{})
	if _, err := c.Put(t.Context(), "a", nil); !errors.Is(err, kv.ErrMalformed) {
		t.Errorf("Put: %v; want ErrMalformed", err)
	}
	if _, err := c.Get(t.Context(), "a"); !errors.Is(err, kv.ErrMalformed) {
		t.Errorf("Get: %v; want ErrMalformed", err)
	}
}

type garbage struct{}

func (garbage) Command(context.Context, string, []byte) ([]byte, error) { return []byte{0x21}, nil }
func (garbage) Read(context.Context, string, []byte) ([]byte, error)    { return []byte{0x21, 1}, nil }

func TestClientWrapsErrors(t *testing.T) {
	d := newDirect()
	boom := errors.New("boom")
	d.fail(boom)
	c := kv.NewClient(d)
	ctx := t.Context()
	calls := map[string]func() error{
		"put":    func() error { _, err := c.Put(ctx, "k", nil); return err },
		"delete": func() error { _, _, err := c.Delete(ctx, "k"); return err },
		"cas":    func() error { _, _, err := c.CAS(ctx, "k", 0, nil); return err },
		"get":    func() error { _, err := c.Get(ctx, "k"); return err },
		"list":   func() error { _, err := c.List(ctx, "k", kv.ListOptions{}); return err },
	}
	for op, call := range calls {
		err := call()
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), `"k"`) {
			t.Errorf("%s: %v; want the submitter's error wrapped with the operation and key", op, err)
		}
	}
	if _, err := kv.NewClient(newDirect()).WithMachine("other").Get(ctx, "k"); err == nil {
		t.Error("a client of an unregistered machine name succeeded")
	}
}

// A reader that fails is reported as a read error, not as corruption.
func TestRestoreReadError(t *testing.T) {
	src := newDirect()
	randomCommands(t, kv.NewClient(src), 4, 50)
	good := snapshot(t, src.m)
	boom := errors.New("disk gone")
	r := io.MultiReader(bytes.NewReader(good[:len(good)/2]), iotest.ErrReader(boom))
	err := kv.New().Restore(r)
	if !errors.Is(err, boom) || errors.Is(err, kv.ErrCorruptSnapshot) {
		t.Fatalf("Restore from a failing reader: %v; want the reader's error, not ErrCorruptSnapshot", err)
	}
}

// TestRestoreValuesAcrossReadBuffers: values around and above the size of
// the restore's read buffer (64 KiB), read whole or a byte at a time,
// restore to the same state, each value its own bytes.
func TestRestoreValuesAcrossReadBuffers(t *testing.T) {
	a := newDirect()
	c := kv.NewClient(a)
	sizes := []int{0, 1, 1000, 64<<10 - 20, 64<<10 - 1, 64 << 10, 64<<10 + 1, 100 << 10, 300<<10 + 7}
	var keys []string
	for i, n := range sizes {
		for j := range 3 { // neighbours shift the values' offsets in the buffer
			key := fmt.Sprintf("k/%02d/%d", i, j)
			v := bytes.Repeat([]byte{byte('a' + i), byte('0' + j)}, n/2+1)[:n]
			if _, err := c.Put(t.Context(), key, v); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
	}
	snap := snapshot(t, a.m)
	for _, r := range []io.Reader{bytes.NewReader(snap), iotest.OneByteReader(bytes.NewReader(snap)), iotest.HalfReader(bytes.NewReader(snap))} {
		b := newDirect()
		if err := b.m.Restore(r); err != nil {
			t.Fatal(err)
		}
		if got, want := answers(t, kv.NewClient(b)), answers(t, c); got != want {
			t.Fatalf("restored machine answers differently:\n%s\nwant:\n%s", got, want)
		}
		for _, k := range keys {
			want, err := c.Get(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kv.NewClient(b).Get(t.Context(), k)
			if err != nil || !bytes.Equal(got.Value, want.Value) {
				t.Fatalf("%s: %d bytes, %v; want %d", k, len(got.Value), err, len(want.Value))
			}
		}
		if !bytes.Equal(snapshot(t, b.m), snap) {
			t.Fatal("a restored machine's snapshot differs from the one it restored")
		}
	}
}

// TestRestoreReusesReadBuffers: a state many times larger than the read
// buffers a restore keeps for reuse (values are lent from them until a
// copier takes its own copy) restores with every value its own bytes.
func TestRestoreReusesReadBuffers(t *testing.T) {
	a := newDirect()
	c := kv.NewClient(a)
	const n = 12000
	value := func(i int) []byte {
		v := make([]byte, 500+(i*7919)%3500)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		return v
	}
	for i := range n {
		if _, err := c.Put(t.Context(), fmt.Sprintf("key/%06d", i), value(i)); err != nil {
			t.Fatal(err)
		}
	}
	snap := snapshot(t, a.m)
	if len(snap) < 20<<20 {
		t.Fatalf("the snapshot is %d bytes, want it larger than the buffers kept", len(snap))
	}
	b := newDirect()
	if err := b.m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	cb := kv.NewClient(b)
	for i := range n {
		got, err := cb.Get(t.Context(), fmt.Sprintf("key/%06d", i))
		if err != nil || !bytes.Equal(got.Value, value(i)) {
			t.Fatalf("key/%06d: %d bytes (%v); want its own %d", i, len(got.Value), err, len(value(i)))
		}
	}
}

// TestRestoreManyKeys: a state of several thousand keys, 10 MB (the tree
// is built and the values copied while the next keys are read), restores
// to the same snapshot, and
// a snapshot that fails far into its keys (a flipped byte, a key out of
// order, a read error) leaves the state as it was and no goroutine behind
// (TestMain).
func TestRestoreManyKeys(t *testing.T) {
	a := newDirect()
	c := kv.NewClient(a)
	const n = 5000
	for i := range n {
		// 2,000 bytes a value: key/004000 comes 8 MB in, where a restore
		// lends values from its read buffers.
		if _, err := c.Put(t.Context(), fmt.Sprintf("key/%06d", i), bytes.Repeat([]byte(fmt.Sprintf("%05d", i)), 400)); err != nil {
			t.Fatal(err)
		}
	}
	snap := snapshot(t, a.m)
	b := newDirect()
	if err := b.m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if b.m.Len() != n || !bytes.Equal(snapshot(t, b.m), snap) {
		t.Fatalf("restored %d keys, snapshots equal: %v", b.m.Len(), bytes.Equal(snapshot(t, b.m), snap))
	}
	at := bytes.Index(snap, []byte("key/004000"))
	flipped := bytes.Clone(snap)
	flipped[at+9] ^= 0x01 // key/004001, a valid key: only the checksum tells
	unordered := bytes.Clone(snap)
	unordered[at+6] = '0' // key/004000 becomes key/000000, after key/003999
	boom := errors.New("disk gone")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"flipped byte", bytes.NewReader(flipped), kv.ErrCorruptSnapshot},
		{"key out of order", bytes.NewReader(unordered), kv.ErrCorruptSnapshot},
		{"read error", io.MultiReader(bytes.NewReader(snap[:at]), iotest.ErrReader(boom)), boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newDirect()
			if _, err := kv.NewClient(m).Put(t.Context(), "keep", []byte("me")); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, m.m)
			if err := m.m.Restore(tc.r); !errors.Is(err, tc.want) {
				t.Fatalf("Restore: %v; want %v", err, tc.want)
			}
			if !bytes.Equal(snapshot(t, m.m), before) {
				t.Fatal("a failed restore changed the state")
			}
		})
	}
}
