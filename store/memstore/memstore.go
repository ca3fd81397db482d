// Package memstore is an in-memory tenure store for tests and examples,
// registered as the URL scheme "mem". Its versions are content hashes, as S3
// ETags are, so writing the same bytes twice yields the same version: tests
// meet the same ABA that S3 would produce.
//
// Each Open of "mem://" returns a fresh, empty store; "mem://name" returns
// the store of that name, shared by every Open in the process. Nothing
// survives the process.
package memstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

func init() {
	store.Register("mem", func(_ context.Context, u *url.URL, _ store.OpenOptions) (driver.Store, error) {
		name := u.Host + u.Path
		if name == "" {
			return New(), nil
		}
		namedMu.Lock()
		defer namedMu.Unlock()
		m := named[name]
		if m == nil {
			m = newMap()
			named[name] = m
		}
		return &Store{m: m}, nil
	})
}

var (
	namedMu sync.Mutex
	named   = map[string]*objects{}
)

// Store is an in-memory driver. It is safe for concurrent use.
type Store struct {
	m *objects
}

var _ driver.Store = (*Store)(nil)

type objects struct {
	mu   sync.Mutex
	data map[string]object
}

type object struct {
	data    []byte
	version string
}

func newMap() *objects { return &objects{data: map[string]object{}} }

// New returns an empty store.
func New() *Store { return &Store{m: newMap()} }

// Version returns the version memstore gives to data: a hash of its bytes.
func Version(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	o, ok := s.m.data[key]
	if !ok {
		return nil, "", driver.Errorf(driver.NotFound, "no such key")
	}
	if int64(len(o.data)) > max {
		return nil, "", driver.TooLargeError(int64(len(o.data)), max)
	}
	return append([]byte{}, o.data...), o.version, nil
}

func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if err := check(s.m.data, key, cond); err != nil {
		return "", err
	}
	o := object{data: append([]byte{}, data...), version: Version(data)}
	s.m.data[key] = o
	return o.version, nil
}

func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if err := check(s.m.data, key, cond); err != nil {
		return err
	}
	delete(s.m.data, key)
	return nil
}

func check(m map[string]object, key string, cond driver.Cond) error {
	o, ok := m[key]
	switch cond.Kind {
	case driver.IfAbsent:
		if ok {
			return driver.Errorf(driver.PreconditionFailed, "key exists")
		}
	case driver.IfMatch:
		if !ok {
			return driver.Errorf(driver.PreconditionFailed, "key does not exist")
		}
		if o.version != cond.Version {
			return driver.Errorf(driver.PreconditionFailed, "version is %s, not %s", o.version, cond.Version)
		}
	}
	return nil
}

func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	var items []driver.Item
	for k, o := range s.m.data {
		if strings.HasPrefix(k, prefix) && k > after {
			items = append(items, driver.Item{Key: k, Version: o.version, Size: int64(len(o.data))})
		}
	}
	s.m.mu.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].Key < items[j].Key })
	if len(items) > limit {
		items = items[:limit]
	}
	return items, nil
}

// ErrorKind classifies errors; memstore only returns *driver.Error values
// and context errors, which the portable layer classifies itself.
func (s *Store) ErrorKind(error) driver.Kind { return driver.Unknown }

// Close does nothing: the objects stay for other openers of the same name.
func (s *Store) Close() error { return nil }
