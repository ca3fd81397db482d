package rsm_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/filestore"
)

// noPacks hides a driver's packing, as a version of tenure without packs
// saw the store: the log it writes is a file per entry.
type noPacks struct{ driver.Store }

// packLogTest is a group "g" on a filestore directory whose nodes each
// open the directory as a Store of their own, as processes do.
type packLogTest struct {
	t    *testing.T
	dir  string
	opts rsm.Options
	want map[string]string
}

func newPackLogTest(t *testing.T) *packLogTest {
	return &packLogTest{t: t, dir: t.TempDir(), want: map[string]string{},
		opts: rsm.Options{SnapshotThreshold: 20, FlushInterval: time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond, LeadershipDelay: 10 * time.Millisecond}}
}

func (p *packLogTest) open() *filestore.Store {
	fs, err := filestore.New(p.dir)
	if err != nil {
		p.t.Fatal(err)
	}
	return fs
}

// join starts node id on d and waits for it to reach role. A node
// noPacks registers with its leader as a version without packs does.
func (p *packLogTest) join(id string, d driver.Store, role string, noPacks bool) (*rsm.Host, *rsm.Node) {
	t := p.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := rsm.NewHost(t.Context(), store.New(d), rsm.HostConfig{ID: id, Addr: ln.Addr().String(), Listener: ln,
		Logger: slog.New(slog.DiscardHandler), SkipProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	if noPacks {
		rsm.FollowLikeNoPacks(h)
	}
	n, err := h.Join(t.Context(), "g", map[string]rsm.StateMachine{kv.MachineName: kv.New()}, p.opts)
	if err != nil {
		t.Fatal(err)
	}
	p.wait(n, func(s rsm.Status) bool { return s.Role == role && s.State == "JOINED" })
	return h, n
}

func (p *packLogTest) wait(n *rsm.Node, ok func(rsm.Status) bool) {
	p.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(n.Status()); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("status %+v did not reach the state wanted", n.Status())
		}
	}
}

func (p *packLogTest) stop(h *rsm.Host, n *rsm.Node) {
	if err := n.Leave(context.Background()); err != nil {
		p.t.Fatal(err)
	}
	_ = h.Close()
}

func (p *packLogTest) put(n *rsm.Node, from, to int) {
	p.t.Helper()
	c := kv.NewClient(n)
	for i := from; i < to; i++ {
		key, value := fmt.Sprintf("k%03d", i%40), fmt.Sprintf("v%d", i)
		if _, err := c.Put(p.t.Context(), key, []byte(value)); err != nil {
			p.t.Fatal(err)
		}
		p.want[key] = value
	}
}

func (p *packLogTest) check(n *rsm.Node, when string) {
	p.t.Helper()
	c := kv.NewClient(n)
	for key, value := range p.want {
		got, err := c.Get(p.t.Context(), key)
		if err != nil || string(got.Value) != value {
			p.t.Fatalf("%s: %s = %q, %v; want %q", when, key, got.Value, err, value)
		}
	}
}

// logPacked tells whether the group's log is a pack (its path the pack's
// head, a regular file) or a directory of files. Nothing is at the path
// for a moment while the log moves into a pack: the emptied directory is
// removed before the head takes its place.
func (p *packLogTest) logPacked() bool {
	p.t.Helper()
	fi, err := os.Lstat(filepath.Join(p.dir, "g.d", "log.d"))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return fi.Mode().IsRegular()
}

// oldLog writes puts through nodes of a version without packs: a leader,
// and as many followers (members of the group) as ids name.
func (p *packLogTest) oldLog(followers ...string) {
	p.t.Helper()
	h, n := p.join("a", noPacks{p.open()}, "LEADER", true)
	for _, id := range followers {
		hf, f := p.join(id, noPacks{p.open()}, "FOLLOWER", true)
		defer p.stop(hf, f)
	}
	p.put(n, 0, 55)
	if got := len(n.Status().Followers); got != len(followers) {
		p.t.Fatalf("%d followers; want %d", got, len(followers))
	}
	p.stop(h, n)
	if p.logPacked() {
		p.t.Fatal("the log of a version without packs is a pack")
	}
}

func (p *packLogTest) waitPacked() {
	p.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !p.logPacked(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatal("the log is still stored as files")
		}
	}
}

// TestExistingLogMovesIntoPack: a group whose log was written as a file
// per entry (by a version without packs) gets a packed log from the first
// leader that can pack it, at its first quiet moment, and nothing written
// before or after is lost: a cold start reads it all.
func TestExistingLogMovesIntoPack(t *testing.T) {
	p := newPackLogTest(t)
	p.oldLog()
	h, n := p.join("b", p.open(), "LEADER", false)
	p.waitPacked()
	p.check(n, "after the log moved into a pack")
	p.put(n, 55, 100)
	p.stop(h, n)
	if segs, err := os.ReadDir(filepath.Join(p.dir, "g.d", "log.p")); err != nil || len(segs) == 0 {
		t.Fatalf("no pack segments after writes: %d, %v", len(segs), err)
	}
	h, n = p.join("c", p.open(), "LEADER", false)
	defer p.stop(h, n)
	p.check(n, "after a cold start")
}

// TestExistingLogMovesIntoPackWithFollower: with every member registered
// as a version that reads packs, the leader moves the log, and the
// follower goes on applying what is written after, from the pack. With a
// member registered as a version without packs, the log stays as it is.
func TestExistingLogMovesIntoPackWithFollower(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old follower %v", old), func(t *testing.T) {
			p := newPackLogTest(t)
			p.oldLog("b")
			ha, a := p.join("a", p.open(), "LEADER", false)
			defer p.stop(ha, a)
			hb, b := p.join("b", p.open(), "FOLLOWER", old)
			defer p.stop(hb, b)
			p.put(a, 55, 60)
			if old {
				// Quiet moments come every few milliseconds; a leader
				// that ignored the follower would have packed by now (the
				// case above packs in tens of milliseconds).
				time.Sleep(time.Second)
				if p.logPacked() {
					t.Fatal("the log was packed with a member of a version without packs")
				}
			} else {
				p.waitPacked()
			}
			if s := a.Status(); len(s.Followers) != 1 || s.Followers[0].ID != "b" {
				t.Fatalf("followers %+v; want b", s.Followers)
			}
			p.put(a, 60, 100)
			applied := a.Status().ApplyIndex
			p.wait(b, func(s rsm.Status) bool { return s.ApplyIndex >= applied })
			p.check(b, "read through the follower")
		})
	}
}

// logEmpty tells whether the group's log (stored as files) holds no
// entry: its directory is gone or holds no file.
func (p *packLogTest) logEmpty() bool {
	p.t.Helper()
	empty := true
	err := filepath.WalkDir(filepath.Join(p.dir, "g.d", "log.d"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			empty = false
		}
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.t.Fatal(err)
	}
	return empty
}

// TestEmptyLogOfExistingGroupNotPackedAtTakeover: a group that exists
// already, whose log a truncation emptied, is not packed when a leader of
// a version with packs takes it over: a member of the term before may run
// a version without packs, and while one registers saying so the log stays
// a file per entry. Once that member runs a version with packs, the log
// moves into a pack.
func TestEmptyLogOfExistingGroupNotPackedAtTakeover(t *testing.T) {
	p := newPackLogTest(t)
	p.opts.SnapshotThreshold = 1 // every entry snapshotted, the log truncated after it
	ha, a := p.join("a", noPacks{p.open()}, "LEADER", true)
	hb, b := p.join("b", noPacks{p.open()}, "FOLLOWER", true)
	p.put(a, 0, 10)
	for deadline := time.Now().Add(20 * time.Second); !p.logEmpty(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the log was not emptied by truncation")
		}
	}
	p.stop(hb, b)
	p.stop(ha, a)
	if !p.logEmpty() || p.logPacked() {
		t.Fatal("the old group's log is not an empty directory of files")
	}

	hc, c := p.join("c", p.open(), "LEADER", false)
	defer p.stop(hc, c)
	if p.logPacked() {
		t.Fatal("the existing group's empty log was packed at takeover, before its members told their versions")
	}
	// b, of a version without packs, registers with the new leader, and
	// reads what is written after: through files.
	hb, b = p.join("b", noPacks{p.open()}, "FOLLOWER", true)
	p.put(c, 10, 30)
	applied := c.Status().ApplyIndex
	p.wait(b, func(s rsm.Status) bool { return s.ApplyIndex >= applied })
	p.check(b, "read through a follower of a version without packs")
	if p.logPacked() {
		t.Fatal("the log was packed while a member of a version without packs follows")
	}
	p.stop(hb, b)

	// b upgraded: the log moves into a pack, and nothing is lost.
	hb, b = p.join("b", p.open(), "FOLLOWER", false)
	defer p.stop(hb, b)
	p.waitPacked()
	p.put(c, 30, 40)
	applied = c.Status().ApplyIndex
	p.wait(b, func(s rsm.Status) bool { return s.ApplyIndex >= applied })
	p.check(b, "after the log moved into a pack")
}
