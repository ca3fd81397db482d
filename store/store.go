package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tenure-io/tenure/store/driver"
)

// MaxKeyLen is the longest key, in bytes, that the portable layer accepts.
// Drivers may accept less (an S3 prefix counts against S3's own 1,024 bytes);
// they then refuse with ErrInvalidArgument before sending anything.
const MaxKeyLen = 1024

// Cond is the condition of a write: IfAbsent() or IfMatch(version). The zero
// Cond is unconditional, which only Delete accepts.
type Cond = driver.Cond

// Item is one entry of a List result: key, version and size in bytes.
type Item = driver.Item

// IfAbsent is the condition "the key does not exist".
func IfAbsent() Cond { return Cond{Kind: driver.IfAbsent} }

// IfMatch is the condition "the key exists with this version".
func IfMatch(version string) Cond { return Cond{Kind: driver.IfMatch, Version: version} }

// WithVisible returns ctx carrying visible, for a Put or Delete made under
// it: a store whose writes become visible before they are durable (a
// packed file:// log) calls it then, and the call still returns only once
// the write is durable. See driver.WithVisible.
func WithVisible(ctx context.Context, visible func()) context.Context {
	return driver.WithVisible(ctx, visible)
}

// Store is the portable store every tenure component uses. It validates
// arguments, classifies and wraps the driver's errors exactly once, and
// tracks in-flight calls so that Close waits for them. A Store is safe for
// concurrent use by multiple goroutines; whether it is safe across processes
// is up to the driver (all bundled drivers are).
type Store struct {
	drv       driver.Store
	observers []func(Call)
	readOnly  bool
	logger    *slog.Logger // for Open's driver only

	mu       sync.RWMutex // held shared by each call, exclusively by Close
	closed   bool
	closeErr error
	once     sync.Once
}

// Call describes one finished call, for an observer (metrics, cost
// accounting).
type Call struct {
	Op       string // "get", "put", "delete", "list"
	Cond     driver.CondKind
	Key      string // the key, or the prefix for list
	Err      error  // nil on success
	Duration time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithObserver calls f after every call that reached the driver. f must be
// safe for concurrent use and quick. Observers given in several options are
// all called, in order (a Metrics' Observe beside the caller's own).
func WithObserver(f func(Call)) Option {
	return func(s *Store) {
		if f != nil {
			s.observers = append(s.observers, f)
		}
	}
}

// WithLogger gives Open's driver l for what it, or the SDK under it, logs
// (the AWS SDK's warnings, for one), so that those lines follow the
// program's log format instead of going to stderr as they are. Without it,
// drivers log to slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.logger = l } }

// ReadOnly makes a Store that only reads: Put and Delete fail with an error
// matching ErrReadOnly (and ErrInvalidArgument) before reaching the driver.
// Given to Open, it also tells the driver to create nothing: a file store
// does not make its directory, lock or temp directories, and fails if the
// directory is missing.
func ReadOnly() Option { return func(s *Store) { s.readOnly = true } }

// New returns a Store backed by drv. The Store owns drv: Close closes it.
func New(drv driver.Store, opts ...Option) *Store {
	s := &Store{drv: drv}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Store) observe(op string, cond driver.CondKind, key string, start time.Time, err error) {
	if len(s.observers) == 0 {
		return
	}
	c := Call{Op: op, Cond: cond, Key: key, Err: err, Duration: time.Since(start)}
	for _, f := range s.observers {
		f(c)
	}
}

// Driver returns the underlying driver, for optional capabilities such as
// driver.Watcher.
func (s *Store) Driver() driver.Store { return s.drv }

// Get returns the value and version of key, or an error matching ErrNotFound
// when it is absent. The returned slice belongs to the caller.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := s.enter("get", key); err != nil {
		return nil, "", err
	}
	defer s.mu.RUnlock()
	start := time.Now()
	data, version, err := s.drv.Get(ctx, key)
	if err != nil {
		err = s.wrap("get", key, err)
	}
	s.observe("get", driver.Unconditional, key, start, err)
	if err != nil {
		return nil, "", err
	}
	return data, version, nil
}

// Read returns the value of key without its version, or an error matching
// ErrNotFound when it is absent; for a reader that has no use for the
// version (an immutable object), where computing it costs (filestore
// hashes the bytes). The value is read into buf's memory when it fits in
// cap(buf) (the driver may overwrite the rest of buf), else into a new
// slice. Like GetLimited, it reads at most max bytes (max at least 1): a
// larger value is refused with an error matching ErrTooLarge, having read
// no more of it than the limit. Drivers without driver.Reader are read
// with GetLimited. It counts as a "get" for the observers.
func (s *Store) Read(ctx context.Context, key string, buf []byte, max int64) ([]byte, error) {
	if err := s.enter("get", key); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if max < 1 {
		return nil, invalid("get", key, fmt.Sprintf("limit %d: must be at least 1 byte", max))
	}
	start := time.Now()
	var data []byte
	var err error
	if r, ok := s.drv.(driver.Reader); ok {
		data, err = r.ReadInto(ctx, key, buf, max)
	} else {
		data, _, err = s.drv.GetLimited(ctx, key, max)
	}
	if err == nil && int64(len(data)) > max {
		// A driver that overran its limit still does not pass the value on.
		data, err = nil, driver.TooLargeError(int64(len(data)), max)
	}
	if err != nil {
		err = s.wrap("get", key, err)
	}
	s.observe("get", driver.Unconditional, key, start, err)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// GetLimited is Get for a record of at most max bytes (max at least 1):
// a larger value is refused with an error matching ErrTooLarge, which names
// the key and the limit, and the driver reads no more of it than the limit
// (it checks the size the store reports first, and reads at most max+1
// bytes). Use it wherever a record has a known maximum size, so that a huge
// object at a key cannot make every reader load it whole.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := s.enter("get", key); err != nil {
		return nil, "", err
	}
	defer s.mu.RUnlock()
	if max < 1 {
		return nil, "", invalid("get", key, fmt.Sprintf("limit %d: must be at least 1 byte", max))
	}
	start := time.Now()
	data, version, err := s.drv.GetLimited(ctx, key, max)
	if err == nil && int64(len(data)) > max {
		// A driver that overran its limit still does not pass the value on.
		data, err = nil, driver.TooLargeError(int64(len(data)), max)
	}
	if err != nil {
		err = s.wrap("get", key, err)
	}
	s.observe("get", driver.Unconditional, key, start, err)
	if err != nil {
		return nil, "", err
	}
	return data, version, nil
}

// Put writes data under key if cond holds and returns the new version. It
// returns an error matching ErrPreconditionFailed when cond does not hold.
// cond must be IfAbsent() or IfMatch(v); unconditional writes are refused.
//
// An error for which IsAmbiguous is true does not mean the write failed: use
// PutResolved to find out.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond Cond) (string, error) {
	if err := s.enter("put", key); err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	switch {
	case cond.Kind == driver.IfAbsent:
	case cond.Kind == driver.IfMatch && cond.Version != "":
	case cond.Kind == driver.IfMatch:
		return "", invalid("put", key, "IfMatch with an empty version")
	default:
		return "", invalid("put", key, "every write must carry a condition: IfAbsent() or IfMatch(version)")
	}
	if s.readOnly {
		return "", errReadOnly("put", key)
	}
	start := time.Now()
	version, err := s.drv.Put(ctx, key, data, cond)
	if err != nil {
		err = s.wrap("put", key, err)
	}
	s.observe("put", cond.Kind, key, start, err)
	if err != nil {
		return "", err
	}
	return version, nil
}

// Delete removes key. With IfMatch(v) it returns an error matching
// ErrPreconditionFailed when the key is absent or has another version, or
// one matching ErrUnsupported, having deleted nothing, on a store whose
// service would ignore the condition (see the package doc); with the zero
// Cond it removes whatever is there and succeeds if nothing is.
func (s *Store) Delete(ctx context.Context, key string, cond Cond) error {
	if err := s.enter("delete", key); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	switch {
	case cond.Kind == driver.Unconditional:
	case cond.Kind == driver.IfMatch && cond.Version != "":
	case cond.Kind == driver.IfMatch:
		return invalid("delete", key, "IfMatch with an empty version")
	default:
		return invalid("delete", key, "Delete accepts IfMatch(version) or no condition")
	}
	if s.readOnly {
		return errReadOnly("delete", key)
	}
	start := time.Now()
	err := s.drv.Delete(ctx, key, cond)
	if err != nil {
		err = s.wrap("delete", key, err)
	}
	s.observe("delete", cond.Kind, key, start, err)
	return err
}

// List returns at most limit items whose keys start with prefix and sort
// strictly after after, in byte-wise lexicographic order. Fewer than limit
// items means the listing is complete. Pass the last key returned as after to
// read the next page.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]Item, error) {
	if err := s.enterList(prefix, after, limit); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	start := time.Now()
	items, err := s.drv.List(ctx, prefix, after, limit)
	if err != nil {
		err = s.wrap("list", prefix, err)
	}
	s.observe("list", driver.Unconditional, prefix, start, err)
	if err != nil {
		return nil, err
	}
	if len(items) > limit {
		items = items[:limit]
	}
	return items, nil
}

// ListKeys is List for callers that need only the keys: drivers that
// compute versions at a cost (filestore hashes each value) skip them
// (driver.KeyLister); the others are listed with List. It counts as a
// "list" for the observers.
func (s *Store) ListKeys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := s.enterList(prefix, after, limit); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	start := time.Now()
	keys, err := driver.ListKeys(ctx, s.drv, prefix, after, limit)
	if err != nil {
		err = s.wrap("list", prefix, err)
	}
	s.observe("list", driver.Unconditional, prefix, start, err)
	if err != nil {
		return nil, err
	}
	if len(keys) > limit {
		keys = keys[:limit]
	}
	return keys, nil
}

// Pack asks the driver to keep the keys under prefix (ending in '/')
// together, as a log's are written and deleted (driver.Packer). It reports
// whether they are: false from drivers that cannot, and for a prefix
// under which keys are stored already.
func (s *Store) Pack(ctx context.Context, prefix string) (bool, error) {
	if s.readOnly {
		return false, errReadOnly("pack", prefix)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, &Error{Op: "pack", Key: prefix, Kind: driver.Unknown, Err: ErrClosed}
	}
	ok, err := driver.Pack(ctx, s.drv, prefix)
	if err != nil {
		err = s.wrap("pack", prefix, err)
	}
	return ok, err
}

// Packs reports whether Pack can pack a prefix of this store: its driver
// can (driver.Packer), and the store is writable.
func (s *Store) Packs() bool {
	return !s.readOnly && driver.Packs(s.drv)
}

// ListAll returns every item under prefix, reading pages of pageSize.
func (s *Store) ListAll(ctx context.Context, prefix string, pageSize int) ([]Item, error) {
	var all []Item
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, pageSize)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < pageSize {
			return all, nil
		}
		after = page[len(page)-1].Key
	}
}

// Close waits for in-flight calls to return, then closes the driver. Later
// calls return ErrClosed. Close is idempotent and returns the driver's error
// each time.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.closeErr = s.drv.Close()
	})
	return s.closeErr
}

// enter validates key and takes the shared lock; on success the caller must
// RUnlock.
func (s *Store) enter(op, key string) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if l, ok := s.drv.(driver.Limits); ok {
		if err := l.CheckKey(key); err != nil {
			return &Error{Op: op, Key: key, Kind: driver.InvalidArgument, Err: err}
		}
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return &Error{Op: op, Key: key, Kind: driver.Unknown, Err: ErrClosed}
	}
	return nil
}

func (s *Store) enterList(prefix, after string, limit int) error {
	if limit < 1 {
		return invalid("list", prefix, fmt.Sprintf("limit %d: must be at least 1", limit))
	}
	if !utf8.ValidString(prefix) || len(prefix) > MaxKeyLen {
		return invalid("list", prefix, "prefix must be valid UTF-8 of at most 1024 bytes")
	}
	if !utf8.ValidString(after) || len(after) > MaxKeyLen {
		return invalid("list", prefix, "start-after key must be valid UTF-8 of at most 1024 bytes")
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return &Error{Op: "list", Key: prefix, Kind: driver.Unknown, Err: ErrClosed}
	}
	return nil
}

func (s *Store) wrap(op, key string, err error) error {
	return &Error{Op: op, Key: key, Kind: driver.Classify(s.drv, err), Err: err}
}

func errReadOnly(op, key string) error {
	return &Error{Op: op, Key: key, Kind: driver.InvalidArgument, Err: fmt.Errorf("%w: it was opened with store.ReadOnly()", ErrReadOnly)}
}

func invalid(op, key, msg string) error {
	return &Error{Op: op, Key: key, Kind: driver.InvalidArgument, Err: fmt.Errorf("%s", msg)}
}

// checkKey applies the portable key rules: non-empty, valid UTF-8, at most
// MaxKeyLen bytes, no NUL or other control characters.
func checkKey(op, key string) error {
	switch {
	case key == "":
		return invalid(op, key, "empty key")
	case len(key) > MaxKeyLen:
		return invalid(op, key[:32]+"…", fmt.Sprintf("key is %d bytes; the limit is %d", len(key), MaxKeyLen))
	case !utf8.ValidString(key):
		return invalid(op, key, "key is not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return invalid(op, key, fmt.Sprintf("key contains control character %U", r))
		}
	}
	return nil
}
