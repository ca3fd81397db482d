package etcdserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Watches are fed by the machine's applied stream (kv.Observer), which
// the hub fans out to every watcher in revision order. A watcher from a
// past revision catches up from the machine's history (ReadView.Events)
// up to the revision the hub had handed out when it registered, while
// the events after it wait in its buffer: no gap, no duplicate. Each gRPC
// stream has one queue, sent in order by the stream's handler, so a
// progress reply queued after events goes out after them.

// maxQueued is the most events a stream may have queued: a client that
// reads slower than the group writes loses its stream (Unavailable), and
// its etcd client resumes the watches from the revisions it has.
const maxQueued = 1 << 20

// historyChunk is the most events of a catch-up in one response.
const historyChunk = 1000

var (
	errLagging        = status.Error(codes.Unavailable, "etcdserver: watch stream fell behind the group's writes; resume the watches")
	errEmptyRange     = "mvcc: watcher range is empty"
	errDuplicateWatch = "mvcc: duplicate watch ID provided on the WatchStream"
)

// hub fans the applied events out to the watchers. It is safe for
// concurrent use. Lock order: hub.mu, then a stream's mu; never the
// node's (its apply holds them while it calls the observer).
type hub struct {
	s  *Server
	mu sync.Mutex
	// rev is the last revision whose events were handed out.
	rev int64
	// advanced is closed when rev advances or the hub closes, and then
	// replaced.
	advanced chan struct{}
	watchers map[*watcher]struct{}
	closed   bool
}

func newHub(s *Server) *hub {
	h := &hub{s: s, watchers: map[*watcher]struct{}{}, advanced: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	// An apply that comes between the two calls waits in observe for
	// h.mu, and finds its revision counted.
	s.m.SetObserver(h.observe)
	h.rev = s.m.ReadView().Revision()
	return h
}

// observe is the machine's observer: called in revision order, after
// the change, from the goroutine that applies. It never blocks for long.
func (h *hub) observe(rev int64, evs []*mvccpb.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if rev <= h.rev {
		// The state catching up again below what was handed out (a
		// deposed leader's, rebuilt from the store): waitApplied waits
		// for it.
		h.wake()
		return
	}
	if evs == nil {
		// A snapshot replaced the state (a catch-up): the revisions up
		// to rev come from its history.
		h.fill(rev)
		return
	}
	if rev > h.rev+1 {
		// Revisions this hub was not told of: they too are in the
		// history.
		h.fill(rev - 1)
	}
	h.deliver(evs)
	h.advance(rev)
}

// advance sets h.rev to rev and wakes waitRev. Under h.mu.
func (h *hub) advance(rev int64) {
	h.rev = rev
	h.wake()
}

// wake wakes waitRev and waitApplied. Under h.mu.
func (h *hub) wake() {
	close(h.advanced)
	h.advanced = make(chan struct{})
}

// handedOut is the last revision whose events the hub handed out.
func (h *hub) handedOut() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// waitApplied waits until the machine's state is at revision rev or
// later, or ctx ends or the hub closes, and reports whether it is. The
// state can be below what the hub handed out: a deposed leader empties
// its state and applies the group's log again.
func (h *hub) waitApplied(ctx context.Context, rev int64) bool {
	for {
		h.mu.Lock()
		closed, ch := h.closed, h.advanced
		h.mu.Unlock()
		// Read after taking ch: an apply after the read closes it.
		if apiRev(h.s.m.ReadView()) >= rev {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// waitRev waits until the hub has handed out revision rev, or ctx ends
// or the hub closes: from then on, a watch from now starts after rev,
// and the machine's reads see it. Revision 1 is a new group's, before
// any etcd write (apiRev): every node has it from the start, so a wait
// for it returns at once. It reports whether the hub has handed out rev.
func (h *hub) waitRev(ctx context.Context, rev int64) bool {
	for {
		h.mu.Lock()
		reached, closed, ch := max(h.rev, 1) >= rev, h.closed, h.advanced
		h.mu.Unlock()
		if reached || closed {
			return reached
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// fill hands out the events after h.rev up to to from the machine's
// history. Under h.mu.
func (h *hub) fill(to int64) {
	view := h.s.m.ReadView()
	evs, err := view.Events([]byte{0}, []byte{0}, h.rev+1)
	if err != nil {
		// Compacted away: the watches cannot go on without a gap. Their
		// clients resume them, and learn of the compaction then.
		for w := range h.watchers {
			w.st.fail(errLagging)
		}
	} else {
		n := 0
		for n < len(evs) && evs[n].Kv.ModRevision <= to {
			n++
		}
		h.deliver(evs[:n])
	}
	h.advance(to)
}

// deliver offers evs to every watcher. Under h.mu.
func (h *hub) deliver(evs []*mvccpb.Event) {
	if len(evs) == 0 {
		return
	}
	for w := range h.watchers {
		w.offer(evs)
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	close(h.advanced)
	h.advanced = make(chan struct{})
	for w := range h.watchers {
		w.st.fail(rpctypes.ErrGRPCStopped)
	}
	clear(h.watchers)
}

// watcher is one watch of a stream. Its fields after id are set at
// creation; synced and buf are guarded by hub.mu.
type watcher struct {
	st       *watchStream
	id       int64
	key, end []byte
	// minRev is the first revision the watch reports.
	minRev          int64
	prevKV          bool
	noPut, noDelete bool
	fragment        bool
	synced          bool
	buf             []*mvccpb.Event
}

func (w *watcher) match(key []byte) bool {
	switch {
	case len(w.end) == 0:
		return bytes.Equal(key, w.key)
	case len(w.end) == 1 && w.end[0] == 0:
		return bytes.Compare(key, w.key) >= 0
	}
	return bytes.Compare(key, w.key) >= 0 && bytes.Compare(key, w.end) < 0
}

// pick returns the events of evs the watch reports, shaped for it.
func (w *watcher) pick(evs []*mvccpb.Event) []*mvccpb.Event {
	var out []*mvccpb.Event
	for _, ev := range evs {
		if ev.Kv.ModRevision < w.minRev || !w.match(ev.Kv.Key) ||
			(w.noPut && ev.Type == mvccpb.PUT) || (w.noDelete && ev.Type == mvccpb.DELETE) {
			continue
		}
		if !w.prevKV && ev.PrevKv != nil {
			ev = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv} // events are shared between watchers
		}
		out = append(out, ev)
	}
	return out
}

// offer takes the live events the watch reports: queued, or buffered
// while it catches up. Under hub.mu.
func (w *watcher) offer(evs []*mvccpb.Event) {
	out := w.pick(evs)
	if len(out) == 0 {
		return
	}
	if !w.synced {
		w.buf = append(w.buf, out...)
		if len(w.buf) > maxQueued {
			w.st.fail(errLagging)
		}
		return
	}
	w.st.mu.Lock()
	w.st.queueEvents(w, out)
	w.st.mu.Unlock()
}

// queued is a response waiting to be sent; fragment: its watch asked
// for large responses to be split.
type queued struct {
	resp     *pb.WatchResponse
	fragment bool
}

// watchStream is one Watch call: its watchers and its queue.
type watchStream struct {
	s      *Server
	srv    pb.Watch_WatchServer
	ctx    context.Context
	cancel context.CancelCauseFunc
	wake   chan struct{}

	mu       sync.Mutex
	queue    []queued
	pending  int
	watchers map[int64]*watcher
	nextID   int64
	// sent marks the watches that had events since the last progress
	// tick; deferred, a progress request waiting for every watch to
	// catch up.
	sent     map[int64]bool
	deferred bool
	failed   bool
}

type watchService struct {
	pb.UnimplementedWatchServer
	s *Server
}

func (ws *watchService) Watch(srv pb.Watch_WatchServer) error {
	s := ws.s
	// A node that has not caught up would report progress at a
	// revision below one the client had: its clients turn to another
	// endpoint meanwhile.
	if err := s.current(srv.Context()); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(srv.Context())
	defer cancel(nil)
	st := &watchStream{s: s, srv: srv, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		watchers: map[int64]*watcher{}, sent: map[int64]bool{}}
	stop := context.AfterFunc(s.ctx, func() { st.fail(rpctypes.ErrGRPCStopped) })
	defer stop()
	defer st.unregister()
	// The receiving goroutine ends when the call does: Recv returns then.
	receiving := s.goTracked(func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				cancel(err)
				return
			}
			st.handle(req)
		}
	})
	if !receiving {
		return rpctypes.ErrGRPCStopped
	}
	var tick <-chan time.Time
	if s.progress > 0 {
		t := time.NewTicker(s.progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		st.mu.Lock()
		q := st.queue
		st.queue, st.pending = nil, 0
		st.mu.Unlock()
		for _, it := range q {
			if err := st.send(it); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		case <-st.wake:
		case <-tick:
			st.progressTick()
		}
	}
}

// fail ends the stream with err.
func (st *watchStream) fail(err error) {
	st.mu.Lock()
	st.failed = true
	st.mu.Unlock()
	st.cancel(err)
}

func (st *watchStream) unregister() {
	h := st.s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range st.watchers {
		delete(h.watchers, w)
	}
	clear(st.watchers)
}

// enqueue queues resp. Under st.mu.
func (st *watchStream) enqueue(resp *pb.WatchResponse, fragment bool) {
	if st.failed {
		return
	}
	st.queue = append(st.queue, queued{resp, fragment})
	st.pending += len(resp.Events)
	if st.pending > maxQueued {
		st.failed = true
		st.cancel(errLagging)
		return
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// queueEvents queues events of w, all of them after its last. Under
// st.mu.
func (st *watchStream) queueEvents(w *watcher, evs []*mvccpb.Event) {
	rev := evs[len(evs)-1].Kv.ModRevision
	st.enqueue(&pb.WatchResponse{Header: st.s.cachedHeader(rev), WatchId: w.id, Events: evs}, w.fragment)
	st.sent[w.id] = true
}

// send sends one queued response, split in fragments if its watch asked
// for them and it is large.
func (st *watchStream) send(it queued) error {
	r := it.resp
	limit := st.s.fragment
	if !it.fragment || len(r.Events) <= 1 || proto.Size(r) <= limit {
		return st.srv.Send(r)
	}
	var chunk []*mvccpb.Event
	size := 0
	for _, ev := range r.Events {
		n := proto.Size(ev)
		if len(chunk) > 0 && size+n > limit {
			if err := st.srv.Send(&pb.WatchResponse{Header: r.Header, WatchId: r.WatchId, Events: chunk, Fragment: true}); err != nil {
				return err
			}
			chunk, size = nil, 0
		}
		chunk = append(chunk, ev)
		size += n
	}
	return st.srv.Send(&pb.WatchResponse{Header: r.Header, WatchId: r.WatchId, Events: chunk})
}

func (st *watchStream) handle(req *pb.WatchRequest) {
	switch r := req.RequestUnion.(type) {
	case *pb.WatchRequest_CreateRequest:
		if r.CreateRequest != nil {
			st.create(r.CreateRequest)
		}
	case *pb.WatchRequest_CancelRequest:
		if r.CancelRequest != nil {
			st.cancelWatch(r.CancelRequest.WatchId)
		}
	case *pb.WatchRequest_ProgressRequest:
		st.requestProgress()
	}
}

func (st *watchStream) create(cr *pb.WatchCreateRequest) {
	s, h := st.s, st.s.hub
	hdr := s.headerFunc()
	w := &watcher{st: st, key: cr.Key, end: cr.RangeEnd, prevKV: cr.PrevKv, fragment: cr.Fragment}
	if len(w.key) == 0 {
		w.key = []byte{0} // etcd's: an empty key is the first key
	}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	h.mu.Lock()
	st.mu.Lock()
	R := h.rev
	refuse := func(reason string) {
		st.enqueue(&pb.WatchResponse{Header: hdr(max(R, 1)), WatchId: -1, Created: true, Canceled: true, CancelReason: reason}, false)
		st.mu.Unlock()
		h.mu.Unlock()
	}
	if !(len(w.end) == 1 && w.end[0] == 0) && len(w.end) > 0 && bytes.Compare(w.key, w.end) >= 0 {
		refuse(errEmptyRange)
		return
	}
	if cr.StartRevision < 0 {
		// etcd 3.7 refuses a negative start as compacted away.
		refuse(rpctypes.ErrCompacted.Error())
		return
	}
	id := cr.WatchId
	if id != 0 {
		if st.watchers[id] != nil {
			refuse(errDuplicateWatch)
			return
		}
	} else {
		for st.watchers[st.nextID] != nil {
			st.nextID++
		}
		id = st.nextID
		st.nextID++
	}
	w.id = id
	w.minRev = cr.StartRevision
	if w.minRev <= 0 {
		w.minRev = R + 1
	}
	history := w.minRev <= R
	w.synced = !history
	if !h.closed {
		h.watchers[w] = struct{}{}
	}
	st.watchers[id] = w
	st.enqueue(&pb.WatchResponse{Header: hdr(max(R, 1)), WatchId: id, Created: true}, false)
	st.mu.Unlock()
	h.mu.Unlock()
	if history {
		st.catchUp(w, R, hdr)
	}
}

// catchUp queues w's events from its start revision to R from the
// machine's history, then those its buffer took meanwhile, and marks it
// synced. A start before the compact revision cancels the watch with
// CompactRevision set, as etcd does.
func (st *watchStream) catchUp(w *watcher, R int64, hdr func(int64) *pb.ResponseHeader) {
	h := st.s.hub
	if !h.waitApplied(st.ctx, R) {
		// The state fell below R (a deposed leader's, applied again)
		// and did not come back before the stream ended.
		st.fail(rpctypes.ErrGRPCStopped)
		return
	}
	view := st.s.m.ReadView()
	evs, err := view.Events(w.key, w.end, w.minRev)
	if err != nil {
		h.mu.Lock()
		st.mu.Lock()
		delete(h.watchers, w)
		if st.watchers[w.id] == w {
			delete(st.watchers, w.id)
			// etcd's header has revision 0 here.
			st.enqueue(&pb.WatchResponse{Header: hdr(0), WatchId: w.id, CompactRevision: view.CompactRevision(), Canceled: true}, false)
		}
		st.mu.Unlock()
		h.mu.Unlock()
		return
	}
	n := 0
	for n < len(evs) && evs[n].Kv.ModRevision <= R {
		n++
	}
	out := w.pick(evs[:n])
	st.mu.Lock()
	for len(out) > 0 && st.watchers[w.id] == w {
		k := min(len(out), historyChunk)
		st.queueEvents(w, out[:k])
		out = out[k:]
	}
	st.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.watchers[w.id] != w {
		return // cancelled meanwhile
	}
	if len(w.buf) > 0 {
		st.queueEvents(w, w.buf)
	}
	w.buf, w.synced = nil, true
	if st.deferred && st.allSynced() {
		st.deferred = false
		st.enqueue(&pb.WatchResponse{Header: st.s.cachedHeader(h.rev), WatchId: -1}, false)
	}
}

// allSynced: every watch of the stream has caught up. Under hub.mu and
// st.mu.
func (st *watchStream) allSynced() bool {
	for _, w := range st.watchers {
		if !w.synced {
			return false
		}
	}
	return true
}

func (st *watchStream) cancelWatch(id int64) {
	h := st.s.hub
	hdr := st.s.headerFunc()
	h.mu.Lock()
	defer h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	w := st.watchers[id]
	if w == nil {
		return
	}
	delete(h.watchers, w)
	delete(st.watchers, id)
	delete(st.sent, id)
	st.enqueue(&pb.WatchResponse{Header: hdr(max(h.rev, 1)), WatchId: id, Canceled: true}, false)
	if st.deferred && st.allSynced() {
		st.deferred = false
		st.enqueue(&pb.WatchResponse{Header: hdr(max(h.rev, 1)), WatchId: -1}, false)
	}
}

// requestProgress answers a progress request with watch ID -1 and the
// revision every watch has reached: at once if they have all caught up
// (every earlier event is queued before it), else once they have.
func (st *watchStream) requestProgress() {
	h := st.s.hub
	hdr := st.s.headerFunc()
	h.mu.Lock()
	defer h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.allSynced() {
		st.deferred = true
		return
	}
	st.enqueue(&pb.WatchResponse{Header: hdr(max(h.rev, 1)), WatchId: -1}, false)
}

// progressTick sends a progress notification to every caught-up watch
// that had no events since the last tick, as etcd does.
func (st *watchStream) progressTick() {
	h := st.s.hub
	hdr := st.s.headerFunc()
	h.mu.Lock()
	defer h.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, w := range st.watchers {
		if w.synced && !st.sent[id] {
			st.enqueue(&pb.WatchResponse{Header: hdr(max(h.rev, 1)), WatchId: id}, false)
		}
		st.sent[id] = false
	}
}
