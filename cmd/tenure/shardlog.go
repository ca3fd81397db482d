package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// shardLogHandler keeps tenure shards' logs readable at a thousand shards.
// The per-shard election loggers (those carrying a "shard" attribute,
// one per shard in shard mode) log their INFO lines at DEBUG: the held
// set tenure shards prints says the same in one line. Each of their WARN
// and ERROR messages is logged at most once per interval, with how many
// lines like it were left out since. The coordinator's own lines, already
// one per change of the group, pass as they are.
type shardLogHandler struct {
	slog.Handler
	perShard bool
	lim      *logLimiter
}

func newShardLogHandler(h slog.Handler, interval time.Duration) *shardLogHandler {
	return &shardLogHandler{Handler: h, lim: &logLimiter{interval: interval, last: map[string]time.Time{}, left: map[string]int{}}}
}

func (h *shardLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	if h.perShard && level >= slog.LevelInfo && level < slog.LevelWarn {
		level = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, level)
}

func (h *shardLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.perShard {
		switch {
		case r.Level >= slog.LevelWarn:
			left, ok := h.lim.allow(r.Message, r.Time)
			if !ok {
				return nil
			}
			if left > 0 {
				r = r.Clone()
				r.AddAttrs(slog.Int("similarLinesLeftOut", left))
			}
		case r.Level >= slog.LevelInfo:
			r.Level = slog.LevelDebug
			if !h.Handler.Enabled(ctx, r.Level) {
				return nil
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *shardLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithAttrs(attrs)
	for _, a := range attrs {
		c.perShard = c.perShard || a.Key == "shard"
	}
	return &c
}

func (h *shardLogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithGroup(name)
	return &c
}

// logLimiter lets each message through at most once per interval,
// counting the lines it left out. It is safe for concurrent use.
type logLimiter struct {
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	left     map[string]int
}

// allow reports whether a line with msg, at time now, is logged, and how
// many lines with msg were left out before it.
func (l *logLimiter) allow(msg string, now time.Time) (left int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, seen := l.last[msg]; seen && now.Sub(last) < l.interval {
		l.left[msg]++
		return 0, false
	}
	left = l.left[msg]
	l.last[msg] = now
	delete(l.left, msg)
	return left, true
}

// heldPrinter prints the shards a member leads at most once per interval:
// at a thousand shards, each one's election starts on its own, and one
// line per shard would bury the picture. The last set is always printed.
// It is safe for concurrent use.
type heldPrinter struct {
	interval time.Duration
	print    func(held []string)

	mu      sync.Mutex
	pending []string
	have    bool
	last    time.Time
	timer   *time.Timer
}

func (p *heldPrinter) change(held []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending, p.have = held, true
	if p.timer != nil {
		return // the print scheduled prints this set
	}
	wait := p.interval - time.Since(p.last)
	if wait <= 0 {
		p.flushLocked()
		return
	}
	p.timer = time.AfterFunc(wait, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.timer == nil {
			return // flushed by stop
		}
		p.timer = nil
		p.flushLocked()
	})
}

// flush prints the set not yet printed, if any, at once.
func (p *heldPrinter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.flushLocked()
}

func (p *heldPrinter) flushLocked() {
	if p.have {
		p.print(p.pending)
		p.have, p.last = false, time.Now()
	}
}
