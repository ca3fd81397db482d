package etcdstore

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/store/driver"
)

// Client is the part of *clientv3.Client that the driver uses. Pass New a
// client of your own to choose its endpoints, TLS, credentials or dial
// options; see New for the settings a client needs.
type Client interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error)
	Txn(ctx context.Context) clientv3.Txn
	Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan
}

var _ Client = (*clientv3.Client)(nil)

// Store is the etcd driver. It is safe for concurrent use by multiple
// goroutines, and across processes: every conditional write is one etcd
// transaction that the cluster decides.
type Store struct {
	client Client
	prefix string
	closer io.Closer // the client, when OpenURL made it

	// ctx is cancelled by Close, which ends every watch.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	watches sync.WaitGroup
}

var (
	_ driver.Store   = (*Store)(nil)
	_ driver.Watcher = (*Store)(nil)
)

// New returns a driver for the keys under prefix, reached through client.
// A non-empty prefix is a directory: "/" is appended if it does not end in
// one. New makes no request and does not take ownership of client: Close
// leaves it open. Wrap the result with store.New to use it.
//
// Build the client as NewClientConfig does, or at least with
// MaxUnaryRetries: 1, so that the client never repeats a transaction (see
// the package documentation), and with MaxCallSendMsgSize above the
// largest value you write (the client's default is 2 MiB).
func New(client Client, prefix string) (*Store, error) {
	if client == nil {
		return nil, errorf(driver.Permanent, "nil client")
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Store{client: client, prefix: prefix, ctx: ctx, cancel: cancel}, nil
}

// Prefix returns the prefix that every key is stored under, with its
// trailing slash (empty for a store over the whole key space).
func (s *Store) Prefix() string { return s.prefix }

// formatVersion returns the version of a revision: its decimal form.
func formatVersion(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseVersion returns the revision a version names, or false for a string
// this driver never issued. Revision 0 is refused: a missing key has mod
// revision 0 in an etcd comparison, so IfMatch("0") would match it.
func parseVersion(v string) (int64, bool) {
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev <= 0 || formatVersion(rev) != v {
		return 0, false
	}
	return rev, true
}

// requireLeader makes a member that has lost its leader refuse a request
// at once (etcdserver: no leader) rather than hold it until it times out:
// a client cut off with a minority learns so quickly, and the refusal is
// definite, as it comes before the request is proposed.
func requireLeader(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// Get implements driver.Store with a linearizable range read of one key;
// the version is the key's mod revision.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the value's length before handing it on. etcd returns
// a value only whole, bounded by the server's request size limit (1.5 MiB
// by default).
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	var resp *clientv3.GetResponse
	err := s.read(ctx, func() (err error) {
		resp, err = s.client.Get(requireLeader(ctx), s.prefix+key)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if len(resp.Kvs) == 0 {
		return nil, "", driver.Errorf(driver.NotFound, "no such key")
	}
	kv := resp.Kvs[0]
	data := kv.Value
	if int64(len(data)) > max {
		return nil, "", driver.TooLargeError(int64(len(data)), max)
	}
	if data == nil {
		data = []byte{}
	}
	// The value was decoded into a slice of its own: it is the caller's.
	return data, formatVersion(kv.ModRevision), nil
}

// Put implements driver.Store with one transaction: If(create revision = 0)
// or If(mod revision = version), Then(put), Else(read the key's revision
// for the error message). It is sent once: see the package documentation
// on retries.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	k := s.prefix + key
	var cmp clientv3.Cmp
	switch cond.Kind {
	case driver.IfAbsent:
		cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	case driver.IfMatch:
		rev, ok := parseVersion(cond.Version)
		if !ok {
			return "", driver.Errorf(driver.PreconditionFailed, "version %q was not issued by an etcd store", cond.Version)
		}
		cmp = clientv3.Compare(clientv3.ModRevision(k), "=", rev)
	default:
		return "", errorf(driver.InvalidArgument, "put needs a condition, got %v", cond.Kind)
	}
	// string(data) copies: Put does not retain data.
	resp, err := s.client.Txn(requireLeader(ctx)).
		If(cmp).
		Then(clientv3.OpPut(k, string(data))).
		Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return "", writeError(err, len(data))
	}
	if !resp.Succeeded {
		return "", refused(resp, cond)
	}
	// The transaction made exactly one change, so the revision it
	// produced is the key's new mod revision.
	return formatVersion(resp.Header.Revision), nil
}

// Delete implements driver.Store: with IfMatch, a transaction
// If(mod revision = version) Then(delete); without, a plain delete, which
// succeeds whether or not the key exists.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := s.prefix + key
	switch cond.Kind {
	case driver.Unconditional:
		_, err := s.client.Delete(requireLeader(ctx), k)
		return writeError(err, 0)
	case driver.IfMatch:
		rev, ok := parseVersion(cond.Version)
		if !ok {
			return driver.Errorf(driver.PreconditionFailed, "version %q was not issued by an etcd store", cond.Version)
		}
		resp, err := s.client.Txn(requireLeader(ctx)).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpDelete(k)).
			Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).
			Commit()
		if err != nil {
			return writeError(err, 0)
		}
		if !resp.Succeeded {
			return refused(resp, cond)
		}
		return nil
	}
	return errorf(driver.InvalidArgument, "delete accepts if-match or no condition, got %v", cond.Kind)
}

// refused builds the PreconditionFailed error of a transaction whose
// comparison failed, naming what the Else branch found.
func refused(resp *clientv3.TxnResponse, cond driver.Cond) error {
	var cur *mvccpb.KeyValue
	if len(resp.Responses) == 1 {
		if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) == 1 {
			cur = r.Kvs[0]
		}
	}
	switch {
	case cond.Kind == driver.IfAbsent && cur != nil:
		return driver.Errorf(driver.PreconditionFailed, "key exists (version %s)", formatVersion(cur.ModRevision))
	case cond.Kind == driver.IfAbsent:
		return driver.Errorf(driver.PreconditionFailed, "key exists")
	case cur == nil:
		return driver.Errorf(driver.PreconditionFailed, "key does not exist")
	}
	return driver.Errorf(driver.PreconditionFailed, "version is %s, not %s", formatVersion(cur.ModRevision), cond.Version)
}

// List implements driver.Store with one range read from the key after
// after (or the prefix) to the end of the prefix, limited to limit keys.
// etcd returns keys in byte order. Values are read too, for their sizes.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	full := s.prefix + prefix
	start := full
	if after != "" {
		// The smallest key greater than after.
		if a := s.prefix + after + "\x00"; a > start {
			start = a
		}
	}
	// "\x00" as a range end means "to the end of the key space", for an
	// empty prefix or one of only 0xff bytes.
	end := clientv3.GetPrefixRangeEnd(full)
	if end != "\x00" && start >= end {
		return nil, nil
	}
	if start == "" {
		start = "\x00" // etcd refuses an empty key; no key sorts below "\x00"
	}
	var resp *clientv3.GetResponse
	err := s.read(ctx, func() (err error) {
		resp, err = s.client.Get(requireLeader(ctx), start,
			clientv3.WithRange(end),
			clientv3.WithLimit(int64(limit)),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		return err
	})
	if err != nil {
		return nil, err
	}
	items := make([]driver.Item, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key, ok := strings.CutPrefix(string(kv.Key), s.prefix)
		if !ok || len(items) == limit {
			continue
		}
		items = append(items, driver.Item{Key: key, Version: formatVersion(kv.ModRevision), Size: int64(len(kv.Value))})
	}
	return items, nil
}

// readAttempts bounds how often the driver repeats a read. Clients built
// by NewClientConfig repeat nothing themselves (so that no write is ever
// sent twice); reads are safe to repeat, and a brief election or a
// refreshed auth token should not fail them.
const readAttempts = 3

func (s *Store) read(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt == readAttempts || ctx.Err() != nil || classify(err) != driver.Transient {
			return err
		}
		// 25 ms, then 50 ms, with jitter.
		d := time.Duration(float64(25*time.Millisecond<<(attempt-1)) * (0.8 + 0.4*rand.Float64()))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return classify(err) }

// Close ends every watch and waits for their goroutines, then closes the
// client if OpenURL made it. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.watches.Wait()
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}
