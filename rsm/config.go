package rsm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults: S2C's options, plus PipelineDepth. S2C's heartbeat values (10
// missed heartbeats of 5 s, 3 s per rank) cost 50 s without writes after a
// leader crash; heartbeats cost no store requests, so they are fast here: a
// follower gives up on a silent leader after 2 s, and the leader's own
// checks (docs/rsm.md, "Availability") use the same bound.
const (
	DefaultMaxMessageSize        = 500 << 10
	DefaultSnapshotThreshold     = 100
	DefaultFlushInterval         = 2 * time.Second
	DefaultBatchMinCount         = 100
	DefaultRequestTimeout        = 10 * time.Second
	DefaultHeartbeatInterval     = 500 * time.Millisecond
	DefaultMaxMissedHeartbeats   = 4
	DefaultMaxConcurrentRequests = 100
	DefaultLeadershipDelay       = 250 * time.Millisecond
	DefaultLogCacheSize          = 1000
	DefaultMaxPendingBatches     = 1000
	DefaultMaxDedupClients       = 1000
	DefaultPipelineDepth         = 4
	DefaultStoreTimeout          = 10 * time.Second
	DefaultConnectTimeout        = 10 * time.Second
	DefaultHandshakeTimeout      = 10 * time.Second
	DefaultMaxPendingPerClient   = 1000
)

// MaxMessageSizeLimit is the largest MaxMessageSize: the RPC transport's
// limit on one message, less room for the fields around the entries or the
// command it carries.
const MaxMessageSizeLimit = maxServerMessage - 1<<20

// RetryOptions are S2C's retry options for store calls and RPCs: exponential
// backoff from BaseDelay up to MaxDelay with jitter; throttling adds
// ThrottleDelay; MaxAttempts bounds the attempts of one call.
type RetryOptions struct {
	// MaxAttempts per call. Default 3.
	MaxAttempts int
	// BaseDelay of the exponential backoff. Default 300 ms.
	BaseDelay time.Duration
	// MaxDelay caps a pause. Default 5 s.
	MaxDelay time.Duration
	// ThrottleDelay is added after the store says it is throttling. Default 1 s.
	ThrottleDelay time.Duration
}

// Options tune a group. Zero values mean the defaults; Validate refuses
// invalid values and never corrects them.
type Options struct {
	// MaxMessageSize bounds one encoded RPC message and one command or
	// result, in bytes. Default 500 KiB; at most MaxMessageSizeLimit.
	MaxMessageSize int
	// SnapshotThreshold: the leader snapshots after this many log entries
	// since the last snapshot, then truncates the log. A snapshot is a
	// segment of those entries, or a new base of the whole state once the
	// segments have grown to three times the base, or to 1.5 times once
	// the group took no command for an idle period (docs/rsm.md). Default
	// 100.
	SnapshotThreshold int
	// FlushInterval: a partial batch is cut at the latest this long after
	// its first request, and earlier whenever the pipeline has room for its
	// write (so a lone command is written at once; what arrives while the
	// pipeline is full is batched). A read batch is cut whenever a
	// confirmation round can be issued for it. Default 2 s (S2C's).
	FlushInterval time.Duration
	// BatchMinCount: a batch is cut at once when it holds this many
	// requests. A batch is also cut before its log entry would exceed what
	// a follower can be sent (MaxMessageSize less 4 KiB). Default 100.
	BatchMinCount int
	// RequestTimeout bounds a Command or Read when ctx has no earlier
	// deadline. Default 10 s.
	RequestTimeout time.Duration
	// HeartbeatInterval: the leader synchronizes every follower at least
	// this often. Default 500 ms (S2C's is 5 s).
	HeartbeatInterval time.Duration
	// MaxMissedHeartbeats: a follower that hears nothing from the leader
	// for this many intervals checks the store and may attempt leadership.
	// The product with HeartbeatInterval is the heartbeat timeout: a
	// leader that gets no answer from the store for as long steps down,
	// and drops from the membership a follower it cannot reach for half
	// of it. Default 4 (S2C's is 10).
	MaxMissedHeartbeats int
	// MaxConcurrentRequests bounds the commands a leader holds at once,
	// and separately its reads; beyond it requests are refused with
	// ErrBusy. A node numbers and sends at most as many of its commands
	// at once; the others wait at the node, and its reads do not take
	// their room at the leader. Default 100.
	MaxConcurrentRequests int
	// LeadershipDelay is the pause per rank before a follower attempts
	// leadership, so the most up-to-date follower goes first. Default
	// 250 ms (S2C's is 3 s): a takeover on an object store takes a few
	// round trips, well under it.
	LeadershipDelay time.Duration
	// LogCacheSize is the number of recent entries the leader keeps to
	// synchronize followers without reading the store, within at most
	// 8 MiB of them or 4 × MaxMessageSize, whichever is more. Default
	// 1000. A leader without followers keeps only the entries its stored
	// snapshot does not cover yet.
	LogCacheSize int
	// MaxPendingBatches bounds a follower's queue of batches waiting to be
	// applied. Default 1000.
	MaxPendingBatches int
	// MaxDedupClients bounds the client sessions the group keeps; the
	// least recently used is evicted, and its later commands are refused.
	// A group setting: recorded when the group is created, and a node
	// started with another value refuses to join. Default 1000.
	MaxDedupClients int
	// PipelineDepth is the number of batches a leader may have in flight
	// to the store at once; acknowledgements stay in log order. Default 4.
	PipelineDepth int
	// StoreTimeout bounds each store call. A leader whose store stops
	// answering finds out within it (a write that times out is settled by
	// reading back) instead of holding its group. Default 10 s.
	StoreTimeout time.Duration
	// Retry tunes retries of store calls and RPCs.
	Retry RetryOptions
}

// HostConfig configures a Host: one RPC server and one store shared by every
// group the host joins.
type HostConfig struct {
	// ID identifies this node in every group. It must be unique and stable
	// across restarts (a second live process with the same ID is reported
	// as a *DuplicateIDError). Required.
	ID string
	// Addr is the host:port other nodes dial. Required.
	Addr string
	// Listener serves the RPCs. Default: listen on Addr.
	Listener net.Listener
	// ServerTLS and ClientTLS secure the RPCs with mutual TLS; both or
	// neither. ServerTLS must require and verify client certificates
	// (ClientAuth tls.RequireAndVerifyClientCert, with ClientCAs) and
	// ClientTLS must present one: every peer of every group is then
	// whoever holds a certificate of those CAs. Without them (the
	// default) peers authenticate with ephemeral keys that each node
	// publishes in the group's records in the store, and accept only keys
	// published there (docs/security.md).
	ServerTLS *tls.Config
	ClientTLS *tls.Config
	// PlaintextLoopback turns peer authentication off: RPCs are plaintext
	// and anyone who reaches Addr may call them. Only for a group whose
	// nodes all listen on loopback: Addr (and Listener, if given) must be
	// loopback addresses, and ServerTLS and ClientTLS unset.
	PlaintextLoopback bool
	// Dialer opens connections to other nodes. Default: net.Dialer.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// ConnectTimeout bounds dialing a node. Default 10 s.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds the handshake with a node. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxPendingPerClient bounds the requests one connected node may have
	// pending on this host. Default 1000.
	MaxPendingPerClient int
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default: none are registered.
	Registerer prometheus.Registerer
	// SkipProbe skips the start-up probe that refuses a store which ignores
	// conditional writes.
	SkipProbe bool
}

func (o Options) withDefaults() Options {
	set := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	set(&o.MaxMessageSize, DefaultMaxMessageSize)
	set(&o.SnapshotThreshold, DefaultSnapshotThreshold)
	setD(&o.FlushInterval, DefaultFlushInterval)
	set(&o.BatchMinCount, DefaultBatchMinCount)
	setD(&o.RequestTimeout, DefaultRequestTimeout)
	setD(&o.HeartbeatInterval, DefaultHeartbeatInterval)
	set(&o.MaxMissedHeartbeats, DefaultMaxMissedHeartbeats)
	set(&o.MaxConcurrentRequests, DefaultMaxConcurrentRequests)
	setD(&o.LeadershipDelay, DefaultLeadershipDelay)
	set(&o.LogCacheSize, DefaultLogCacheSize)
	set(&o.MaxPendingBatches, DefaultMaxPendingBatches)
	set(&o.MaxDedupClients, DefaultMaxDedupClients)
	set(&o.PipelineDepth, DefaultPipelineDepth)
	setD(&o.StoreTimeout, DefaultStoreTimeout)
	set(&o.Retry.MaxAttempts, 3)
	setD(&o.Retry.BaseDelay, 300*time.Millisecond)
	setD(&o.Retry.MaxDelay, 5*time.Second)
	setD(&o.Retry.ThrottleDelay, time.Second)
	return o
}

// Validate reports the first invalid option, naming the field.
func (o Options) Validate() error {
	d := o.withDefaults()
	var errs []string
	neg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Sprintf("%s must not be negative (got %d)", name, v))
		}
	}
	neg("MaxMessageSize", int64(o.MaxMessageSize))
	neg("SnapshotThreshold", int64(o.SnapshotThreshold))
	neg("FlushInterval", int64(o.FlushInterval))
	neg("BatchMinCount", int64(o.BatchMinCount))
	neg("RequestTimeout", int64(o.RequestTimeout))
	neg("HeartbeatInterval", int64(o.HeartbeatInterval))
	neg("MaxMissedHeartbeats", int64(o.MaxMissedHeartbeats))
	neg("MaxConcurrentRequests", int64(o.MaxConcurrentRequests))
	neg("LeadershipDelay", int64(o.LeadershipDelay))
	neg("LogCacheSize", int64(o.LogCacheSize))
	neg("MaxPendingBatches", int64(o.MaxPendingBatches))
	neg("MaxDedupClients", int64(o.MaxDedupClients))
	neg("PipelineDepth", int64(o.PipelineDepth))
	neg("StoreTimeout", int64(o.StoreTimeout))
	neg("Retry.MaxAttempts", int64(o.Retry.MaxAttempts))
	neg("Retry.BaseDelay", int64(o.Retry.BaseDelay))
	neg("Retry.MaxDelay", int64(o.Retry.MaxDelay))
	neg("Retry.ThrottleDelay", int64(o.Retry.ThrottleDelay))
	if len(errs) == 0 {
		if d.MaxMessageSize < 4<<10 {
			errs = append(errs, fmt.Sprintf("MaxMessageSize must be at least 4 KiB (got %d)", d.MaxMessageSize))
		}
		if d.MaxMessageSize > MaxMessageSizeLimit {
			errs = append(errs, fmt.Sprintf("MaxMessageSize must be at most %d, what the RPC transport carries (got %d)", MaxMessageSizeLimit, d.MaxMessageSize))
		}
		if d.Retry.MaxDelay < d.Retry.BaseDelay {
			errs = append(errs, fmt.Sprintf("Retry.MaxDelay (%v) must not be below Retry.BaseDelay (%v)", d.Retry.MaxDelay, d.Retry.BaseDelay))
		}
		if d.RequestTimeout <= d.FlushInterval {
			errs = append(errs, fmt.Sprintf("RequestTimeout (%v) must exceed FlushInterval (%v), or no partial batch could complete", d.RequestTimeout, d.FlushInterval))
		}
		if d.PipelineDepth > 64 {
			errs = append(errs, fmt.Sprintf("PipelineDepth must be at most 64 (got %d)", d.PipelineDepth))
		}
	}
	if len(errs) > 0 {
		return errors.New("rsm: invalid options: " + strings.Join(errs, "; "))
	}
	return nil
}

// Validate reports missing or inconsistent host settings, naming the field.
func (c HostConfig) Validate() error {
	var errs []string
	if c.ID == "" {
		errs = append(errs, "ID is required")
	} else if err := validID(c.ID); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Addr == "" {
		errs = append(errs, "Addr is required")
	} else if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Sprintf("Addr %q is not host:port: %v", c.Addr, err))
	}
	if (c.ServerTLS == nil) != (c.ClientTLS == nil) {
		errs = append(errs, "ServerTLS and ClientTLS must be set together")
	}
	if c.ServerTLS != nil && c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		errs = append(errs, fmt.Sprintf("ServerTLS.ClientAuth is %v, must be tls.RequireAndVerifyClientCert (with ClientCAs): every peer RPC is authenticated", c.ServerTLS.ClientAuth))
	}
	if c.ClientTLS != nil && len(c.ClientTLS.Certificates) == 0 && c.ClientTLS.GetClientCertificate == nil {
		errs = append(errs, "ClientTLS presents no certificate: peers require one (mutual TLS)")
	}
	if c.PlaintextLoopback {
		if c.ServerTLS != nil || c.ClientTLS != nil {
			errs = append(errs, "PlaintextLoopback excludes ServerTLS and ClientTLS")
		}
		if c.Addr != "" && !isLoopback(c.Addr) {
			errs = append(errs, fmt.Sprintf("PlaintextLoopback needs a loopback Addr (got %q): elsewhere peers must authenticate", c.Addr))
		}
		if c.Listener != nil {
			if a, ok := c.Listener.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
				errs = append(errs, fmt.Sprintf("PlaintextLoopback needs a loopback Listener (it listens on %s)", c.Listener.Addr()))
			}
		}
	}
	if c.ConnectTimeout < 0 || c.HandshakeTimeout < 0 || c.MaxPendingPerClient < 0 {
		errs = append(errs, "ConnectTimeout, HandshakeTimeout and MaxPendingPerClient must not be negative")
	}
	if len(errs) > 0 {
		return errors.New("rsm: invalid host config: " + strings.Join(errs, "; "))
	}
	return nil
}

// validGroup checks a group name: it becomes a key prefix in the store.
func validGroup(g string) error {
	if g == "" || len(g) > 200 || strings.ContainsAny(g, "/\x00") || g == "." || g == ".." {
		return fmt.Errorf("rsm: invalid group name %q: 1-200 bytes, no '/', NUL, '.' or '..'", g)
	}
	return nil
}
