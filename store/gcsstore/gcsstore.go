package gcsstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/storage/v1"

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
	objects *storage.ObjectsService
	name    string // the bucket's name
	prefix  string
	opts    Options
	// deletes finds out, before the first conditional delete, whether the
	// server enforces ifGenerationMatch on a delete (fake-gcs-server does
	// not).
	deletes driver.DeleteCheck
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
// The driver takes *storage.Service (google.golang.org/api/storage/v1)
// itself rather than an interface: the service is a chain of concrete call
// types, and its seam for tests and custom transports is the HTTP client
// it is built with (option.WithHTTPClient, option.WithEndpoint; see
// ClientOptions). The service does not retry; the driver repeats the
// requests that may be repeated (see Get), and sends conditional writes
// once (see Put). Close leaves the service to its owner.
func New(service *storage.Service, bucket, prefix string, opts Options) (*Store, error) {
	if service == nil || service.Objects == nil {
		return nil, driver.Errorf(driver.Permanent, "gcsstore: nil service")
	}
	if _, err := url.Parse(service.BasePath); err != nil {
		// The service would panic on its first request.
		return nil, driver.Errorf(driver.Permanent, "gcsstore: the service's endpoint %q is not a URL: %w", service.BasePath, err)
	}
	if bucket == "" {
		return nil, driver.Errorf(driver.Permanent, "gcsstore: no bucket")
	}
	prefix, err := cleanPrefix(prefix)
	if err != nil {
		return nil, err
	}
	return &Store{objects: service.Objects, name: bucket, prefix: prefix, opts: opts}, nil
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

// Attempts of a request that may be repeated (a read, a listing, an
// unconditional delete), which the service makes once: three, as the AWS
// SDK makes for s3store, with pauses of 100 ms to 1 s. More, or longer,
// would hide an outage from a caller with deadlines of its own (a leader's
// renew deadline).
const (
	maxAttempts = 3
	firstPause  = 100 * time.Millisecond
	maxPause    = time.Second
)

// repeat calls call until it succeeds, fails with an error that is neither
// transient nor throttling, ctx ends, or maxAttempts calls have failed.
// Only requests that are safe to repeat go through it: never a
// conditional write, which could fail with 412 against its own first
// attempt, landed (see Put).
func repeat(ctx context.Context, call func() error) error {
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil {
			return nil
		}
		if k := kindOf(err); (k != driver.Transient && k != driver.Throttled) || ctx.Err() != nil {
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("gcsstore: %d attempts failed, the last with: %w", attempt, err)
		}
		t := time.NewTimer(pause(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gcsstore: waiting to try again: %w", errors.Join(ctx.Err(), err))
		}
	}
}

// pause is the wait after failed attempt n (from 1): 100 ms doubling up to
// 1 s, with full jitter so that processes that failed together spread out.
func pause(n int) time.Duration {
	d := min(firstPause<<(n-1), maxPause)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// kindOf is the kind of an error this driver returns: the kind it attached,
// else its classification.
func kindOf(err error) driver.Kind {
	var de *driver.Error
	if errors.As(err, &de) {
		return de.Kind
	}
	return classify(err)
}

// generation parses a version. ok is false for a string that cannot be the
// generation of any object: a write conditioned on it cannot apply.
// Generation 0 must never be sent as a version: ifGenerationMatch=0 means
// "does not exist".
func generation(version string) (gen int64, ok bool) {
	gen, err := strconv.ParseInt(version, 10, 64)
	if err != nil || gen <= 0 || strconv.FormatInt(gen, 10) != version {
		return 0, false
	}
	return gen, true
}

func version(gen int64) string { return strconv.FormatInt(gen, 10) }

// Get implements driver.Store with a media download; the version is the
// object's generation, from the same response as the bytes. A download
// answered with a transient error or throttling, or whose body breaks off
// or fails its checksum, is made again, up to three attempts with pauses
// of 100 ms to 1 s.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the object's size from the response's Content-Length
// before reading its body, and reads at most max+1 bytes of it.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	var (
		data []byte
		gen  int64
	)
	err := repeat(ctx, func() error {
		var err error
		data, gen, err = s.download(ctx, s.prefix+key, max)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return data, version(gen), nil
}

// download makes one attempt of GetLimited.
func (s *Store) download(ctx context.Context, name string, max int64) ([]byte, int64, error) {
	res, err := s.objects.Get(s.name, name).Context(ctx).Download()
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	h := res.Header.Get("X-Goog-Generation")
	gen, err := strconv.ParseInt(h, 10, 64)
	if err != nil || gen <= 0 {
		return nil, 0, driver.Errorf(driver.Permanent, "gcsstore: the server returned no object generation (X-Goog-Generation %q): it cannot be used for conditional writes", h)
	}
	body := io.Reader(res.Body)
	if want, ok := announcedCRC32C(res); ok {
		body = &crcReader{r: res.Body, want: want}
	}
	data, err := driver.ReadLimited(body, res.ContentLength, max)
	if err != nil {
		if driver.Classify(nil, err) == driver.TooLarge {
			return nil, 0, err
		}
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("read object: %w", errors.Join(ctx.Err(), err))
		}
		return nil, 0, driver.Errorf(driver.Transient, "read object: %w", err)
	}
	return data, gen, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// announcedCRC32C returns the CRC32C of the object that res announces in
// X-Goog-Hash ("crc32c=BASE64,md5=BASE64"), if it applies to the bytes of
// the body: not when the body was decompressed on the way, by the server
// (the object is stored gzipped) or by the HTTP client, since the CRC32C is
// that of the stored bytes.
func announcedCRC32C(res *http.Response) (uint32, bool) {
	if res.Uncompressed || (res.Header.Get("X-Goog-Stored-Content-Encoding") == "gzip" && res.Header.Get("Content-Encoding") != "gzip") {
		return 0, false
	}
	for _, h := range res.Header.Values("X-Goog-Hash") {
		for _, v := range strings.Split(h, ",") {
			b64, ok := strings.CutPrefix(strings.TrimSpace(v), "crc32c=")
			if !ok {
				continue
			}
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil && len(b) == 4 {
				return binary.BigEndian.Uint32(b), true
			}
		}
	}
	return 0, false
}

// crcReader checks, at the end of r, that the bytes read have the CRC32C
// want.
type crcReader struct {
	r         io.Reader
	got, want uint32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.got = crc32.Update(c.got, castagnoli, p[:n])
	if err == io.EOF && c.got != c.want {
		return n, fmt.Errorf("gcsstore: the bytes read have CRC32C %s, the object %s: they were damaged on the way", encodeCRC32C(c.got), encodeCRC32C(c.want))
	}
	return n, err
}

// encodeCRC32C is a CRC32C as the JSON API writes it: the base64 of its
// big-endian bytes.
func encodeCRC32C(crc uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc))
}

// Put implements driver.Store with one multipart upload carrying
// ifGenerationMatch=0 (create) or ifGenerationMatch=GENERATION
// (compare-and-swap), sent once. The upload declares the value's CRC32C,
// so the server refuses bytes damaged on the way rather than storing them.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	var gen int64 // 0: the object must not exist
	switch cond.Kind {
	case driver.IfAbsent:
	case driver.IfMatch:
		var ok bool
		if gen, ok = generation(cond.Version); !ok {
			return "", driver.Errorf(driver.PreconditionFailed, "gcsstore: %q is not an object generation, so no object has it", cond.Version)
		}
	default:
		return "", driver.Errorf(driver.InvalidArgument, "gcsstore: put needs a condition, got %v", cond.Kind)
	}
	name := s.prefix + key
	obj := &storage.Object{
		Bucket:      s.name,
		Name:        name,
		ContentType: "application/octet-stream",
		Crc32c:      encodeCRC32C(crc32.Checksum(data, castagnoli)),
	}
	// ChunkSize 0: one multipart request whatever the size, streamed from
	// data, where a value larger than a chunk would go as a resumable
	// upload of several requests and a smaller one be copied into a
	// buffer. The call is made without WithRetry: the service then sends
	// it once.
	got, err := s.objects.Insert(s.name, obj).Name(name).
		Media(bytes.NewReader(data), googleapi.ChunkSize(0)).
		IfGenerationMatch(gen).
		Fields("generation").
		Context(ctx).Do()
	if err != nil {
		return "", s.writeError(err)
	}
	if got.Generation <= 0 {
		// The write applied but we cannot name its version; reading it
		// back (as PutResolved does for any ambiguous outcome) will.
		return "", driver.Errorf(driver.Transient, "gcsstore: the server accepted the write but returned no generation")
	}
	return version(got.Generation), nil
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
		return s.bucketMissing(err)
	case k == driver.Unknown && status == 0:
		return driver.Errorf(driver.Transient, "gcsstore: the upload may have been applied: %w", err)
	}
	return err
}

func (s *Store) bucketMissing(err error) error {
	return driver.Errorf(driver.Permanent, "gcsstore: bucket %q does not exist at %s: %w", s.name, s.where(), err)
}

// Delete implements driver.Store. With a condition it sends
// ifGenerationMatch=GENERATION, once, after checking, once, on scratch
// keys, that the server enforces it (driver.DeleteCheck; fake-gcs-server
// does not, and there every conditional delete fails with an error of kind
// Unsupported, deleting nothing); without, it is made again after a
// transient error or throttling, as Get is: a delete of a missing object
// succeeds, so a repeat whose first attempt landed does too.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	call := s.objects.Delete(s.name, s.prefix+key).Context(ctx)
	switch cond.Kind {
	case driver.Unconditional:
		err := repeat(ctx, func() error { return call.Do() })
		if status, _ := statusAndReason(err); status == http.StatusNotFound {
			return nil
		}
		return err
	case driver.IfMatch:
		if _, ok := generation(cond.Version); !ok {
			return s.deleteIfMatch(ctx, key, cond) // refused without a request
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.deletes.Check(ctx, s, fmt.Sprintf("%s (bucket %q)", s.where(), s.name), s.deleteIfMatch); err != nil {
			return fmt.Errorf("gcsstore: %w", err)
		}
		return s.deleteIfMatch(ctx, key, cond)
	}
	return driver.Errorf(driver.InvalidArgument, "gcsstore: delete accepts if-match or no condition, got %v", cond.Kind)
}

// deleteIfMatch sends a delete with ifGenerationMatch, once: a server that
// ignores it deletes whatever is there (see driver.DeleteCheck).
func (s *Store) deleteIfMatch(ctx context.Context, key string, cond driver.Cond) error {
	gen, ok := generation(cond.Version)
	if !ok {
		return driver.Errorf(driver.PreconditionFailed, "gcsstore: %q is not an object generation, so no object has it", cond.Version)
	}
	err := s.objects.Delete(s.name, s.prefix+key).Context(ctx).IfGenerationMatch(gen).Do()
	if err != nil && classify(err) == driver.NotFound {
		// The key is missing, so its generation does not match.
		return &driver.Error{Kind: driver.PreconditionFailed, Err: fmt.Errorf("if-match on a missing key: %w", err)}
	}
	return err
}

// List implements driver.Store with objects.list, prefix and startOffset,
// in as many pages as it takes to fill limit, each asking for the name,
// generation and size of items only. startOffset is inclusive, so the
// listing starts at after itself and skips it: one item more per call than
// a strict bound would cost, and no unusual character (a NUL after the key)
// is sent to the server. Each page is requested again after a transient
// error or throttling, as Get is.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	// Cloud Storage returns at most 1,000 items a page.
	call := s.objects.List(s.name).Prefix(s.prefix+prefix).
		MaxResults(int64(min(limit, 999)+1)).
		Fields("items(name,generation,size)", "nextPageToken").
		Context(ctx)
	if after != "" {
		call.StartOffset(s.prefix + after)
	}
	var items []driver.Item
	for len(items) < limit {
		var page *storage.Objects
		err := repeat(ctx, func() error {
			var err error
			page, err = call.Do()
			return err
		})
		if err != nil {
			if classify(err) == driver.NotFound {
				return nil, s.bucketMissing(err)
			}
			return nil, err
		}
		for _, o := range page.Items {
			key, ok := strings.CutPrefix(o.Name, s.prefix)
			if !ok || (after != "" && key <= after) {
				continue
			}
			items = append(items, driver.Item{Key: key, Version: version(o.Generation), Size: int64(o.Size)})
			if len(items) == limit {
				break
			}
		}
		if page.NextPageToken == "" {
			break
		}
		call.PageToken(page.NextPageToken)
	}
	return items, nil
}

// CheckBucket makes one cheap request (objects.list of at most one object
// under the prefix, which needs only storage.objects.list) and returns a
// Permanent error that says what is wrong if the bucket is missing or the
// credentials are refused. An endpoint that cannot be reached gives a
// Transient error. The request is made again after a transient error or
// throttling, as Get is.
func (s *Store) CheckBucket(ctx context.Context) error {
	call := s.objects.List(s.name).Prefix(s.prefix).MaxResults(1).Fields("items(name)").Context(ctx)
	err := repeat(ctx, func() error {
		_, err := call.Do()
		return err
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("gcsstore: check bucket %q at %s: %w", s.name, s.where(), errors.Join(ctx.Err(), err))
	}
	status, _ := statusAndReason(err)
	switch kind := classify(err); {
	case status == http.StatusNotFound:
		return s.bucketMissing(err)
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

// Close implements driver.Store. It has nothing to release: a service
// holds no resources beyond its HTTP client's idle connections, which its
// transport closes after their idle timeout, and a service passed to New
// is its owner's.
func (s *Store) Close() error { return nil }
