package election

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/internal/clock"
	"github.com/tenure-io/tenure/store"
)

// Defaults, as S3lect names and sets them, plus RenewDeadline.
const (
	DefaultLockfilePath       = "leader.json"
	DefaultFrequentInterval   = 5 * time.Second
	DefaultInfrequentInterval = 30 * time.Second
	DefaultLeaderTimeout      = 15 * time.Second
	DefaultRenewDeadline      = 10 * time.Second
	DefaultPeerHealthPath     = "/health/leadership"
	DefaultPeerTimeout        = 3 * time.Second
)

// DefaultRetrySchedule is S3lect's: at once, after 100 ms, after 1 s.
var DefaultRetrySchedule = []time.Duration{0, 100 * time.Millisecond, time.Second}

// Clock is the time source; see package internal/clock. Only differences of
// Now are used for decisions; Wall only fills Record.LastUpdated.
type Clock = clock.Clock

// Config configures an Elector. Zero values mean the defaults; Validate
// refuses invalid values and never corrects them.
type Config struct {
	// Store holds the lock record. If nil, StoreURL is opened.
	Store *store.Store
	// StoreURL names the store when Store is nil, e.g.
	// "s3://bucket/prefix?region=eu-west-1" or "file:///var/lib/tenure".
	// A URL without a scheme is refused: write "s3://bucket/prefix" for a
	// bucket, "file:///path" for a directory.
	StoreURL string

	// LockfilePath is the key of the lock record. Default "leader.json".
	LockfilePath string
	// LockURL names the store and the lock's key in one URL, as the tenure
	// CLI's --lock does, e.g. "s3://bucket/prefix/leader.json" or
	// "file:///var/lib/tenure//jobs/leader.json" (the key after "//" may
	// hold "/"); see store.SplitKeyURL. Set it instead of StoreURL and
	// LockfilePath, not with them or with Store.
	LockURL string
	// ServerID identifies this member. Default: the host name.
	ServerID string
	// ServerAddr is this member's host:port for peers. Setting it turns
	// peer mode on (see PeerMode) unless PeerDisabled is set.
	ServerAddr string

	// FrequentInterval is the polling interval during transitions, and the
	// leader's renewal interval: it renews this long after the start of its
	// last renewal. Default 5 s, or RenewDeadline/2 if that is less.
	FrequentInterval time.Duration
	// InfrequentInterval is the longest pause between a follower's reads
	// while leadership is stable; a polling follower also reads at least
	// four times per holder's lease (every 3.75 s at the defaults), so that
	// a crashed leader is replaced within the lease and one poll. It also
	// bounds a peer long-poll. Default 30 s, or FrequentInterval if that
	// is more.
	InfrequentInterval time.Duration
	// LeaderTimeout is this member's lease: it is written in the records
	// it writes (leaseMillis), and a follower takes the lock when the
	// record's version has not changed, on the follower's own clock, for the
	// holder's lease or its own LeaderTimeout, whichever is longer. Members
	// may thus run different settings (during a rolling change, say):
	// the holder's lease always wins. Default 15 s.
	LeaderTimeout time.Duration
	// RenewDeadline: the leader stops acting when this long has passed
	// since the start of its last successful renewal. It must be below
	// LeaderTimeout by at least a tenth of LeaderTimeout, the margin for
	// clock-rate drift. Default two thirds of LeaderTimeout (10 s).
	RenewDeadline time.Duration
	// RetrySchedule is the pause before each attempt of a store call:
	// default at once, 100 ms, 1 s; each pause gets RetryJitter.
	RetrySchedule []time.Duration
	// RetryJitter is the fraction of random spread on every timer. Default 0.2.
	RetryJitter float64

	// Priority makes this member preferred as leader: a live member whose
	// priority is higher than the leader's asks it to hand over (a field
	// in the lock record, which the leader finds at its next renewal); the
	// leader's work is cancelled and, once it has returned, the leader
	// releases the lock to that member. Equal priorities never hand over.
	// Default 0.
	Priority int

	// PeerMode: followers ask the leader over HTTPS instead of reading the
	// store while leadership is stable. Peer mode is on whenever ServerAddr
	// is set and PeerDisabled is not: each member then listens on
	// PeerListenAddr and, without PeerServerTLS, makes an ephemeral key and
	// certificate whose fingerprint the leader writes in the lock record
	// (Record.PeerKey); followers accept only a leader with that key.
	// Setting PeerMode requires peer mode: Validate refuses it without
	// ServerAddr or with PeerDisabled, and Run fails if the peer server
	// cannot listen (without it, Run logs a warning and runs store-only).
	PeerMode bool
	// PeerDisabled turns peer mode off though ServerAddr is set: for
	// members whose ServerAddr is only shown to others (in the record and
	// OnNewLeader), or whose peers cannot reach them. Default false.
	PeerDisabled bool
	// PeerHealthPath is the leader's peer endpoint. Default "/health/leadership".
	PeerHealthPath string
	// PeerTimeout bounds each peer request; in peer mode it must be below
	// LeaderTimeout. Default 3 s.
	PeerTimeout time.Duration
	// PeerListenAddr is where the peer server listens. Default ServerAddr.
	PeerListenAddr string
	// PeerServerTLS is the peer server's TLS configuration (certificate;
	// ClientCAs and ClientAuth to require client certificates). Default: an
	// ephemeral self-signed certificate, made at start, whose key the
	// record names. A configured single certificate's key is written in
	// the record too, so followers without PeerClientTLS can check it.
	PeerServerTLS *tls.Config
	// PeerClientTLS is the followers' TLS configuration (RootCAs; a client
	// certificate if the server requires one). When set, it alone decides
	// which leaders are trusted, and followers ask any leader with an
	// address. Default: accept a leader only by the key its record names,
	// and ask only leaders whose record names one (with PeerMode set, a
	// leader whose record names none is checked against the system roots).
	PeerClientTLS *tls.Config

	// OnStartedLeading runs in its own goroutine when this member becomes
	// leader. ctx is cancelled before the lease can lapse; the function
	// must return soon after. No new term starts, and the lock is never
	// released, until it has returned. If it has not returned LeaderTimeout
	// after ctx was cancelled, Run stops waiting and returns
	// ErrWorkStillRunning without releasing the lock (it lapses after the
	// lease, as after a crash); the function is left running.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called, on the same goroutine, after
	// OnStartedLeading has returned and leadership has ended. It counts as
	// part of the term's work: the same wait and bound apply.
	OnStoppedLeading func()
	// OnNewLeader is called, in order, each time a different leader or term
	// is observed, including this member's own. The calls run on a
	// goroutine of their own, so a slow one never delays the election or
	// Stop; Run gives calls still queued a second when it ends, then drops
	// them and leaves one that blocks to finish on its own.
	OnNewLeader func(leaderID, leaderAddr string, term uint64)

	// SkipProbe skips the check, at the start of Run, that the store
	// enforces conditional writes. Set it only when the caller has probed
	// the store itself (the lease package probes once for all its shards).
	SkipProbe bool

	// Registerer receives the elector's metrics (listed in the package
	// documentation). Electors on one Registerer share the families, each
	// with its own series labelled by lock (LockfilePath) and id
	// (ServerID); a later Elector with the same lock and ServerID takes
	// the series over once the earlier one has stopped (New refuses it
	// while the earlier one runs). When the elector opens its store from StoreURL or
	// LockURL, the store's calls are counted there too (store.Metrics,
	// without const labels); a Store passed in is counted by whoever opened
	// it. Default nil: no metrics.
	Registerer prometheus.Registerer

	// Logger receives transitions and errors. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Default the system clock.
	Clock Clock
}

// ValidationError names the fields Validate refused.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return "election: invalid config: " + strings.Join(e.Problems, "; ")
}

// withDefaults returns a copy with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.LockURL != "" && c.Store == nil && c.StoreURL == "" && c.LockfilePath == "" {
		// Validate reports a LockURL that does not split.
		c.StoreURL, c.LockfilePath, _ = store.SplitKeyURL(c.LockURL)
	}
	if c.LockfilePath == "" {
		c.LockfilePath = DefaultLockfilePath
	}
	if c.ServerID == "" {
		if h, err := os.Hostname(); err == nil {
			c.ServerID = h
		}
	}
	// Timings left zero follow the ones set, so that setting LeaderTimeout
	// alone gives a valid configuration; at LeaderTimeout's default they
	// are the documented defaults (15 s, 10 s, 5 s, 30 s).
	if c.LeaderTimeout == 0 {
		c.LeaderTimeout = DefaultLeaderTimeout
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = c.LeaderTimeout * 2 / 3
	}
	if c.FrequentInterval == 0 {
		c.FrequentInterval = min(DefaultFrequentInterval, c.RenewDeadline/2)
	}
	if c.InfrequentInterval == 0 {
		c.InfrequentInterval = max(DefaultInfrequentInterval, c.FrequentInterval)
	}
	if c.RetrySchedule == nil {
		c.RetrySchedule = DefaultRetrySchedule
	}
	if c.RetryJitter == 0 {
		c.RetryJitter = 0.2
	}
	if c.PeerHealthPath == "" {
		c.PeerHealthPath = DefaultPeerHealthPath
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.PeerListenAddr == "" {
		c.PeerListenAddr = c.ServerAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate checks the configuration after defaults are applied and names
// every field it refuses.
func (c Config) Validate() error {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if c.LockURL != "" {
		if c.Store != nil || c.StoreURL != "" || c.LockfilePath != "" {
			bad("LockURL: names the store and the lock's key; set it instead of Store, StoreURL and LockfilePath, not with them")
		} else if _, _, err := store.SplitKeyURL(c.LockURL); err != nil {
			bad("LockURL: %v", err)
		}
		if len(p) > 0 {
			return &ValidationError{Problems: p}
		}
	}
	c = c.withDefaults()

	if c.Store == nil && c.StoreURL == "" {
		bad("Store or StoreURL: one is required, or LockURL (e.g. StoreURL \"s3://bucket/prefix\" or \"file:///var/lib/tenure\")")
	}
	if c.Store == nil && c.StoreURL != "" && !strings.Contains(c.StoreURL, "://") {
		bad("StoreURL %q: no scheme; want e.g. \"file:///var/lib/tenure\" for a directory or \"s3://bucket/prefix\" for a bucket", c.StoreURL)
	}
	if c.LockfilePath == "" || len(c.LockfilePath) > store.MaxKeyLen || !utf8.ValidString(c.LockfilePath) {
		bad("LockfilePath %q: must be a valid store key", c.LockfilePath)
	} else if err := store.CheckKeyPath(c.LockfilePath); err != nil {
		bad("LockfilePath %q: %v", c.LockfilePath, err)
	}
	switch {
	case c.ServerID == "":
		bad("ServerID: required (the host name could not be read)")
	case len(c.ServerID) > 256 || !utf8.ValidString(c.ServerID) || strings.ContainsFunc(c.ServerID, isControl):
		bad("ServerID %q: must be valid UTF-8 of at most 256 bytes without control characters", c.ServerID)
	}
	positive := map[string]time.Duration{
		"FrequentInterval": c.FrequentInterval, "InfrequentInterval": c.InfrequentInterval,
		"LeaderTimeout": c.LeaderTimeout, "RenewDeadline": c.RenewDeadline, "PeerTimeout": c.PeerTimeout,
	}
	names := []string{"FrequentInterval", "InfrequentInterval", "LeaderTimeout", "RenewDeadline"}
	if c.peerEnabled() {
		names = append(names, "PeerTimeout")
	}
	for _, name := range names {
		if positive[name] < 0 {
			bad("%s %v: must be positive", name, positive[name])
		}
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	if c.InfrequentInterval < c.FrequentInterval {
		bad("InfrequentInterval %v: must be at least FrequentInterval %v", c.InfrequentInterval, c.FrequentInterval)
	}
	if c.RenewDeadline <= c.FrequentInterval {
		bad("RenewDeadline %v: must exceed FrequentInterval %v, the leader's renewal interval, so a failed renewal can be retried before the deadline", c.RenewDeadline, c.FrequentInterval)
	}
	var budget time.Duration
	for i, d := range c.RetrySchedule {
		if d < 0 {
			bad("RetrySchedule[%d] %v: must not be negative", i, d)
		}
		budget += d
	}
	if len(c.RetrySchedule) == 0 {
		bad("RetrySchedule: needs at least one attempt")
	}
	if budget >= c.RenewDeadline {
		bad("RetrySchedule: its pauses add up to %v, which must be below RenewDeadline %v", budget, c.RenewDeadline)
	}
	if margin := c.LeaderTimeout - c.RenewDeadline; margin < c.LeaderTimeout/10 {
		bad("RenewDeadline %v: must be below LeaderTimeout %v by at least a tenth of it (%v), the margin for clock-rate drift between members",
			c.RenewDeadline, c.LeaderTimeout, c.LeaderTimeout/10)
	}
	if c.RetryJitter < 0 || c.RetryJitter >= 1 {
		bad("RetryJitter %v: must be in [0, 1)", c.RetryJitter)
	}
	if !strings.HasPrefix(c.PeerHealthPath, "/") {
		bad("PeerHealthPath %q: must start with /", c.PeerHealthPath)
	}
	if c.PeerMode && c.PeerDisabled {
		bad("PeerDisabled: cannot be set with PeerMode")
	}
	if c.PeerMode && c.ServerAddr == "" {
		bad("ServerAddr: required in PeerMode (host:port where followers reach this member)")
	}
	if c.peerEnabled() && c.PeerTimeout >= c.LeaderTimeout {
		bad("PeerTimeout %v: must be below LeaderTimeout %v in peer mode (ServerAddr set)", c.PeerTimeout, c.LeaderTimeout)
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}

// peerEnabled reports whether this member serves the peer endpoint and
// asks the leader's: it has an address, and peer mode is not turned off.
func (c Config) peerEnabled() bool {
	return c.ServerAddr != "" && !c.PeerDisabled
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = errors.New("election: invalid config")

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidConfig }
