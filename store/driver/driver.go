// Package driver defines the interface that every tenure store backend
// implements. Users do not call drivers directly: they use *store.Store, which
// validates arguments, classifies and wraps errors exactly once, and tracks
// in-flight calls so that Close waits for them.
//
// A driver is small on purpose: Get (and GetLimited, its bounded form), Put,
// Delete, List, Close, and ErrorKind to classify the errors it returns. Optional capabilities (such as Watch) are
// separate interfaces found by type assertion.
package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
)

// CondKind says which condition a write carries.
type CondKind int

const (
	// Unconditional is only valid for Delete: remove whatever is there.
	Unconditional CondKind = iota
	// IfAbsent: the write applies only if the key does not exist.
	IfAbsent
	// IfMatch: the write applies only if the key exists with Version.
	IfMatch
)

// String returns the condition's name as it appears in errors.
func (k CondKind) String() string {
	switch k {
	case Unconditional:
		return "unconditional"
	case IfAbsent:
		return "if-absent"
	case IfMatch:
		return "if-match"
	}
	return fmt.Sprintf("CondKind(%d)", int(k))
}

// Cond is the condition attached to a write. The portable layer guarantees
// that drivers only see IfAbsent or IfMatch for Put, and Unconditional or
// IfMatch for Delete, and that Version is non-empty with IfMatch.
type Cond struct {
	Kind    CondKind
	Version string
}

// Item is one entry of a List result.
type Item struct {
	Key     string
	Version string
	Size    int64
}

// Store is the interface a backend implements. All methods must be safe for
// concurrent use by multiple goroutines. The portable layer has already
// validated keys and conditions before calling a method.
type Store interface {
	// Get returns the value and opaque version of key. It returns an error of
	// kind NotFound when the key is absent. The returned slice belongs to the
	// caller.
	Get(ctx context.Context, key string) (data []byte, version string, err error)

	// GetLimited is Get for a value of at most max bytes (max is at least
	// 1). When the value is larger it returns an error of kind TooLarge
	// (build it with TooLargeError) without reading the value whole: it
	// checks the size the store reports before reading the body, and reads
	// at most max+1 bytes of it (ReadLimited). A driver whose service
	// returns a value only whole, in one bounded response (DynamoDB, etcd,
	// Route 53), checks its length before copying it.
	GetLimited(ctx context.Context, key string, max int64) (data []byte, version string, err error)

	// Put writes data under key if cond holds, atomically: either the whole
	// value becomes visible with a new version, or nothing changes. It
	// returns the new version, or an error of kind PreconditionFailed when
	// cond does not hold (IfAbsent on an existing key, IfMatch on a missing
	// key or on another version). The driver must not retry a conditional
	// write itself: a retry whose first attempt landed would see its own
	// write as a precondition failure. Put must not retain data.
	Put(ctx context.Context, key string, data []byte, cond Cond) (version string, err error)

	// Delete removes key. With IfMatch it returns an error of kind
	// PreconditionFailed when the key is missing or has another version,
	// atomically with the removal. A driver whose service may ignore that
	// condition (some S3-compatible servers do) must not send it and hope:
	// it finds out first (DeleteCheck) and, where the condition would be
	// ignored, refuses every conditional delete with an error of kind
	// Unsupported, changing nothing. Unconditional delete of a missing key
	// succeeds.
	Delete(ctx context.Context, key string, cond Cond) error

	// List returns at most limit items whose keys start with prefix and sort
	// strictly after the key after (byte-wise lexicographic order), in that
	// order. limit is at least 1. Fewer than limit items means there are no
	// more.
	List(ctx context.Context, prefix, after string, limit int) ([]Item, error)

	// ErrorKind classifies an error returned by this driver. Errors built
	// with Errorf are classified by the portable layer without calling it.
	ErrorKind(err error) Kind

	// Close releases the driver's resources. The portable layer calls it
	// once, after every in-flight call has returned.
	Close() error
}

// Reader is an optional interface: a driver that can read a value without
// its version (filestore computes a version by hashing the bytes), into
// memory the caller reuses, implements it. store.Store.Read falls back to
// GetLimited for the others.
type Reader interface {
	// ReadInto returns the value of key, of at most max bytes (max is at
	// least 1), in buf's memory (buf[:len]) when it fits in cap(buf), else
	// in a new slice; buf's bytes beyond it may be overwritten. It returns
	// an error of kind NotFound when the key is absent, as Get does, and
	// one of kind TooLarge for a larger value, having read no more of it
	// than GetLimited would.
	ReadInto(ctx context.Context, key string, buf []byte, max int64) ([]byte, error)
}

// KeyLister is an optional interface: a driver whose listing costs more
// with versions than without (filestore computes each version by reading
// and hashing the value) lists keys alone. store.Store.ListKeys falls back
// to List for the others.
type KeyLister interface {
	// ListKeys returns the keys List would return, in the same order.
	ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error)
}

// ListKeys lists the keys of d: with its ListKeys if it is a KeyLister,
// else with List.
func ListKeys(ctx context.Context, d Store, prefix, after string, limit int) ([]string, error) {
	if l, ok := d.(KeyLister); ok {
		return l.ListKeys(ctx, prefix, after, limit)
	}
	items, err := d.List(ctx, prefix, after, limit)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys, nil
}

// Packer is an optional interface: a driver that can keep the keys under a
// prefix together, for keys each written once and deleted oldest first (a
// log), at a lower cost per write: filestore appends them to segment
// files, one flush per batch of writes, instead of a file per key. Which
// prefixes are packed is the store's state, not a client's setting: every
// client reads and writes a packed prefix alike, whether or not it asked.
type Packer interface {
	// Pack packs prefix (ending in '/') if no key is stored under it,
	// and reports whether it is packed.
	Pack(ctx context.Context, prefix string) (bool, error)
	// Packs reports whether Pack can pack a prefix at all (a wrapper
	// answers for the driver it wraps).
	Packs() bool
}

// Pack packs prefix of d if d is a Packer; others report false.
func Pack(ctx context.Context, d Store, prefix string) (bool, error) {
	if p, ok := d.(Packer); ok {
		return p.Pack(ctx, prefix)
	}
	return false, nil
}

// Packs reports whether d can pack a prefix (Packer.Packs); others cannot.
func Packs(d Store) bool {
	p, ok := d.(Packer)
	return ok && p.Packs()
}

// Limits is an optional interface: a driver that cannot store every key the
// portable layer accepts says so here, so that callers get a clear error
// before any request is made.
type Limits interface {
	// CheckKey returns nil if the driver can store key, or an error that
	// says why not.
	CheckKey(key string) error
}

// Kind classifies an error once, at the driver boundary.
type Kind int

const (
	// Unknown errors are treated as transient by callers that retry.
	Unknown Kind = iota
	NotFound
	PreconditionFailed
	// Conflict is a concurrent conditional write in progress on the same key
	// (S3 409 ConditionalRequestConflict): re-read and retry.
	Conflict
	// Throttled: back off with jitter.
	Throttled
	// Transient: 5xx, timeouts, broken connections. A write that failed this
	// way may or may not have been applied.
	Transient
	// Permanent: authentication, missing bucket, bad configuration.
	Permanent
	// InvalidArgument: the request can never succeed as made.
	InvalidArgument
	// Canceled: the caller's context ended. A write may still have applied.
	Canceled
	// TooLarge: a value is larger than the limit the reader set
	// (GetLimited). Nothing beyond the limit was read.
	TooLarge
	// Unsupported: the store cannot keep the request's contract (a
	// server that ignores the condition of a conditional delete), so the
	// driver refused it without changing anything.
	Unsupported
)

// String returns a short name for the kind.
func (k Kind) String() string {
	switch k {
	case Unknown:
		return "unknown"
	case NotFound:
		return "not found"
	case PreconditionFailed:
		return "precondition failed"
	case Conflict:
		return "conflict"
	case Throttled:
		return "throttled"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case InvalidArgument:
		return "invalid argument"
	case Canceled:
		return "canceled"
	case TooLarge:
		return "too large"
	case Unsupported:
		return "unsupported"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is an error a driver builds itself, with its kind attached.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of the given kind. Use %w to keep a cause.
func Errorf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// TooLargeError returns the error of kind TooLarge for a value larger than
// max bytes; size is the value's size when the store reported it, else -1.
func TooLargeError(size, max int64) error {
	if size >= 0 {
		return Errorf(TooLarge, "the value is %d bytes; the limit is %d", size, max)
	}
	return Errorf(TooLarge, "the value is larger than the limit of %d bytes", max)
}

// ReadLimited reads r to its end, but no more than max+1 bytes: a longer
// stream fails with TooLargeError. size, if not negative, is the length the
// store announced: a value announced larger than max is refused before any
// byte is read, and a smaller one sizes the buffer.
func ReadLimited(r io.Reader, size, max int64) ([]byte, error) {
	return ReadLimitedInto(r, size, max, nil)
}

// ReadLimitedInto is ReadLimited into dst's memory when the value fits in
// its capacity with bytes.MinRead to spare (the room the read needs to see
// the end), else into a new slice.
func ReadLimitedInto(r io.Reader, size, max int64, dst []byte) ([]byte, error) {
	if size > max {
		return nil, TooLargeError(size, max)
	}
	buf := bytes.NewBuffer(dst[:0])
	if size > 0 {
		// ReadFrom wants MinRead bytes free to see the end: without them
		// it would double the buffer (and copy the value) after the last
		// byte.
		buf.Grow(int(size) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(r, min(max, math.MaxInt64-1)+1))
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, TooLargeError(-1, max)
	}
	return buf.Bytes(), nil
}

// Classify returns the kind of err: the kind of an *Error in its chain, the
// context's kind for context errors, else the driver's own classification.
func Classify(d Store, err error) Kind {
	var de *Error
	if errors.As(err, &de) {
		return de.Kind
	}
	if errors.Is(err, context.Canceled) {
		return Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	if d != nil {
		return d.ErrorKind(err)
	}
	return Unknown
}

// Watcher is an optional capability: stores that can notify of changes (etcd)
// implement it so callers need not poll.
type Watcher interface {
	// Watch sends an event each time key changes, starting after version
	// (empty: from now), until ctx ends. The channel is closed when the
	// watch ends; a watch may end early, and callers then fall back to Get.
	Watch(ctx context.Context, key, version string) (<-chan WatchEvent, error)
}

// WatchEvent is one change of a watched key.
type WatchEvent struct {
	Data    []byte
	Version string
	Deleted bool
}

type visibleKey struct{}

// WithVisible returns ctx carrying visible, for a Put (or Delete) made
// under it. A driver that can tell calls visible once the write is visible
// but before it is durable: every read that starts after the call returns
// what was written (or waits until it can), and the call still returns
// only once the write is durable. A caller can so start what must follow
// the write's visibility, a read of another object, while the write is
// made durable (rsm's confirmation read, docs/rsm.md rule 5(b)).
//
// A driver calls visible at most once per call, and never for a write it
// refused or did not make; most never call it, their writes becoming
// visible and durable together. visible must not block: the driver may
// hold its locks.
func WithVisible(ctx context.Context, visible func()) context.Context {
	return context.WithValue(ctx, visibleKey{}, visible)
}

// VisibleFunc returns the function WithVisible put in ctx, or nil.
func VisibleFunc(ctx context.Context) func() {
	f, _ := ctx.Value(visibleKey{}).(func())
	return f
}
