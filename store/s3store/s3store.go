package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// MaxObjectKeyLen is S3's limit on an object key, in bytes. The store prefix
// counts against it.
const MaxObjectKeyLen = 1024

// API is the part of *s3.Client that the driver uses. Pass New an
// *s3.Client of your own to choose its HTTP client, credentials or
// middleware.
type API interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	HeadBucket(ctx context.Context, in *s3.HeadBucketInput, optFns ...func(*s3.Options)) (*s3.HeadBucketOutput, error)
}

var _ API = (*s3.Client)(nil)

// Options tune New. The zero value is the default.
type Options struct {
	// Endpoint names the server in error messages, such as
	// "http://127.0.0.1:9000". Empty means AWS S3. Open sets it from the URL.
	Endpoint string
}

// Store is the S3 driver. It is safe for concurrent use by multiple
// goroutines, and across processes: every write is a conditional request
// that the server decides.
type Store struct {
	client API
	bucket string
	prefix string
	opts   Options
	// deletes finds out, before the first conditional delete, whether the
	// server enforces If-Match on DeleteObject (MinIO does not).
	deletes driver.DeleteCheck
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
)

// New returns a driver for the objects under prefix in bucket. A non-empty
// prefix is a directory: "/" is appended if it does not end in one. New
// makes no request; OpenURL also checks that the bucket exists (see
// CheckBucket). Wrap the result with store.New to use it.
//
// Requests are made as client is configured, except that conditional
// writes never use the client's retryer (see Put).
func New(client API, bucket, prefix string, opts Options) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(driver.Permanent, "s3store: nil client")
	}
	if bucket == "" {
		return nil, driver.Errorf(driver.Permanent, "s3store: no bucket")
	}
	if strings.HasPrefix(prefix, "/") {
		// S3 would store "/p/k", which no S3 tool shows as the folder p.
		return nil, driver.Errorf(driver.Permanent, "s3store: prefix %q starts with \"/\"", prefix)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if len(prefix) >= MaxObjectKeyLen {
		return nil, driver.Errorf(driver.Permanent, "s3store: prefix is %d bytes; S3 keys are at most %d bytes including it", len(prefix), MaxObjectKeyLen)
	}
	return &Store{client: client, bucket: bucket, prefix: prefix, opts: opts}, nil
}

// Prefix returns the prefix that every key is stored under, with its
// trailing slash.
func (s *Store) Prefix() string { return s.prefix }

// MaxKeyLen is the longest key this store accepts: S3's limit less the
// prefix.
func (s *Store) MaxKeyLen() int { return MaxObjectKeyLen - len(s.prefix) }

// CheckKey implements driver.Limits: S3 refuses keys longer than 1,024 bytes,
// and the prefix counts against that.
func (s *Store) CheckKey(key string) error {
	if len(key) > s.MaxKeyLen() {
		return fmt.Errorf("s3store: key is %d bytes; with the store prefix %q (%d bytes) S3 allows keys of at most %d",
			len(key), s.prefix, len(s.prefix), s.MaxKeyLen())
	}
	return nil
}

// noRetry turns off the SDK's retries for one call. A conditional write that
// the SDK repeats after a timeout or a 5xx can fail with 412 against its own
// first attempt, which landed; the caller resolves such outcomes by reading
// back (store.PutResolved), which needs to see the first error.
func noRetry(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

// Get implements driver.Store with GetObject; the version is the ETag. The
// SDK retries it as the client is configured.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the object's Content-Length before reading its body,
// and reads at most max+1 bytes of it; closing the body early drops the
// connection rather than draining the rest.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
	})
	if err != nil {
		return nil, "", err
	}
	defer out.Body.Close()
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	data, err := driver.ReadLimited(out.Body, size, max)
	if err != nil {
		if driver.Classify(nil, err) == driver.TooLarge {
			return nil, "", err
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("read object: %w", errors.Join(ctx.Err(), err))
		}
		return nil, "", driver.Errorf(driver.Transient, "read object: %w", err)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" {
		return nil, "", driver.Errorf(driver.Permanent, "the server returned no ETag: it cannot be used for conditional writes")
	}
	return data, etag, nil
}

// Put implements driver.Store with PutObject and If-None-Match: * or
// If-Match: version, sent once: the client's retryer is not used.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.prefix + key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	}
	switch cond.Kind {
	case driver.IfAbsent:
		in.IfNoneMatch = aws.String("*")
	case driver.IfMatch:
		in.IfMatch = aws.String(cond.Version)
	default:
		return "", driver.Errorf(driver.InvalidArgument, "s3store: put needs a condition, got %v", cond.Kind)
	}
	out, err := s.client.PutObject(ctx, in, noRetry)
	if err != nil {
		return "", conditionalError(err, cond)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" {
		// The write applied but we cannot name its version; reading it
		// back (as PutResolved does for any ambiguous outcome) will.
		return "", driver.Errorf(driver.Transient, "the server accepted the write but returned no ETag")
	}
	return etag, nil
}

// Delete implements driver.Store with DeleteObject; with a condition it
// sends If-Match: version, once. Before the first conditional delete it
// checks, once, on scratch keys, that the server enforces If-Match on
// DeleteObject (driver.DeleteCheck): on a server that does not (MinIO; and
// versitygw, which deletes a missing key "successfully") every conditional
// delete fails with an error of kind Unsupported, and nothing is deleted.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	in := &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
	}
	switch cond.Kind {
	case driver.Unconditional:
		// Idempotent, so the SDK may retry it.
		_, err := s.client.DeleteObject(ctx, in)
		return err
	case driver.IfMatch:
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.deletes.Check(ctx, s, s.describe(), s.deleteIfMatch); err != nil {
			return fmt.Errorf("s3store: %w", err)
		}
		return s.deleteIfMatch(ctx, key, cond)
	}
	return driver.Errorf(driver.InvalidArgument, "s3store: delete accepts if-match or no condition, got %v", cond.Kind)
}

// deleteIfMatch sends a DeleteObject with If-Match, once: a server that
// ignores the header deletes whatever is there (see driver.DeleteCheck).
func (s *Store) deleteIfMatch(ctx context.Context, key string, cond driver.Cond) error {
	in := &s3.DeleteObjectInput{
		Bucket:  aws.String(s.bucket),
		Key:     aws.String(s.prefix + key),
		IfMatch: aws.String(cond.Version),
	}
	if _, err := s.client.DeleteObject(ctx, in, noRetry); err != nil {
		return conditionalError(err, cond)
	}
	return nil
}

// describe names the server and bucket in errors.
func (s *Store) describe() string {
	if s.opts.Endpoint == "" {
		return fmt.Sprintf("AWS S3 (bucket %q)", s.bucket)
	}
	return fmt.Sprintf("the S3 server at %s (bucket %q)", s.opts.Endpoint, s.bucket)
}

// conditionalError gives the one classification that depends on the
// request: S3 answers an If-Match write on a missing key with 404 NoSuchKey,
// which for us means the condition does not hold.
func conditionalError(err error, cond driver.Cond) error {
	if cond.Kind != driver.IfMatch {
		return err
	}
	status, code := awsutil.StatusAndCode(err)
	if status == 404 && code != "NoSuchBucket" {
		return &driver.Error{Kind: driver.PreconditionFailed, Err: fmt.Errorf("if-match on a missing key: %w", err)}
	}
	return err
}

// List implements driver.Store with as many ListObjectsV2 requests as it
// takes to fill limit: servers may return fewer keys than asked for.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.prefix + prefix),
	}
	if after != "" {
		in.StartAfter = aws.String(s.prefix + after)
	}
	var items []driver.Item
	for len(items) < limit {
		// S3 returns at most 1,000 keys a page whatever MaxKeys says.
		in.MaxKeys = aws.Int32(int32(min(limit-len(items), 1000)))
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, o := range out.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok || len(items) == limit {
				continue
			}
			items = append(items, driver.Item{Key: key, Version: aws.ToString(o.ETag), Size: aws.ToInt64(o.Size)})
		}
		if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
			break
		}
		in.ContinuationToken = out.NextContinuationToken
	}
	return items, nil
}

// CheckBucket makes one cheap request (HeadBucket) and returns a Permanent
// error that says what is wrong if the bucket is missing or the credentials
// are refused. An endpoint that cannot be reached gives a Transient error.
func (s *Store) CheckBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	where := s.opts.Endpoint
	if where == "" {
		where = "AWS S3"
	}
	if ctx.Err() != nil {
		return fmt.Errorf("s3store: check bucket %q at %s: %w", s.bucket, where, errors.Join(ctx.Err(), err))
	}
	if status, _ := awsutil.StatusAndCode(err); status >= 300 && status < 500 {
		// A HEAD response has no body, so no error code, and servers
		// disagree on the status: versitygw answers an unknown access key
		// with 404. On this failure path only, spend a second request
		// whose error names the cause.
		_, lerr := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket:  aws.String(s.bucket),
			Prefix:  aws.String(s.prefix),
			MaxKeys: aws.Int32(1),
		})
		if lerr == nil {
			return nil
		}
		if _, code := awsutil.StatusAndCode(lerr); code != "" {
			err = lerr
		}
	}
	status, code := awsutil.StatusAndCode(err)
	switch {
	case code == "NoSuchBucket" || code == "" && status == 404:
		return driver.Errorf(driver.Permanent, "s3store: bucket %q does not exist at %s: %w", s.bucket, where, err)
	case authCodes[code] || status == 401 || status == 403:
		return driver.Errorf(driver.Permanent, "s3store: access to bucket %q at %s denied: the credentials are wrong or do not allow s3:ListBucket: %w", s.bucket, where, err)
	case status >= 300 && status < 400 || code == "AuthorizationHeaderMalformed":
		return driver.Errorf(driver.Permanent, "s3store: bucket %q at %s: is the region right? %w", s.bucket, where, err)
	}
	return driver.Errorf(errorKinds.Kind(err), "s3store: check bucket %q at %s: %w", s.bucket, where, err)
}

// authCodes are the error codes that mean the server refused the
// credentials.
var authCodes = map[string]bool{
	"AccessDenied":          true,
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"ExpiredToken":          true,
	"InvalidToken":          true,
	"XAdminUserNotFound":    true, // versitygw's answer to an unknown access key
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return errorKinds.Kind(err) }

// Close does nothing: an SDK client holds no resources but idle
// connections, which its transport closes after a while.
func (s *Store) Close() error { return nil }
