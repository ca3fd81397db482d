package etcdstore

import (
	"context"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Watch implements driver.Watcher with an etcd watch on the key. With a
// version it starts at the next revision, so that every change after the
// version is sent, including those made before Watch was called; with an
// empty version it starts at the revision the server has when it sets the
// watch up.
//
// Events arrive in revision order. For a deletion, Deleted is true, Data is
// nil and Version is the revision of the deletion: pass it back to Watch to
// resume, never to IfMatch. The channel is closed when ctx ends, when the
// store is closed, when the watch cannot go on (the revision to start from
// has been compacted, the member lost its leader, permission was refused),
// or on any other error: the caller then reads the key with Get and may
// watch again from the version it read. A watch may also stay silent while
// no server can be reached, so it is no substitute for the caller's own
// timers.
func (s *Store) Watch(ctx context.Context, key, version string) (<-chan driver.WatchEvent, error) {
	if key == "" {
		return nil, errorf(driver.InvalidArgument, "watch: empty key")
	}
	var opts []clientv3.OpOption
	if version != "" {
		rev, ok := parseVersion(version)
		if !ok || rev == math.MaxInt64 {
			return nil, errorf(driver.InvalidArgument, "watch %q: version %q was not issued by an etcd store", key, version)
		}
		opts = append(opts, clientv3.WithRev(rev+1))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: watch %q: %w", key, store.ErrClosed)
	}
	s.watches.Add(1)
	s.mu.Unlock()

	// Without require-leader, a watch on a member cut off from its
	// cluster would wait silently; with it, the member ends the watch.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(s.ctx, cancel)
	wch := s.client.Watch(wctx, s.prefix+key, opts...)
	out := make(chan driver.WatchEvent)
	go func() {
		defer s.watches.Done()
		defer close(out)
		defer stop()
		defer cancel() // ends the server-side watch when we stop early
		for resp := range wch {
			if resp.Canceled || resp.Err() != nil {
				return
			}
			for _, ev := range resp.Events {
				e := driver.WatchEvent{Version: formatVersion(ev.Kv.ModRevision)}
				if ev.Type == clientv3.EventTypeDelete {
					e.Deleted = true
				} else {
					e.Data = ev.Kv.Value
					if e.Data == nil {
						e.Data = []byte{}
					}
				}
				select {
				case out <- e:
				case <-wctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
