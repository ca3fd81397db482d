package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/tenure-io/tenure/internal/notify"
	"github.com/tenure-io/tenure/store"
)

// Errors returned by the Coordinator.
var (
	ErrAlreadyStarted = errors.New("lease: already started")
	ErrStopped        = errors.New("lease: stopped")
	ErrUnknownShard   = errors.New("lease: unknown shard")
	// ErrDuplicateOwner is reported when another live process uses this
	// OwnerID. Ownership is decided by session, so the two never act on one
	// shard at once; in MemberLeases mode the later process stays idle
	// until the other dies.
	ErrDuplicateOwner = errors.New("lease: another process uses this OwnerID")
	// ErrForeignRecord is reported when the object where a member record
	// or the assignment record belongs is another kind of record (an
	// election lock, a replicated state machine group's leader_state.json,
	// a record of a kind this version does not know, another program's
	// JSON). A member never writes over it, never evicts it and never
	// counts it as a member.
	ErrForeignRecord = errors.New("lease: the object is another kind of record")
)

// Coordinator holds leases on many shards for one member. It is safe for
// concurrent use.
type Coordinator struct {
	cfg  Config
	log  *slog.Logger
	impl modeImpl
	// metrics is nil without a Registerer.
	metrics *metrics

	mu        sync.Mutex
	started   bool
	cancelRun context.CancelFunc
	runDone   chan struct{}
	runErr    error
	notes     *notify.Queue // started by Start: a coordinator never started has no goroutine
}

// modeImpl is one way of keeping shard ownership in the store.
type modeImpl interface {
	run(ctx context.Context) error
	isLeader(shard string) bool
	known(shard string) bool
	term(shard string) uint64
	held() []string
	add(shard string)
	remove(shard string)
	status() Status
}

// Status is a snapshot of a coordinator's view.
type Status struct {
	OwnerID string   `json:"ownerID"`
	Session string   `json:"session,omitempty"`
	Mode    string   `json:"mode"`
	Held    []string `json:"held"`
	// Shards is every shard this member knows of.
	Shards []string `json:"shards"`
	// Members are the live members this member sees (MemberLeases mode).
	Members   []string `json:"members,omitempty"`
	Epoch     uint64   `json:"epoch,omitempty"`
	LastError string   `json:"lastError,omitempty"`
}

// New returns a Coordinator for cfg. It validates the configuration and
// does not touch the store until Start.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Coordinator{cfg: cfg, log: cfg.Logger.With("prefix", cfg.Prefix, "owner", cfg.OwnerID)}
	switch cfg.Mode {
	case MemberLeases:
		c.impl = newMemberMode(c)
	default:
		c.impl = newShardMode(c)
	}
	if cfg.Registerer != nil {
		m, err := registerMetrics(cfg.Registerer, c)
		if err != nil {
			return nil, err
		}
		c.metrics = m
	}
	return c, nil
}

// Start runs the coordinator until Stop is called or ctx ends. It first
// checks that the store enforces conditional writes.
func (c *Coordinator) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		done := c.runDone
		c.mu.Unlock()
		select {
		case <-done:
			return ErrStopped
		default:
			return ErrAlreadyStarted
		}
	}
	c.started = true
	c.runDone = make(chan struct{})
	c.notes = notify.New(c.log)
	ctx, cancel := context.WithCancel(ctx)
	c.cancelRun = cancel
	c.mu.Unlock()
	if _, err := store.Probe(ctx, c.cfg.Store, 1); errors.Is(err, store.ErrConditionsIgnored) {
		cancel()
		c.finish(err)
		return err
	} else if err != nil {
		c.log.Warn("store probe failed; continuing", "err", err)
	}
	go func() { c.finish(c.impl.run(ctx)) }()
	return nil
}

func (c *Coordinator) finish(err error) {
	c.notes.Close()
	c.mu.Lock()
	c.runErr = err
	c.mu.Unlock()
	close(c.runDone)
}

// running reports whether Start was called and the run has not ended.
func (c *Coordinator) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.runDone == nil {
		return false
	}
	select {
	case <-c.runDone:
		return false
	default:
		return true
	}
}

// Stop ends every lease: it cancels the shards' contexts, waits for
// OnStartedLeading to return, releases, and returns. If ctx ends first,
// Stop returns ctx's error and the release goes on in the background.
// Stop is idempotent.
func (c *Coordinator) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.started = true
		c.runDone = make(chan struct{})
		close(c.runDone)
		c.mu.Unlock()
		return nil
	}
	cancel, done := c.cancelRun, c.runDone
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.runErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsLeader reports whether this member leads shard now, computed against
// its renew deadline at the moment of the call.
func (c *Coordinator) IsLeader(shard string) bool { return c.impl.isLeader(shard) }

// IsFollower reports whether shard is known and led by someone else (or
// by nobody yet).
func (c *Coordinator) IsFollower(shard string) bool {
	return c.impl.known(shard) && !c.impl.isLeader(shard)
}

// Term returns the shard's term (its fencing token) while this member
// leads it, else the last term it observed.
func (c *Coordinator) Term(shard string) uint64 { return c.impl.term(shard) }

// Held returns the sorted shards this member leads now.
func (c *Coordinator) Held() []string { return c.impl.held() }

// AddShard adds a shard while running (or before Start).
func (c *Coordinator) AddShard(shard string) error {
	if err := checkShardID(shard); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	c.impl.add(shard)
	return nil
}

// RemoveShard stops leading shard, releases it and forgets it.
func (c *Coordinator) RemoveShard(shard string) error {
	if !c.impl.known(shard) {
		return fmt.Errorf("%w %q", ErrUnknownShard, shard)
	}
	c.impl.remove(shard)
	return nil
}

// Status returns a snapshot of the coordinator's view.
func (c *Coordinator) Status() Status { return c.impl.status() }

// changed queues OnChange with the new held set.
func (c *Coordinator) changed(held []string) {
	if f := c.cfg.OnChange; f != nil {
		held = slices.Clone(held)
		c.notes.Add(func() { f(held) })
	}
}
