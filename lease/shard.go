package lease

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tenure-io/tenure/election"
)

// shardMode runs one election per shard, all sharing the coordinator's
// store.
type shardMode struct {
	c *Coordinator

	mu      sync.Mutex
	shards  map[string]*shardElection
	running bool
	ctx     context.Context
	wg      sync.WaitGroup
	heldSet map[string]bool
	terms   map[string]uint64 // shard -> the term of its latest leadership
}

type shardElection struct {
	e      *election.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func newShardMode(c *Coordinator) *shardMode {
	m := &shardMode{c: c, shards: map[string]*shardElection{}, heldSet: map[string]bool{}, terms: map[string]uint64{}}
	for _, id := range c.cfg.ShardIDs {
		m.shards[id] = nil
	}
	return m
}

func (m *shardMode) lockKey(shard string) string { return m.c.cfg.Prefix + "lock/" + shard }

// electionConfig maps the lease timings onto an election: renew every
// RenewPeriod, fence at two thirds of the lease, followers take over after
// a lease of unchanged record, and poll every 6 renew periods when stable.
func (m *shardMode) electionConfig(shard string) election.Config {
	cfg := m.c.cfg
	return election.Config{
		Store:              cfg.Store,
		LockfilePath:       m.lockKey(shard),
		ServerID:           cfg.OwnerID,
		FrequentInterval:   cfg.RenewPeriod,
		InfrequentInterval: 6 * cfg.RenewPeriod,
		LeaderTimeout:      cfg.LeaseDuration,
		RenewDeadline:      cfg.renewDeadline(),
		RetrySchedule:      []time.Duration{0, cfg.RenewPeriod / 50, cfg.RenewPeriod / 5},
		PeerTimeout:        cfg.RenewPeriod / 2,
		SkipProbe:          true,
		Logger:             m.c.log.With("shard", shard),
		Clock:              cfg.Clock,
		OnStartedLeading: func(ctx context.Context) {
			m.setHeld(shard, true)
			term, _ := election.TermOf(ctx)
			m.setTerm(shard, term)
			if f := cfg.OnStartedLeading; f != nil {
				f(ctx, shard, term)
			}
			<-ctx.Done()
		},
		OnStoppedLeading: func() {
			m.setHeld(shard, false)
			if f := cfg.OnStoppedLeading; f != nil {
				f(shard, m.lastTerm(shard))
			}
		},
	}
}

func (m *shardMode) setTerm(shard string, term uint64) {
	m.mu.Lock()
	m.terms[shard] = term
	m.mu.Unlock()
}

func (m *shardMode) lastTerm(shard string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.terms[shard]
}

func (m *shardMode) termOf(shard string) uint64 {
	m.mu.Lock()
	se := m.shards[shard]
	m.mu.Unlock()
	if se == nil {
		return 0
	}
	return se.e.Term()
}

func (m *shardMode) setHeld(shard string, held bool) {
	m.mu.Lock()
	if m.heldSet[shard] == held {
		m.mu.Unlock()
		return
	}
	if held {
		m.heldSet[shard] = true
	} else {
		delete(m.heldSet, shard)
	}
	m.c.metrics.leading(held)
	set := make([]string, 0, len(m.heldSet))
	for s := range m.heldSet {
		set = append(set, s)
	}
	m.mu.Unlock()
	sort.Strings(set)
	m.c.changed(set)
}

// start launches shard's election; the caller holds m.mu.
func (m *shardMode) start(shard string) {
	e, err := election.New(m.ctx, m.electionConfig(shard))
	if err != nil {
		// The configuration was validated as a whole; a shard ID that
		// makes a bad key is refused by the store on first use.
		m.c.log.Error("cannot run the shard's election", "shard", shard, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	se := &shardElection{e: e, cancel: cancel, done: make(chan struct{})}
	m.shards[shard] = se
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(se.done)
		if err := e.Run(ctx); err != nil {
			m.c.log.Error("shard election ended", "shard", shard, "err", err)
		}
	}()
}

func (m *shardMode) run(ctx context.Context) error {
	m.mu.Lock()
	m.ctx, m.running = ctx, true
	for id := range m.shards {
		m.start(id)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.running = false
	m.mu.Unlock()
	// Every election sees the same cancellation and releases its lock.
	m.wg.Wait()
	return nil
}

func (m *shardMode) isLeader(shard string) bool {
	m.mu.Lock()
	se := m.shards[shard]
	m.mu.Unlock()
	return se != nil && se.e.IsLeader()
}

func (m *shardMode) known(shard string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.shards[shard]
	return ok
}

func (m *shardMode) term(shard string) uint64 { return m.termOf(shard) }

func (m *shardMode) held() []string {
	m.mu.Lock()
	ids := make([]string, 0, len(m.shards))
	ses := make([]*shardElection, 0, len(m.shards))
	for id, se := range m.shards {
		ids = append(ids, id)
		ses = append(ses, se)
	}
	m.mu.Unlock()
	var out []string
	for i, se := range ses {
		if se != nil && se.e.IsLeader() {
			out = append(out, ids[i])
		}
	}
	slices.Sort(out)
	return out
}

func (m *shardMode) add(shard string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.shards[shard]; ok {
		return
	}
	m.shards[shard] = nil
	if m.running {
		m.start(shard)
	}
}

func (m *shardMode) remove(shard string) {
	m.mu.Lock()
	se := m.shards[shard]
	delete(m.shards, shard)
	m.mu.Unlock()
	if se != nil {
		se.cancel()
		<-se.done
	}
}

func (m *shardMode) status() Status {
	m.mu.Lock()
	shards := make([]string, 0, len(m.shards))
	for id := range m.shards {
		shards = append(shards, id)
	}
	m.mu.Unlock()
	sort.Strings(shards)
	return Status{OwnerID: m.c.cfg.OwnerID, Mode: ShardLeases.String(), Held: m.held(), Shards: shards}
}
