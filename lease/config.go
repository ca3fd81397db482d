package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/store"
)

// Mode selects how shard ownership is kept in the store.
type Mode int

const (
	// ShardLeases runs one election per shard: one lease record per shard,
	// renewed by its leader every RenewPeriod. Store requests grow with
	// the number of shards.
	ShardLeases Mode = iota
	// MemberLeases keeps one lease record per member and one assignment
	// record that maps shards to members, changed by compare-and-swap only
	// when membership or the set of shards changes. Store requests grow
	// with the number of members, not shards. Shards are spread so that no
	// member holds more than ceil(shards/members) while others are live.
	MemberLeases
)

func (m Mode) String() string {
	switch m {
	case ShardLeases:
		return "shard-leases"
	case MemberLeases:
		return "member-leases"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults, in shardcoordinator's "balanced" profile.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewPeriod   = 5 * time.Second
	DefaultPrefix        = "shards/"
)

// Config configures a Coordinator. Zero values mean the defaults;
// Validate refuses invalid values and never corrects them.
type Config struct {
	// Store holds the records. Required.
	Store *store.Store
	// Prefix is prepended to every key the coordinator writes. Members of
	// one shard group share it. Default "shards/". It ends with "/" and has
	// no empty, "." or ".." segment.
	Prefix string
	// ShardIDs are the shards this member starts with; more can be added
	// and removed while running. In MemberLeases mode the set is shared
	// through the assignment record.
	ShardIDs []string
	// OwnerID identifies this member. Default: the host name. It may hold
	// any characters, spaces included.
	OwnerID string
	// Mode: ShardLeases (default) or MemberLeases.
	Mode Mode
	// LeaseDuration: a holder is judged dead when its record has not
	// changed for this long on the observer's own monotonic clock, or for
	// the holder's own lease as its record states, if that is longer.
	// Default 15 s.
	LeaseDuration time.Duration
	// RenewPeriod: how often holders renew. Default 5 s. It must be below
	// two thirds of LeaseDuration; a third or a quarter is recommended.
	RenewPeriod time.Duration

	// OnStartedLeading runs in its own goroutine when this member starts
	// to lead shard at term (the fencing token). ctx is cancelled before
	// the lease can lapse; the coordinator waits for it to return before
	// the shard can be released.
	OnStartedLeading func(ctx context.Context, shard string, term uint64)
	// OnStoppedLeading is called after OnStartedLeading has returned.
	OnStoppedLeading func(shard string, term uint64)
	// OnChange is called, in order, with the sorted set of shards this
	// member leads each time it changes.
	OnChange func(held []string)

	// Registerer receives the coordinator's metrics (listed in the
	// package documentation), labelled by prefix and owner; Coordinators
	// on one Registerer share the families (New refuses a second running
	// one with the same Prefix and OwnerID: one would hide the other;
	// a stopped one's series are taken over). The store's requests are
	// counted by whoever opened Store (store.NewMetrics), and the
	// per-shard elections of ShardLeases mode export no election series.
	// Default nil: no metrics.
	Registerer prometheus.Registerer

	// Logger: default slog.Default(). Clock: default the system clock.
	Logger *slog.Logger
	Clock  election.Clock
}

// renewDeadline is how long after the start of the last successful
// renewal a holder keeps acting: two thirds of the lease, leaving a third
// as the margin for clock-rate drift and for the holder to stop.
func (c Config) renewDeadline() time.Duration { return c.LeaseDuration * 2 / 3 }

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.OwnerID == "" {
		if h, err := os.Hostname(); err == nil {
			c.OwnerID = h
		}
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewPeriod == 0 {
		c.RenewPeriod = DefaultRenewPeriod
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = errors.New("lease: invalid config")

// ValidationError names the fields Validate refused.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string {
	return "lease: invalid config: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidConfig }

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if c.Store == nil {
		bad("Store: required")
	}
	if c.OwnerID == "" || !utf8.ValidString(c.OwnerID) || len(c.OwnerID) > 200 || strings.ContainsFunc(c.OwnerID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		bad("OwnerID %q: must be valid UTF-8 of 1 to 200 bytes without control characters", c.OwnerID)
	}
	if !utf8.ValidString(c.Prefix) || len(c.Prefix) > 256 {
		bad("Prefix %q: must be valid UTF-8 of at most 256 bytes", c.Prefix)
	} else if err := store.CheckKeyPath(strings.TrimSuffix(c.Prefix, "/")); err != nil {
		bad("Prefix %q: %v", c.Prefix, err)
	} else if !strings.HasSuffix(c.Prefix, "/") {
		bad("Prefix %q: must end with \"/\" (keys are the prefix followed by \"assignment.json\", \"lock/SHARD\"…), e.g. %q", c.Prefix, c.Prefix+"/")
	}
	if c.Mode != ShardLeases && c.Mode != MemberLeases {
		bad("Mode %v: must be ShardLeases or MemberLeases", c.Mode)
	}
	for _, id := range c.ShardIDs {
		if err := checkShardID(id); err != nil {
			bad("ShardIDs: %v", err)
		}
	}
	switch {
	case c.LeaseDuration < 0 || c.RenewPeriod < 0:
		bad("LeaseDuration %v, RenewPeriod %v: must be positive", c.LeaseDuration, c.RenewPeriod)
	case c.RenewPeriod >= c.LeaseDuration:
		bad("RenewPeriod %v: must be below LeaseDuration %v; a holder renews several times per lease (LeaseDuration 3-4x RenewPeriod is recommended, e.g. 15s and 5s)", c.RenewPeriod, c.LeaseDuration)
	case c.RenewPeriod >= c.renewDeadline():
		bad("RenewPeriod %v: must be below two thirds of LeaseDuration (%v), so that a failed renewal can be retried before the holder must stop; LeaseDuration 3-4x RenewPeriod is recommended, e.g. 15s and 5s", c.RenewPeriod, c.renewDeadline())
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}

func checkShardID(id string) error {
	if id == "" || !utf8.ValidString(id) || len(id) > 512 || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("shard ID %q: must be valid UTF-8 of 1 to 512 bytes without control characters", id)
	}
	// The ID ends a key (PREFIX lock/ID): a "..", "." or empty segment
	// would name another object on some stores.
	if err := store.CheckKeyPath(id); err != nil {
		return fmt.Errorf("shard ID %q: %v", id, err)
	}
	return nil
}
