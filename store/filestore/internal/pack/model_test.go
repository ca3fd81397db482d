package pack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store/driver"
)

// modelSeeds is how many seeds TestModel runs; TENURE_PACK_SEEDS
// sets another number, TENURE_PACK_SEED runs one seed alone.
const modelSeeds = 1000

// TestModel runs seeded random interleavings of creates,
// compare-and-swaps, deletes, reads, listings and reopenings by three
// Logs of one pack (as three processes have), which starts a segment
// every frame or two (so that writers reclaim old segments all the time),
// against a map. While a Log reads the pack (between its read of a
// segment and its look at the next one, or as it finds the next one
// missing), other Logs write and read: what a Log returns must be what
// the map held at some moment of its call, and after it, every read must
// see every acknowledged write. A failure names its seed.
func TestModel(t *testing.T) {
	seeds := make([]uint64, 0, modelSeeds)
	if s := os.Getenv("TENURE_PACK_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_PACK_SEED=%q: %v", s, err)
		}
		seeds = append(seeds, seed)
	} else {
		n := modelSeeds
		if s := os.Getenv("TENURE_PACK_SEEDS"); s != "" {
			var err error
			if n, err = strconv.Atoi(s); err != nil {
				t.Fatalf("TENURE_PACK_SEEDS=%q: %v", s, err)
			}
		}
		for i := range n {
			seeds = append(seeds, uint64(i))
		}
	}
	for _, seed := range seeds {
		if err := runModel(t, seed, 30); err != nil {
			t.Fatalf("seed %d (rerun it alone with TENURE_PACK_SEED=%d): %v", seed, seed, err)
		}
	}
}

// model is one seed's run.
type model struct {
	t     *testing.T
	rng   *rand.Rand
	dir   string
	logs  []*Log
	hooks Hooks
	model map[string]string // key -> value
	// seen is every value written, for stale versions.
	seen []string
	// reads are the reads in progress, each with the maps it may
	// return: the one when it began and one after each write since.
	reads []*[]map[string]string
	// before is the map before the write in progress, until that write
	// appends its frame: what reads meanwhile see.
	before map[string]string
	cur    int  // the Log whose operation is in progress
	nested bool // in another Log's operation: no more injections
	seq    int
	trace  []string
	err    error
}

const modelKeys = 5

func runModel(t *testing.T, seed uint64, ops int) error {
	m := &model{
		t:     t,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		dir:   t.TempDir(),
		model: map[string]string{},
	}
	// No syncs: nothing crashes here.
	m.hooks.Sync = func(*os.File) error { return nil }
	m.hooks.SyncDir = func(string) error { return nil }
	if err := os.Mkdir(filepath.Join(m.dir, "log.p"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.dir, "log.d"), []byte(HeadText), 0o644); err != nil {
		return err
	}
	for range 3 {
		m.logs = append(m.logs, m.open())
	}
	defer func() {
		for _, l := range m.logs {
			l.Close()
		}
	}()
	// Where a Log reads the pack, holding no lock, others may write;
	// where it reads under the head's lock, others only read (their
	// writes would wait for the lock).
	m.hooks.AfterSegmentRead = func(writer bool) { m.inject(!writer) }
	m.hooks.AfterNextMissing = func(writer bool) { m.inject(!writer) }
	m.hooks.BeforeSync = func() {
		if !m.nested {
			m.before = nil // the frame is appended
		}
		m.inject(true)
	}
	for range ops {
		m.cur = m.rng.IntN(len(m.logs))
		m.step(m.cur, true)
		if m.err != nil {
			return m.fail()
		}
	}
	// Every Log, and one that starts from the files, reads the map.
	m.logs = append(m.logs, m.open())
	for i := range m.logs {
		m.cur = i
		for k := range modelKeys {
			m.get(i, m.key(k))
		}
		m.list(i)
		if m.err != nil {
			return m.fail()
		}
	}
	return nil
}

func (m *model) fail() error {
	return fmt.Errorf("%w\nlast operations:\n  %s", m.err, strings.Join(m.trace[max(0, len(m.trace)-30):], "\n  "))
}

func (m *model) errorf(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

func (m *model) key(k int) string { return fmt.Sprintf("k%d", k) }

// inject runs, half the time, one to three operations of Logs other
// than the one in progress.
func (m *model) inject(writes bool) {
	if m.nested || m.err != nil || m.rng.IntN(2) == 0 {
		return
	}
	m.nested = true
	defer func() { m.nested = false }()
	for range 1 + m.rng.IntN(3) {
		i := m.rng.IntN(len(m.logs) - 1)
		if i >= m.cur {
			i++
		}
		m.step(i, writes)
	}
}

// step runs one random operation of Log i (a read unless writes).
func (m *model) step(i int, writes bool) {
	key := m.key(m.rng.IntN(modelKeys))
	op := m.rng.IntN(100)
	if !writes {
		op %= 40
	}
	switch {
	case op < 25:
		m.get(i, key)
	case op < 35:
		m.list(i)
	case op < 40 && !m.nested:
		m.reopen(i)
	case op < 40:
		m.get(i, key)
	case op < 60:
		m.put(i, key, driver.Cond{Kind: driver.IfAbsent})
	case op < 80:
		m.put(i, key, driver.Cond{Kind: driver.IfMatch, Version: m.someVersion(key)})
	case op < 88:
		m.del(i, key, driver.Cond{})
	default:
		m.del(i, key, driver.Cond{Kind: driver.IfMatch, Version: m.someVersion(key)})
	}
}

// someVersion is key's version, or mostly so: a stale one or one never
// written a quarter of the time.
func (m *model) someVersion(key string) string {
	if v, ok := m.model[key]; ok && m.rng.IntN(4) > 0 {
		return Version([]byte(v))
	}
	if len(m.seen) > 0 && m.rng.IntN(2) == 0 {
		return Version([]byte(m.seen[m.rng.IntN(len(m.seen))]))
	}
	return Version([]byte("never written"))
}

func (m *model) logf(format string, args ...any) {
	indent := ""
	if m.nested {
		indent = "    (meanwhile) "
	}
	m.trace = append(m.trace, indent+fmt.Sprintf(format, args...))
}

// begin starts a read: it may return any state from now to its end,
// which returns them.
func (m *model) begin() (end func() []map[string]string) {
	start := m.model
	if m.before != nil {
		start = m.before
	}
	states := []map[string]string{maps(start)}
	m.reads = append(m.reads, &states)
	return func() []map[string]string {
		m.reads = m.reads[:len(m.reads)-1]
		return states
	}
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// writing notes that a write of the Log in progress is about to
// change the map: until it appends its frame, others read the map as it
// was.
func (m *model) writing() {
	if !m.nested {
		m.before = maps(m.model)
	}
}

func (m *model) written() {
	if !m.nested {
		m.before = nil
	}
}

// changed records a write: reads in progress may see the new state.
func (m *model) changed() {
	for _, r := range m.reads {
		*r = append(*r, maps(m.model))
	}
}

func (m *model) get(i int, key string) {
	end := m.begin()
	data, version, err := m.logs[i].Get(key, math.MaxInt64, nil)
	mine := end()
	got := "absent"
	switch {
	case err == nil:
		got = fmt.Sprintf("%q", data)
		if version != Version(data) {
			m.errorf("log %d: Get(%q) = %q with version %s; want %s", i, key, data, version, Version(data))
		}
	case driver.Classify(nil, err) == driver.NotFound:
	default:
		m.errorf("log %d: Get(%q): %v", i, key, err)
		return
	}
	m.logf("log %d: get %s: %s", i, key, got)
	for _, s := range mine {
		v, ok := s[key]
		if ok == (err == nil) && (!ok || v == string(data)) {
			return
		}
	}
	m.errorf("log %d: Get(%q) = %s; the map held %s%s", i, key, got, describe(mine, key), m.state())
}

func describe(states []map[string]string, key string) string {
	var out []string
	for _, s := range states {
		if v, ok := s[key]; ok {
			out = append(out, fmt.Sprintf("%q", v))
		} else {
			out = append(out, "absent")
		}
	}
	return strings.Join(out, " then ")
}

func (m *model) list(i int) {
	end := m.begin()
	items, err := m.logs[i].List("", "")
	mine := end()
	if err != nil {
		m.errorf("log %d: List: %v", i, err)
		return
	}
	got := map[string]string{}
	for _, it := range items {
		got[it.Key] = it.Version
	}
	m.logf("log %d: list: %d keys", i, len(got))
	for _, s := range mine {
		want := map[string]string{}
		for k, v := range s {
			want[k] = Version([]byte(v))
		}
		if mapsEqual(got, want) {
			return
		}
	}
	m.errorf("log %d: List = %v; the map held %v%s", i, got, mine, m.state())
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// put writes key under cond, and the map with it if cond holds there.
func (m *model) put(i int, key string, cond driver.Cond) {
	m.seq++
	value := fmt.Sprintf("%d:%s", m.seq, strings.Repeat("v", m.rng.IntN(48)))
	cur, ok := m.model[key]
	holds := cond.Kind == driver.IfAbsent && !ok || cond.Kind == driver.IfMatch && ok && Version([]byte(cur)) == cond.Version
	// Decided before the call: no other Log writes before this one's
	// frame is appended (the hooks inject only reads until then).
	if holds {
		m.writing()
		m.model[key] = value
		m.seen = append(m.seen, value)
		m.changed()
	}
	m.logf("log %d: put %s %s %q (want ok=%t)", i, key, cond.Kind, value, holds)
	version, err := m.logs[i].Put(m.t.Context(), key, []byte(value), cond)
	m.written()
	switch {
	case holds && err != nil:
		m.errorf("log %d: Put(%q, %s): %v; the map held %q", i, key, cond.Kind, err, cur)
	case holds && version != Version([]byte(value)):
		m.errorf("log %d: Put(%q) = version %s; want %s", i, key, version, Version([]byte(value)))
	case !holds && err == nil:
		m.errorf("log %d: Put(%q, %s) succeeded; the map held %s (present %t): a write overwritten", i, key, cond.Kind, cur, ok)
	case !holds && driver.Classify(nil, err) != driver.PreconditionFailed:
		m.errorf("log %d: Put(%q, %s): %v; want a failed precondition", i, key, cond.Kind, err)
	}
}

// del deletes key under cond, and from the map if cond holds there.
func (m *model) del(i int, key string, cond driver.Cond) {
	cur, ok := m.model[key]
	holds := cond.Kind == driver.Unconditional || ok && Version([]byte(cur)) == cond.Version
	if holds && ok {
		m.writing()
		delete(m.model, key)
		m.changed()
	}
	m.logf("log %d: delete %s %s (want ok=%t)", i, key, cond.Kind, holds)
	err := m.logs[i].Delete(m.t.Context(), key, cond)
	m.written()
	switch {
	case holds && err != nil:
		m.errorf("log %d: Delete(%q, %s): %v", i, key, cond.Kind, err)
	case !holds && err == nil:
		m.errorf("log %d: Delete(%q, %s) succeeded; the map held %q (present %t)", i, key, cond.Kind, cur, ok)
	case !holds && driver.Classify(nil, err) != driver.PreconditionFailed:
		m.errorf("log %d: Delete(%q, %s): %v; want a failed precondition", i, key, cond.Kind, err)
	}
}

// reopen closes Log i and opens it again: its index starts over.
func (m *model) reopen(i int) {
	m.logf("log %d: reopen", i)
	if err := m.logs[i].Close(); err != nil {
		m.errorf("log %d: Close: %v", i, err)
	}
	m.logs[i] = m.open()
}

// open opens a Log of the pack, as another process would.
func (m *model) open() *Log {
	l, err := Open(Config{Head: filepath.Join(m.dir, "log.d"), Segments: filepath.Join(m.dir, "log.p"),
		ValidKey: testValidKey, SegmentMax: 96, Hooks: &m.hooks})
	if err != nil {
		m.t.Fatal(err)
	}
	return l
}

// state describes the segments on disk and each Log's index, for a
// failure's message.
func (m *model) state() string {
	var b strings.Builder
	ents, _ := os.ReadDir(filepath.Join(m.dir, "log.p"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "\n segment %s: %d bytes", e.Name(), fi.Size())
		}
	}
	for i, l := range m.logs {
		fmt.Fprintf(&b, "\n log %d: first %d, seg %d, listed %d, off %d, live %v, keys %v", i, l.first, l.seg, l.listed, l.off, l.live, l.keys)
	}
	return b.String()
}
