package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
)

// dump lists the whole state of m through a client, one line a key.
func dump(t *testing.T, m *kv.Machine) string {
	t.Helper()
	c := kv.NewClient(&direct{m: m})
	var out strings.Builder
	fmt.Fprintf(&out, "revision %d\n", m.Revision())
	opts := kv.ListOptions{Limit: kv.MaxListLimit}
	for {
		res, err := c.List(t.Context(), "", opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			fmt.Fprintf(&out, "%q %q %d %d\n", it.Key, it.Value, it.CreateRevision, it.ModRevision)
		}
		if !res.More {
			return out.String()
		}
		opts.After = res.Items[len(res.Items)-1].Key
	}
}

// A snapshot written by the first release (a sorted slice of keys and a
// map) restores to the state it was taken from. The machine writes it
// back in format version 2 (history, compact revision, leases), which
// restores to the same state; the first release's history is gone, so
// the restored state is compacted at its revision.
func TestRestoreFirstReleaseSnapshot(t *testing.T) {
	snap, err := os.ReadFile("testdata/snapshot-v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/snapshot-v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := kv.New()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, m); got != string(want) {
		t.Fatalf("restored state:\n%.2000s\nwant:\n%.2000s", got, want)
	}
	if v := m.ReadView(); v.CompactRevision() != v.Revision() {
		t.Fatalf("compact revision %d; want the snapshot's revision %d", v.CompactRevision(), v.Revision())
	}
	again := kv.New()
	if err := again.Restore(bytes.NewReader(snapshot(t, m))); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, again); got != string(want) {
		t.Fatalf("restored from the version 2 snapshot:\n%.2000s\nwant:\n%.2000s", got, want)
	}
}

// compactNow compacts m's history at its current revision.
func compactNow(t *testing.T, m *kv.Machine) {
	t.Helper()
	rev := m.ReadView().Revision()
	if rev <= m.ReadView().CompactRevision() {
		return
	}
	cmd, err := kv.CompactCommand(&pb.CompactionRequest{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.DecodeResult(m.Apply(cmd)); err != nil {
		t.Fatal(err)
	}
}

// model is the machine's semantics in the plainest form, to check a view
// against.
type model struct {
	rev  uint64
	keys map[string]modelEntry
}

type modelEntry struct {
	value       string
	create, mod uint64
}

func (md *model) put(k, v string) {
	md.rev++
	e, ok := md.keys[k]
	if !ok {
		e.create = md.rev
	}
	e.value, e.mod = v, md.rev
	md.keys[k] = e
}

func (md *model) apply(op int, k, v string, expect uint64) {
	switch op {
	case 0:
		md.put(k, v)
	case 1:
		if _, ok := md.keys[k]; ok {
			md.rev++
			delete(md.keys, k)
		}
	default:
		if md.keys[k].mod == expect {
			md.put(k, v)
		}
	}
}

func (md *model) dump() string {
	var out strings.Builder
	fmt.Fprintf(&out, "revision %d\n", md.rev)
	for _, k := range slices.Sorted(maps.Keys(md.keys)) {
		e := md.keys[k]
		fmt.Fprintf(&out, "%q %q %d %d\n", k, e.value, e.create, e.mod)
	}
	return out.String()
}

// randomOp applies one random put, delete or swap, over 600 keys, to the
// machine through c and to the model.
func randomOp(t *testing.T, r *rand.Rand, c *kv.Client, md *model) {
	t.Helper()
	k := fmt.Sprintf("k/%03d", r.IntN(600))
	v := strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(4000))
	ctx := t.Context()
	var err error
	switch op := r.IntN(4); op {
	case 0, 1:
		md.apply(0, k, v, 0)
		_, err = c.Put(ctx, k, []byte(v))
	case 2:
		md.apply(1, k, "", 0)
		_, _, err = c.Delete(ctx, k)
	default:
		expect := md.keys[k].mod
		if r.IntN(3) == 0 {
			expect++ // a swap that fails
		}
		md.apply(2, k, v, expect)
		_, _, err = c.CAS(ctx, k, expect, []byte(v))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A view writes exactly the state at its capture while the machine goes
// on applying puts, deletes and swaps, concurrently, and again when
// written a second time. The view is read through a pipe, a chunk at a
// time, with commands applied between chunks while the view walks its
// tree (run with -race).
func TestCaptureWhileApplying(t *testing.T) {
	m := kv.New()
	c := kv.NewClient(&direct{m: m})
	md := &model{keys: map[string]modelEntry{}}
	r := rand.New(rand.NewPCG(5, 0))
	for range 1000 {
		randomOp(t, r, c, md)
	}
	for round := range 8 {
		// History is kept until compaction: without it the snapshot
		// would grow with each round's applies, which the view
		// interleaves in proportion to its size.
		compactNow(t, m)
		v := m.Capture()
		want := md.dump()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := v.WriteTo(pw)
			pw.CloseWithError(err)
			done <- err
		}()
		var got bytes.Buffer
		chunk := make([]byte, 4<<10)
		for {
			n, err := pr.Read(chunk)
			got.Write(chunk[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				randomOp(t, r, c, md)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got.Len() < 256<<10 {
			t.Fatalf("round %d: snapshot of %d bytes; want one large enough to interleave with applies", round, got.Len())
		}
		restored := kv.New()
		if err := restored.Restore(bytes.NewReader(got.Bytes())); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if s := dump(t, restored); s != want {
			t.Fatalf("round %d: the view wrote a state other than the one captured", round)
		}
		var again bytes.Buffer
		if _, err := v.WriteTo(&again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), got.Bytes()) {
			t.Fatalf("round %d: a view written twice gave different bytes", round)
		}
	}
	if s := dump(t, m); s != md.dump() {
		t.Fatal("the machine's state differs from the model's after the captures")
	}
}

// A restore builds its tree from the keys in order, not from commands:
// the restored machine then takes puts, deletes and swaps anywhere, and
// views captured from it, as one built by applying does.
func TestRestoredTreeTakesChanges(t *testing.T) {
	src := kv.New()
	md := &model{keys: map[string]modelEntry{}}
	r := rand.New(rand.NewPCG(9, 0))
	for range 3000 {
		randomOp(t, r, kv.NewClient(&direct{m: src}), md)
	}
	m := kv.New()
	if err := m.Restore(bytes.NewReader(snapshot(t, src))); err != nil {
		t.Fatal(err)
	}
	if s := dump(t, m); s != md.dump() {
		t.Fatal("the restored state differs from the model's")
	}
	c := kv.NewClient(&direct{m: m})
	for round := range 20 {
		compactNow(t, m)
		v, want := m.Capture(), md.dump()
		for range 200 {
			randomOp(t, r, c, md)
		}
		var got bytes.Buffer
		if _, err := v.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		restored := kv.New()
		if err := restored.Restore(bytes.NewReader(got.Bytes())); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if s := dump(t, restored); s != want {
			t.Fatalf("round %d: a view of the restored machine wrote a state other than the one captured", round)
		}
		if s := dump(t, m); s != md.dump() {
			t.Fatalf("round %d: the restored machine's state differs from the model's", round)
		}
	}
}

// A view is not disturbed by a Restore of the machine, and a machine
// restored from a view's bytes is its state.
func TestCaptureThenRestore(t *testing.T) {
	a := newDirect()
	randomCommands(t, kv.NewClient(a), 8, 300)
	v := a.m.Capture()
	want := snapshot(t, a.m)
	if err := a.m.Restore(bytes.NewReader(snapshot(t, kv.New()))); err != nil {
		t.Fatal(err)
	}
	if a.m.Len() != 0 {
		t.Fatalf("%d keys after restoring an empty snapshot", a.m.Len())
	}
	var got bytes.Buffer
	n, err := v.WriteTo(&got)
	if err != nil || n != int64(got.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d bytes", n, err, got.Len())
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("a restore changed a view captured before it")
	}
}

// Capture copies nothing: it allocates the same at 10 keys as at 20,000.
func TestCaptureConstant(t *testing.T) {
	allocs := func(n int) float64 {
		m := kv.New()
		c := kv.NewClient(&direct{m: m})
		for i := range n {
			if _, err := c.Put(t.Context(), fmt.Sprintf("k/%06d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		return testing.AllocsPerRun(20, func() { viewSink = m.Capture() })
	}
	small, large := allocs(10), allocs(20_000)
	if small != large || large > 8 {
		t.Fatalf("Capture allocates %v times at 10 keys, %v at 20,000; want the same few", small, large)
	}
}

var viewSink rsm.StateView

// A writer's error is returned, wrapped once, with the bytes written
// before it.
func TestViewWriteError(t *testing.T) {
	d := newDirect()
	randomCommands(t, kv.NewClient(d), 9, 300)
	full := snapshot(t, d.m)
	boom := errors.New("disk full")
	for _, limit := range []int{0, 10, len(full) - 1} {
		w := &failAfter{n: limit, err: boom}
		n, err := d.m.Capture().WriteTo(w)
		if !errors.Is(err, boom) {
			t.Fatalf("limit %d: WriteTo: %v; want the writer's error", limit, err)
		}
		if n != int64(w.written) || n > int64(limit) {
			t.Fatalf("limit %d: WriteTo reports %d bytes; the writer took %d", limit, n, w.written)
		}
	}
	if err := d.m.Snapshot(&failAfter{n: 5, err: boom}); !errors.Is(err, boom) {
		t.Fatalf("Snapshot: %v; want the writer's error", err)
	}
}

// failAfter takes n bytes, then fails.
type failAfter struct {
	n, written int
	err        error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.written+len(p) > f.n {
		k := f.n - f.written
		f.written = f.n
		return k, f.err
	}
	f.written += len(p)
	return len(p), nil
}
