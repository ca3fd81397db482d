package rsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/rsm/internal/snapshot"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// The simulated store: objects are Go values (entries, snapshots, leader
// states), each with a version. An operation is applied after a delay and
// answered after another; a write's answer may be lost after it was
// applied, and a write may land long after its writer gave up on it.

var (
	errSimExists      = errors.New("sim store: precondition failed")
	errSimUnknown     = errors.New("sim store: outcome unknown")
	errSimUnavailable = errors.New("sim store: unavailable")
)

type simObject struct {
	v   any
	ver int
}

type simStore struct {
	objs map[string]simObject
	ver  int
	// deleted remembers log keys a truncation removed, so that a create
	// landing on one afterwards is counted (a stale writer's late create).
	deleted map[string]bool
}

// simDriver lets the real groupStore read the simulated store: a Get
// blocks the simulated process named in its context until the simulated
// store answers, and returns the object encoded as the store holds it. So
// rule 8 (groupStore.readLog, supersedes) and the decoders run as they
// are. Errors are permanent, never retried with real timers: the
// simulated caller retries.
type simDriver struct{ n *simNode }

type simProcKey struct{}

var errSimNotFound = errors.New("sim store: not found")

const simGroup = "g"

func (d simDriver) Get(ctx context.Context, key string) ([]byte, string, error) {
	p := ctx.Value(simProcKey{}).(*simProc)
	simKey, err := simKeyOf(key)
	if err != nil {
		return nil, "", err
	}
	v, ver, err := p.get(d.n, simKey)
	if err != nil {
		return nil, "", err
	}
	if v == nil {
		return nil, "", errSimNotFound
	}
	var b []byte
	switch o := v.(type) {
	case *rsmpb.Entry:
		b, err = record.EncodeEntry(o)
	case simSnap:
		b = o.data
	case []byte:
		b = o
	}
	if err != nil {
		return nil, "", err
	}
	return b, strconv.Itoa(ver), nil
}

// simSnap is the snapshot object as the store holds it: the manifest's
// bytes (groupStore.writeManifest).
type simSnap struct {
	data []byte
}

func (d simDriver) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	b, v, err := d.Get(ctx, key)
	if err == nil && int64(len(b)) > max {
		return nil, "", driver.TooLargeError(int64(len(b)), max)
	}
	return b, v, err
}

// simKeyOf maps a store key to the simulated store's.
func simKeyOf(key string) (string, error) {
	if i, ok := parseLogKey(simGroup, key); ok {
		return logKeyOf(i), nil
	}
	if key == simGroup+"/"+snapshotKey {
		return "snap", nil
	}
	if strings.HasPrefix(key, simGroup+"/"+snapDir) {
		return "obj:" + key, nil
	}
	return "", fmt.Errorf("sim store: no object %q", key)
}

// Put writes the snapshot objects (snapshot.Store.Write) through the
// simulated store: its delays, its late landings and its lost answers.
// The log and leader_state.json are written by the simulation.
func (d simDriver) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	p := ctx.Value(simProcKey{}).(*simProc)
	prev := 0
	if cond.Kind == driver.IfMatch {
		prev, _ = strconv.Atoi(cond.Version)
	}
	var v any
	switch {
	case key == simGroup+"/"+snapshotKey:
		v = simSnap{data: bytes.Clone(data)}
	case strings.HasPrefix(key, simGroup+"/"+snapDir):
		v = bytes.Clone(data)
	default:
		return "", fmt.Errorf("sim store: writes of %q go through the simulation", key)
	}
	sk, _ := simKeyOf(key)
	ver, err := p.put(d.n, sk, v, prev)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(ver), nil
}

// Delete removes a snapshot object (snapshot.Store.Collect) through the
// simulated store; truncation is the simulation's.
func (d simDriver) Delete(ctx context.Context, key string, _ driver.Cond) error {
	if !strings.HasPrefix(key, simGroup+"/"+snapDir) {
		return fmt.Errorf("sim store: deletes of %q go through the simulation", key)
	}
	p := ctx.Value(simProcKey{}).(*simProc)
	_, _, err := p.storeOp(d.n, true, func() (any, int, error) {
		if o, ok := p.s.st.objs["snap"]; ok {
			if m, err := snapshot.DecodeManifest(o.v.(simSnap).data); err == nil && m.Objects()[key] {
				p.s.failf("collection deleted %s, which the stored manifest (ending at %d) references", key, m.End)
			}
		}
		if _, ok := p.s.st.objs["obj:"+key]; ok {
			delete(p.s.st.objs, "obj:"+key)
			p.s.st.deleted["obj:"+key] = true
		}
		return nil, 0, nil
	})
	return err
}

// List answers the listing of the snapshot's key (snapshot.Store.End)
// and of the snapshot objects (snapshot.Store.Collect) through the simulated
// store; the log is listed by the simulation.
func (d simDriver) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	key := simGroup + "/" + snapshotKey
	p := ctx.Value(simProcKey{}).(*simProc)
	if prefix == simGroup+"/"+snapDir {
		v, _, err := p.storeOp(d.n, false, func() (any, int, error) {
			var out []driver.Item
			for k, o := range p.s.st.objs {
				if name, ok := strings.CutPrefix(k, "obj:"); ok && name > after {
					out = append(out, driver.Item{Key: name, Version: strconv.Itoa(o.ver)})
				}
			}
			slices.SortFunc(out, func(a, b driver.Item) int { return strings.Compare(a.Key, b.Key) })
			return out[:min(len(out), limit)], 0, nil
		})
		if err != nil {
			return nil, err
		}
		return v.([]driver.Item), nil
	}
	if prefix != key || after != "" || limit < 1 {
		return nil, fmt.Errorf("sim store: no listing of %q after %q", prefix, after)
	}
	v, ver, err := p.get(d.n, "snap")
	if err != nil || v == nil {
		return nil, err
	}
	return []driver.Item{{Key: key, Version: strconv.Itoa(ver), Size: int64(len(v.(simSnap).data))}}, nil
}

func (simDriver) ErrorKind(err error) driver.Kind {
	switch {
	case errors.Is(err, errSimNotFound):
		return driver.NotFound
	case errors.Is(err, errSimExists):
		return driver.PreconditionFailed
	}
	return driver.Permanent
}

func (simDriver) Close() error { return nil }

var _ driver.Store = simDriver{}

// groupStore is the real reader over the simulated store, for node n.
func (n *simNode) groupStore() *groupStore {
	// Bases of a few parts each: the simulated states are small.
	return newGroupStore(store.New(simDriver{n: n}), simGroup, RetryOptions{MaxAttempts: 1}, 0,
		snapshot.Options{PartMax: 64, Nonce: n.s.nonce})
}

func simCtx(p *simProc) context.Context {
	return context.WithValue(context.Background(), simProcKey{}, p)
}

// storeOp runs op on the store after a delay, as node n sees it.
func (p *simProc) storeOp(n *simNode, write bool, op func() (any, int, error)) (any, int, error) {
	return p.storeOpSynced(n, write, op, nil)
}

// storeOpSynced is storeOp whose answer waits *sync ticks more, as op
// sets it: a write visible when applied and durable later.
func (p *simProc) storeOpSynced(n *simNode, write bool, op func() (any, int, error), sync *int64) (any, int, error) {
	s := p.s
	var v any
	var ver int
	var err error
	p.block(func(wake func()) {
		d := s.between(1, 4)
		if s.chance(s.cfg.lateRate) {
			d = s.between(40, 400) // lands late
		}
		s.after(d, func() {
			if n != nil && n.storeCut {
				err = errSimUnavailable
				s.after(s.between(1, 4), wake)
				return
			}
			if !write && s.chance(s.cfg.readFailRate) {
				err = errSimUnavailable
			} else {
				v, ver, err = op()
				if write && s.chance(s.cfg.lostRate) {
					v, ver, err = nil, 0, errSimUnknown // applied, answer lost
				}
			}
			d := s.between(1, 4)
			if sync != nil {
				d += *sync
			}
			s.after(d, wake)
		})
	})
	return v, ver, err
}

func (p *simProc) get(n *simNode, key string) (any, int, error) {
	return p.storeOp(n, false, func() (any, int, error) {
		o, ok := p.s.st.objs[key]
		if !ok {
			return nil, 0, nil
		}
		return o.v, o.ver, nil
	})
}

// put writes v if the key's version is prev (0: absent).
func (p *simProc) put(n *simNode, key string, v any, prev int) (int, error) {
	return p.putShown(n, key, v, prev, nil)
}

// putShown is put that calls shown when the write is applied (visible),
// if the store says so (cfg.shows): the answer then comes after a sync.
func (p *simProc) putShown(n *simNode, key string, v any, prev int, shown func()) (int, error) {
	var sync *int64
	if shown != nil && p.s.cfg.shows {
		sync = new(int64)
	}
	_, ver, err := p.storeOpSynced(n, true, func() (any, int, error) {
		st := &p.s.st
		o, ok := st.objs[key]
		if (prev == 0 && ok) || (prev != 0 && (!ok || o.ver != prev)) {
			return nil, 0, errSimExists
		}
		if prev == 0 && st.deleted[key] && strings.HasPrefix(key, "log/") {
			p.s.cover.lateCreates++
		}
		if strings.HasPrefix(key, "obj:") && p.killed {
			p.s.cover.lateParts++ // its writer crashed: a leftover for a sweep
		}
		st.ver++
		st.objs[key] = simObject{v: v, ver: st.ver}
		if sync != nil {
			*sync = p.s.between(1, 12)
			shown()
		}
		return nil, st.ver, nil
	}, sync)
	return ver, err
}

func (p *simProc) del(n *simNode, key string) error {
	_, _, err := p.storeOp(n, true, func() (any, int, error) {
		if _, ok := p.s.st.objs[key]; ok {
			delete(p.s.st.objs, key)
			p.s.st.deleted[key] = true
		}
		return nil, 0, nil
	})
	return err
}

// listLog returns the log indexes present, in order.
func (p *simProc) listLog(n *simNode) ([]uint64, error) {
	v, _, err := p.storeOp(n, false, func() (any, int, error) {
		var out []uint64
		for _, o := range p.s.st.objs {
			if e, ok := o.v.(*rsmpb.Entry); ok {
				out = append(out, e.Index)
			}
		}
		slices.Sort(out)
		return out, 0, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]uint64), nil
}
