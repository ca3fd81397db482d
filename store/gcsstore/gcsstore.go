package gcsstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/tenure-io/tenure/store/driver"
)

// MaxObjectNameLen is Cloud Storage's limit on an object name, in bytes of
// UTF-8. The store prefix counts against it.
const MaxObjectNameLen = 1024

// Options tune New. The zero value is the default.
type Options struct {
	// Endpoint names the server in error messages, such as
	// "http://127.0.0.1:4443". Empty means Cloud Storage. OpenURL sets it.
	Endpoint string
}

// Store is the Cloud Storage driver. It is safe for concurrent use by
// multiple goroutines, and across processes: every write is a conditional
// request that the server decides.
type Store struct {
	client *storage.Client
	bucket *storage.BucketHandle
	name   string // the bucket's name
	prefix string
	opts   Options
	owned  bool // Close closes client: OpenURL made it
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
)

// New returns a driver for the objects under prefix in bucket. A non-empty
// prefix is a directory: "/" is appended if it does not end in one. New
// makes no request; OpenURL also checks that the bucket can be listed (see
// CheckBucket). Wrap the result with store.New to use it.
//
// The driver takes *storage.Client itself rather than an interface: the
// client is a chain of concrete handle types (bucket, object, writer), and
// its seam for tests and custom transports is the HTTP client it is built
// with (option.WithHTTPClient, option.WithEndpoint). Requests are made as
// client is configured, except that conditional writes are never retried
// (see Put) and an unconditional delete always may be. Close does not close
// a client passed to New.
func New(client *storage.Client, bucket, prefix string, opts Options) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(driver.Permanent, "gcsstore: nil client")
	}
	if bucket == "" {
		return nil, driver.Errorf(driver.Permanent, "gcsstore: no bucket")
	}
	prefix, err := cleanPrefix(prefix)
	if err != nil {
		return nil, err
	}
	return &Store{client: client, bucket: client.Bucket(bucket), name: bucket, prefix: prefix, opts: opts}, nil
}

// cleanPrefix returns prefix with a trailing "/" if it is not empty, or an
// error if no key could be stored under it.
func cleanPrefix(prefix string) (string, error) {
	if strings.HasPrefix(prefix, "/") {
		// Cloud Storage would store "/p/k", which no tool shows as the
		// folder p.
		return "", driver.Errorf(driver.Permanent, "gcsstore: prefix %q starts with \"/\"", prefix)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if len(prefix) >= MaxObjectNameLen {
		return "", driver.Errorf(driver.Permanent, "gcsstore: prefix is %d bytes; object names are at most %d bytes including it", len(prefix), MaxObjectNameLen)
	}
	return prefix, nil
}

// Prefix returns the prefix that every key is stored under, with its
// trailing slash.
func (s *Store) Prefix() string { return s.prefix }

// MaxKeyLen is the longest key this store accepts: Cloud Storage's limit
// less the prefix.
func (s *Store) MaxKeyLen() int { return MaxObjectNameLen - len(s.prefix) }

// CheckKey implements driver.Limits: object names are at most 1,024 bytes,
// the prefix included, and Cloud Storage refuses the names ".", ".." and
// those starting with ".well-known/acme-challenge/".
func (s *Store) CheckKey(key string) error {
	if len(key) > s.MaxKeyLen() {
		return fmt.Errorf("gcsstore: key is %d bytes; with the store prefix %q (%d bytes) Cloud Storage allows keys of at most %d",
			len(key), s.prefix, len(s.prefix), s.MaxKeyLen())
	}
	switch name := s.prefix + key; {
	case name == "." || name == "..":
		return fmt.Errorf("gcsstore: Cloud Storage refuses the object name %q: use a store prefix", name)
	case strings.HasPrefix(name, ".well-known/acme-challenge/"):
		return fmt.Errorf("gcsstore: Cloud Storage refuses object names under .well-known/acme-challenge/")
	}
	return nil
}

// Retry policies for single calls. They merge with the client's own
// retry configuration (attempts, backoff), which they leave alone.
var (
	// A conditional write that the library repeats after a timeout or a
	// 5xx can fail with 412 against its own first attempt, which landed;
	// the caller resolves such outcomes by reading back
	// (store.PutResolved), which needs to see the first error. The library
	// counts a write with a generation precondition as idempotent and
	// would retry it.
	noRetry = storage.WithPolicy(storage.RetryNever)
	// An unconditional delete is safe to repeat (a delete of a missing
	// object succeeds), though the library does not count it idempotent.
	alwaysRetry = storage.WithPolicy(storage.RetryAlways)
)

// generation parses a version. ok is false for a string that cannot be the
// generation of any object: a write conditioned on it cannot apply.
// Generation 0 must never reach the library: ifGenerationMatch=0 means
// "does not exist", and a zero GenerationMatch means no condition at all.
func generation(version string) (gen int64, ok bool) {
	gen, err := strconv.ParseInt(version, 10, 64)
	if err != nil || gen <= 0 || strconv.FormatInt(gen, 10) != version {
		return 0, false
	}
	return gen, true
}

func version(gen int64) string { return strconv.FormatInt(gen, 10) }

// Get implements driver.Store with a media download; the version is the
// object's generation, from the same response as the bytes. The library
// retries it as the client is configured.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the object's size from its attributes before reading
// its body, and reads at most max+1 bytes of it.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	r, err := s.bucket.Object(s.prefix + key).NewReader(ctx)
	if err != nil {
		return nil, "", err
	}
	defer r.Close()
	gen := r.Attrs.Generation
	if gen <= 0 {
		return nil, "", driver.Errorf(driver.Permanent, "gcsstore: the server returned no object generation: it cannot be used for conditional writes")
	}
	// The reader checks the CRC32C of a whole object as it reaches the end.
	data, err := driver.ReadLimited(r, r.Attrs.Size, max)
	if err != nil {
		if driver.Classify(nil, err) == driver.TooLarge {
			return nil, "", err
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("read object: %w", errors.Join(ctx.Err(), err))
		}
		return nil, "", driver.Errorf(driver.Transient, "read object: %w", err)
	}
	return data, version(gen), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Put implements driver.Store with one multipart upload carrying
// ifGenerationMatch=0 (create) or ifGenerationMatch=GENERATION
// (compare-and-swap), sent once: the client's retry configuration is not
// used. The upload declares the value's CRC32C, so the server refuses bytes
// damaged on the way rather than storing them.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	var conds storage.Conditions
	switch cond.Kind {
	case driver.IfAbsent:
		conds.DoesNotExist = true
	case driver.IfMatch:
		gen, ok := generation(cond.Version)
		if !ok {
			return "", driver.Errorf(driver.PreconditionFailed, "gcsstore: %q is not an object generation, so no object has it", cond.Version)
		}
		conds.GenerationMatch = gen
	default:
		return "", driver.Errorf(driver.InvalidArgument, "gcsstore: put needs a condition, got %v", cond.Kind)
	}
	w := s.bucket.Object(s.prefix + key).If(conds).Retryer(noRetry).NewWriter(ctx)
	// One multipart request whatever the size, streamed from data: a value
	// larger than a chunk would otherwise go as a resumable upload of
	// several requests, and a smaller one would be copied into a buffer.
	w.ChunkSize = 0
	w.ContentType = "application/octet-stream"
	w.CRC32C = crc32.Checksum(data, castagnoli)
	w.SendCRC32C = true
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return "", s.writeError(err)
	}
	if err := w.Close(); err != nil {
		return "", s.writeError(err)
	}
	attrs := w.Attrs()
	if attrs == nil || attrs.Generation <= 0 {
		// The write applied but we cannot name its version; reading it
		// back (as PutResolved does for any ambiguous outcome) will.
		return "", driver.Errorf(driver.Transient, "gcsstore: the server accepted the write but returned no generation")
	}
	return version(attrs.Generation), nil
}

// writeError gives the classifications that depend on the request: an
// upload has no object to miss, so a 404 means the bucket is gone; and an
// error that is neither the service's error answer nor the context's (an answer
// that does not parse: a proxy's page, a cut or malformed document) leaves
// the upload's outcome unknown, so it is Transient, for PutResolved to
// settle.
func (s *Store) writeError(err error) error {
	status, _ := statusAndReason(err)
	switch k := classify(err); {
	case k == driver.NotFound:
		return driver.Errorf(driver.Permanent, "gcsstore: bucket %q does not exist at %s: %w", s.name, s.where(), err)
	case k == driver.Unknown && status == 0:
		return driver.Errorf(driver.Transient, "gcsstore: the upload may have been applied: %w", err)
	}
	return err
}

// Delete implements driver.Store. With a condition it sends
// ifGenerationMatch=GENERATION, once; without, the library may repeat it.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	obj := s.bucket.Object(s.prefix + key)
	switch cond.Kind {
	case driver.Unconditional:
		err := obj.Retryer(alwaysRetry).Delete(ctx)
		if errors.Is(err, storage.ErrObjectNotExist) {
			return nil
		}
		return err
	case driver.IfMatch:
		gen, ok := generation(cond.Version)
		if !ok {
			return driver.Errorf(driver.PreconditionFailed, "gcsstore: %q is not an object generation, so no object has it", cond.Version)
		}
		err := obj.If(storage.Conditions{GenerationMatch: gen}).Retryer(noRetry).Delete(ctx)
		if err != nil && classify(err) == driver.NotFound {
			// The key is missing, so its generation does not match.
			return &driver.Error{Kind: driver.PreconditionFailed, Err: fmt.Errorf("if-match on a missing key: %w", err)}
		}
		return err
	}
	return driver.Errorf(driver.InvalidArgument, "gcsstore: delete accepts if-match or no condition, got %v", cond.Kind)
}

// listAttrs are the only fields List asks for.
var listAttrs = []string{"Name", "Generation", "Size"}

// List implements driver.Store with objects.list, Prefix and StartOffset,
// in as many pages as it takes to fill limit. StartOffset is inclusive, so
// the listing starts at after itself and skips it: one item more per call
// than a strict bound would cost, and no unusual character (a NUL after
// the key) is sent to the server.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	q := &storage.Query{Prefix: s.prefix + prefix}
	if after != "" {
		q.StartOffset = s.prefix + after
	}
	if err := q.SetAttrSelection(listAttrs); err != nil {
		return nil, driver.Errorf(driver.Unknown, "gcsstore: %w", err)
	}
	it := s.bucket.Objects(ctx, q)
	// Cloud Storage returns at most 1,000 items a page.
	it.PageInfo().MaxSize = min(limit+1, 1000)
	var items []driver.Item
	for len(items) < limit {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, err
		}
		key, ok := strings.CutPrefix(a.Name, s.prefix)
		if !ok || (after != "" && key <= after) {
			continue
		}
		items = append(items, driver.Item{Key: key, Version: version(a.Generation), Size: a.Size})
	}
	return items, nil
}

// CheckBucket makes one cheap request (objects.list of at most one object
// under the prefix, which needs only storage.objects.list) and returns a
// Permanent error that says what is wrong if the bucket is missing or the
// credentials are refused. An endpoint that cannot be reached gives a
// Transient error.
func (s *Store) CheckBucket(ctx context.Context) error {
	q := &storage.Query{Prefix: s.prefix}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return driver.Errorf(driver.Unknown, "gcsstore: %w", err)
	}
	it := s.bucket.Objects(ctx, q)
	it.PageInfo().MaxSize = 1
	_, err := it.Next()
	if err == nil || errors.Is(err, iterator.Done) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("gcsstore: check bucket %q at %s: %w", s.name, s.where(), errors.Join(ctx.Err(), err))
	}
	status, _ := statusAndReason(err)
	switch kind := classify(err); {
	case errors.Is(err, storage.ErrBucketNotExist) || status == 404:
		return driver.Errorf(driver.Permanent, "gcsstore: bucket %q does not exist at %s: %w", s.name, s.where(), err)
	case status == 401 || (status == 403 && kind == driver.Permanent):
		return driver.Errorf(driver.Permanent, "gcsstore: access to bucket %q at %s denied: the credentials are wrong or do not allow storage.objects.list: %w", s.name, s.where(), err)
	case kind == driver.InvalidArgument:
		// Nothing else in the request can be wrong.
		return driver.Errorf(driver.Permanent, "gcsstore: %s refuses the bucket name %q: %w", s.where(), s.name, err)
	default:
		return driver.Errorf(kind, "gcsstore: check bucket %q at %s: %w", s.name, s.where(), err)
	}
}

func (s *Store) where() string {
	if s.opts.Endpoint == "" {
		return "Cloud Storage"
	}
	return s.opts.Endpoint
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return classify(err) }

// Close closes the client if OpenURL made it; a client passed to New is
// left to its owner.
func (s *Store) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}
