package rsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// addFollower registers a follower: a membership change, written to
// leader_state.json by compare-and-swap, then a synchronizer for it.
func (l *leaderRun) addFollower(ctx context.Context, f followerInfo) error {
	n := l.n
	l.mu.Lock()
	i := slices.IndexFunc(l.ls.Followers, func(x followerInfo) bool { return x.ID == f.ID })
	changed := i < 0 || l.ls.Followers[i].Addr != f.Addr
	l.mu.Unlock()
	if changed {
		for attempt := 0; ; attempt++ {
			l.mu.Lock()
			next := l.ls
			next.Followers = slices.DeleteFunc(slices.Clone(l.ls.Followers), func(x followerInfo) bool { return x.ID == f.ID })
			next.Followers = append(next.Followers, followerInfo{ID: f.ID, Addr: f.Addr, ApplyIndex: f.ApplyIndex})
			next.CommitIndex = l.confirmed
			prev := l.lsVersion
			l.mu.Unlock()
			start := time.Now()
			v, err := n.gs.writeLeaderState(ctx, next, prev)
			n.m.leaderUpdate.WithLabelValues(n.group).Observe(time.Since(start).Seconds())
			if err == nil {
				next.Counter++
				l.mu.Lock()
				l.ls, l.lsVersion = next, v
				l.mu.Unlock()
				break
			}
			if errors.Is(err, store.ErrPreconditionFailed) && !store.IsAmbiguous(err) {
				// Someone else wrote leader_state.json: a new term.
				if cerr := l.confirmOnce(); cerr != nil {
					l.depose(cerr)
					return cerr
				}
				// Still ours (a concurrent membership write of our own
				// that resolved): re-read the version and retry.
				_, v, rerr := n.gs.readLeaderState(ctx)
				if rerr != nil {
					return rerr
				}
				l.mu.Lock()
				l.lsVersion = v
				l.mu.Unlock()
			} else if attempt >= n.opts.Retry.MaxAttempts {
				return err
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return errDeposed
	}
	if old := l.syncers[f.ID]; old != nil {
		old.stop()
	}
	s := newSyncer(l, f)
	l.syncers[f.ID] = s
	l.followerIdx[f.ID] = f.ApplyIndex
	return nil
}

// syncer is S2C's FollowerSynchronizer: it sends confirmed entries to one
// follower in order, and a heartbeat when there is nothing to send.
type syncer struct {
	l      *leaderRun
	f      followerInfo
	cancel context.CancelFunc
	done   chan struct{}
}

func newSyncer(l *leaderRun, f followerInfo) *syncer {
	ctx, cancel := context.WithCancel(l.ctx)
	s := &syncer{l: l, f: f, cancel: cancel, done: make(chan struct{})}
	l.n.m.synchronizers.WithLabelValues(l.n.group).Inc()
	go func() {
		defer close(s.done)
		defer l.n.m.synchronizers.WithLabelValues(l.n.group).Dec()
		s.run(ctx, f.ApplyIndex+1)
	}()
	return s
}

func (s *syncer) stop() {
	s.cancel()
	<-s.done
}

func (s *syncer) run(ctx context.Context, next uint64) {
	l, n := s.l, s.l.n
	var lastSent time.Time
	failures := 0
	for ctx.Err() == nil {
		l.mu.Lock()
		confirmed, wake := l.confirmed, l.newEntries
		l.mu.Unlock()
		if next > confirmed && time.Since(lastSent) < n.opts.HeartbeatInterval {
			t := time.NewTimer(n.opts.HeartbeatInterval - time.Since(lastSent))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		req, tooFar, err := s.request(ctx, next, confirmed)
		if err != nil {
			n.log.Warn("synchronizer cannot read the log", "follower", s.f.ID, "err", err)
			if sleepCtx(ctx, n.gs.backoff(min(failures+1, 5))) != nil {
				return
			}
			failures++
			continue
		}
		req.TooFarBehind = tooFar
		lastSent = time.Now()
		resp, err := s.call(ctx, req)
		switch {
		case err != nil:
			failures++
			if sleepCtx(ctx, n.gs.backoff(min(failures, 5))) != nil {
				return
			}
			continue
		case resp.Status == rsmpb.Status_STALE_TERM || resp.Status == rsmpb.Status_NOT_LEADER:
			// The follower knows a newer term: check ours.
			if cerr := l.confirmOnce(); cerr != nil {
				l.depose(cerr)
				return
			}
			failures++
			if sleepCtx(ctx, n.gs.backoff(min(failures, 5))) != nil {
				return
			}
			continue
		case resp.Status != rsmpb.Status_OK:
			failures++
			if sleepCtx(ctx, n.gs.backoff(min(failures, 5))) != nil {
				return
			}
			continue
		}
		failures = 0
		if tooFar {
			return // it catches up from the store and follows again
		}
		next = resp.ApplyIndex + 1
		l.mu.Lock()
		l.followerIdx[s.f.ID] = resp.ApplyIndex
		l.mu.Unlock()
	}
}

// request builds the next Synchronize request: entries from next up to
// confirmed, within MaxMessageSize, from the cache or the store.
func (s *syncer) request(ctx context.Context, next, confirmed uint64) (*rsmpb.SynchronizeRequest, bool, error) {
	l, n := s.l, s.l.n
	req := &rsmpb.SynchronizeRequest{Group: n.group, Term: l.term, LeaderId: n.host.cfg.ID, CommitIndex: confirmed}
	l.mu.Lock()
	for _, f := range l.ls.Followers {
		req.Followers = append(req.Followers, &rsmpb.FollowerInfo{Id: f.ID, Addr: f.Addr, ApplyIndex: l.followerIdx[f.ID]})
	}
	snapEnd := l.snapEnd
	l.mu.Unlock()
	budget := n.opts.MaxMessageSize - 4096
	for i := next; i <= confirmed && len(req.Entries) < n.opts.MaxPendingBatches; i++ {
		l.mu.Lock()
		e := l.cache[i]
		l.mu.Unlock()
		if e == nil {
			n.m.logCacheMiss.WithLabelValues(n.group).Inc()
			if i <= snapEnd {
				return req, true, nil
			}
			var err error
			e, err = n.gs.readEntry(ctx, i)
			if errors.Is(err, store.ErrNotFound) {
				return req, true, nil // truncated since
			}
			if err != nil {
				n.noteCorrupt(err)
				return nil, false, err
			}
			n.m.logReads.WithLabelValues(n.group).Inc()
		}
		size := proto.Size(e)
		if size > budget && len(req.Entries) > 0 {
			break
		}
		if size > budget {
			return nil, false, fmt.Errorf("entry %d of %d bytes exceeds MaxMessageSize", i, size)
		}
		budget -= size
		req.Entries = append(req.Entries, e)
	}
	return req, false, nil
}

func (s *syncer) call(ctx context.Context, req *rsmpb.SynchronizeRequest) (*rsmpb.SynchronizeResponse, error) {
	n := s.l.n
	c, err := n.host.client(ctx, s.f.Addr, n.group)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, n.opts.HeartbeatInterval+n.host.cfg.ConnectTimeout)
	defer cancel()
	return c.Synchronize(cctx, req)
}
