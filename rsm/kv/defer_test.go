package kv

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
)

// smallRuns makes deferred puts go to the tree in runs of 4 to 16, so that
// a short test sends many.
func smallRuns(t *testing.T) {
	minPuts, maxPuts := deferPutsMin, deferPutsMax
	deferPutsMin, deferPutsMax = 4, 16
	t.Cleanup(func() { deferPutsMin, deferPutsMax = minPuts, maxPuts })
}

// TestPreparedPutsDeferred: a machine applying prepared commands, whose
// puts go to its tree later in sorted runs, replies as one applying them
// with Apply, and every read in between (get, list, length, capture)
// answers as that one does: puts of the same key in one run, a key
// created, deleted and created again, swaps and deletes that need the
// puts before them.
func TestPreparedPutsDeferred(t *testing.T) {
	smallRuns(t)
	for seed := int64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewSource(seed))
		want, got := New(), New()
		if seed%2 == 0 { // from a restored state, as a cold start is
			for i := range 30 {
				want.Apply(command{op: tagPut, key: fmt.Sprintf("k%02d", i*2), value: []byte{byte(i)}}.encode())
			}
			if err := got.Restore(bytes.NewReader(snap(t, want))); err != nil {
				t.Fatal(err)
			}
		}
		key := func() string { return fmt.Sprintf("k%02d", r.Intn(60)) }
		for i := range 3000 {
			var c command
			switch n := r.Intn(100); {
			case n < 80:
				c = command{op: tagPut, key: key(), value: bytes.Repeat([]byte{byte(i)}, r.Intn(20))}
			case n < 90:
				c = command{op: tagDelete, key: key()}
			default:
				c = command{op: tagCAS, key: key(), expect: uint64(r.Intn(int(want.Revision() + 1))), value: []byte("swapped")}
				if r.Intn(2) == 0 {
					var cur uint64
					if e, ok := want.tree.Get(entry{key: c.key}); ok {
						cur = e.mod
					}
					c.expect = cur
				}
			}
			cmd := c.encode()
			w := want.Apply(bytes.Clone(cmd))
			g := got.ApplyPrepared(cmd, got.Prepare(cmd))
			for j := range cmd {
				cmd[j] ^= 0xff // the machine keeps nothing of the command
			}
			if !bytes.Equal(g, w) {
				t.Fatalf("seed %d, command %d (%+v): reply %x, Apply's %x", seed, i, c, g, w)
			}
			if r.Intn(50) != 0 {
				continue
			}
			switch r.Intn(4) {
			case 0:
				q := query{op: tagGet, key: key()}.encode()
				wq, _ := want.Query(q)
				gq, _ := got.Query(q)
				if !bytes.Equal(gq, wq) {
					t.Fatalf("seed %d, after command %d: get %x, want %x", seed, i, gq, wq)
				}
			case 1:
				q := query{op: tagList, key: "k", after: key(), limit: 10}.encode()
				wq, _ := want.Query(q)
				gq, _ := got.Query(q)
				if !bytes.Equal(gq, wq) {
					t.Fatalf("seed %d, after command %d: list %x, want %x", seed, i, gq, wq)
				}
			case 2:
				if g, w := got.Len(), want.Len(); g != w {
					t.Fatalf("seed %d, after command %d: %d keys, want %d", seed, i, g, w)
				}
			default:
				var gv bytes.Buffer
				if _, err := got.Capture().WriteTo(&gv); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(gv.Bytes(), snap(t, want)) {
					t.Fatalf("seed %d, after command %d: the captured state differs from Apply's", seed, i)
				}
			}
		}
		if !bytes.Equal(snap(t, got), snap(t, want)) {
			t.Fatalf("seed %d: the state differs from Apply's", seed)
		}
	}
}

// TestRestoreDropsDeferredPuts: a Restore replaces the whole state, the
// puts not yet in the tree too, including a run a goroutine is putting
// there.
func TestRestoreDropsDeferredPuts(t *testing.T) {
	smallRuns(t)
	src := New()
	src.Apply(command{op: tagPut, key: "kept", value: []byte("v")}.encode())
	stored := snap(t, src)
	m := New()
	for i := range 37 { // two runs of 16 sent, 5 puts deferred
		cmd := command{op: tagPut, key: fmt.Sprintf("k%02d", i), value: []byte("x")}.encode()
		m.ApplyPrepared(cmd, m.Prepare(cmd))
	}
	if err := m.Restore(bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap(t, m), stored) {
		t.Fatalf("after Restore: %d keys at revision %d, want the snapshot's 1 at 1", m.Len(), m.Revision())
	}
}

// TestDeferredPutsConcurrentReads: the machine is safe for concurrent
// use while its puts are deferred and their runs go to the tree: reads
// from another goroutine see each key's revisions in order, never a put
// undone (run under the race detector).
func TestDeferredPutsConcurrentReads(t *testing.T) {
	smallRuns(t)
	m := New()
	const puts = 4000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := map[string]uint64{}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("k%d", n%8)
			res, err := m.Query(query{op: tagGet, key: k}.encode())
			if err != nil {
				errs <- err
				return
			}
			rep, err := decodeReply(res)
			if err != nil {
				errs <- err
				return
			}
			if rep.kv.ModRevision < last[k] {
				errs <- fmt.Errorf("%s read at revision %d after %d", k, rep.kv.ModRevision, last[k])
				return
			}
			if rep.found && string(rep.kv.Value) != fmt.Sprint(rep.kv.ModRevision) {
				errs <- fmt.Errorf("%s at revision %d holds %q", k, rep.kv.ModRevision, rep.kv.Value)
				return
			}
			last[k] = rep.kv.ModRevision
		}
	}()
	for i := 1; i <= puts; i++ {
		cmd := command{op: tagPut, key: fmt.Sprintf("k%d", i%8), value: []byte(fmt.Sprint(i))}.encode()
		m.ApplyPrepared(cmd, m.Prepare(cmd))
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if m.Revision() != puts || m.Len() != 8 {
		t.Fatalf("revision %d with %d keys, want %d with 8", m.Revision(), m.Len(), puts)
	}
}

// TestDeferredPutsBounded: the puts a machine holds out of its tree stay
// within a run's bounds, in bytes of values and in puts, whatever the
// state's size: a run is sent as soon as it reaches either.
func TestDeferredPutsBounded(t *testing.T) {
	minPuts, maxPuts, maxBytes := deferPutsMin, deferPutsMax, deferBytesMax
	deferPutsMin, deferPutsMax, deferBytesMax = 1000, 50, 1000
	t.Cleanup(func() { deferPutsMin, deferPutsMax, deferBytesMax = minPuts, maxPuts, maxBytes })
	m := New()
	sent := 0
	for i := range 2000 {
		size := 300 // bytes bound the first half, puts the second
		if i >= 1000 {
			size = 1
		}
		cmd := command{op: tagPut, key: fmt.Sprintf("k%04d", i%700), value: bytes.Repeat([]byte{'v'}, size)}.encode()
		before := len(m.deferred)
		m.ApplyPrepared(cmd, m.Prepare(cmd))
		if len(m.deferred) <= before {
			sent++
		}
		if m.deferredBytes >= deferBytesMax || len(m.deferred) >= deferPutsMax {
			t.Fatalf("after put %d: %d puts and %d bytes deferred, bounds %d and %d", i, len(m.deferred), m.deferredBytes, deferPutsMax, deferBytesMax)
		}
	}
	if sent < 1000/4+1000/50 {
		t.Fatalf("%d runs sent for 2,000 puts; want one per 4 puts of 300 bytes and per 50 puts", sent)
	}
	if m.Len() != 700 || m.Revision() != 2000 {
		t.Fatalf("%d keys at revision %d, want 700 at 2000", m.Len(), m.Revision())
	}
}
