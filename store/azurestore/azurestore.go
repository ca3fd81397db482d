package azurestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tenure-io/tenure/store/driver"
)

// MaxValueSize is the largest value Put accepts, in bytes: the most a
// single Put Blob request carries as the SDK's Upload defines it
// (blockblob.MaxUploadBlobBytes, 256 MiB). A larger value would need
// several requests, which cannot be one conditional write.
const MaxValueSize = blockblob.MaxUploadBlobBytes

// API is the part of *container.Client that the driver uses. Pass New a
// *container.Client of your own to choose its credentials, HTTP client or
// pipeline policies.
type API interface {
	NewBlockBlobClient(blobName string) *blockblob.Client
	NewListBlobsFlatPager(o *container.ListBlobsFlatOptions) *runtime.Pager[container.ListBlobsFlatResponse]
	URL() string
}

var _ API = (*container.Client)(nil)

// Options tune New. The zero value is the default.
type Options struct {
	// Endpoint names the container in error messages, such as
	// "http://127.0.0.1:10000/devstoreaccount1/tenure". Empty means the
	// client's container URL without its query (a SAS token).
	Endpoint string
}

// Store is the Azure Blob Storage driver. It is safe for concurrent use by
// multiple goroutines, and across processes: every write is a conditional
// request that the service decides.
type Store struct {
	client API
	prefix string
	opts   Options
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
)

// New returns a driver for the blobs under prefix in the container that
// client addresses. A non-empty prefix is a directory: "/" is appended if
// it does not end in one. New makes no request; OpenURL also checks that
// the container exists and the credentials are accepted (see
// CheckContainer). Wrap the result with store.New to use it.
//
// Requests are made as client is configured, except that conditional
// writes are never retried by the SDK (see Put).
func New(client API, prefix string, opts Options) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(driver.Permanent, "azurestore: nil client")
	}
	if strings.HasPrefix(prefix, "/") {
		return nil, driver.Errorf(driver.Permanent, "azurestore: prefix %q starts with \"/\"", prefix)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if err := checkName(prefix, true); err != nil {
		return nil, driver.Errorf(driver.Permanent, "azurestore: prefix %q: %w", prefix, err)
	}
	if opts.Endpoint == "" {
		opts.Endpoint = withoutQuery(client.URL())
	}
	return &Store{client: client, prefix: prefix, opts: opts}, nil
}

// withoutQuery drops the query of a container URL, which holds the
// signature when the client uses a SAS, so that it can go in error messages.
func withoutQuery(u string) string {
	u, _, _ = strings.Cut(u, "?")
	return u
}

// Prefix returns the prefix that every key is stored under, with its
// trailing slash.
func (s *Store) Prefix() string { return s.prefix }

// MaxKeyLen is the longest key, in bytes, that this store accepts: Azure's
// limit on a blob name less the prefix.
func (s *Store) MaxKeyLen() int { return MaxBlobNameLen - len(s.prefix) }

// CheckKey implements driver.Limits: it refuses keys that Azure Blob
// Storage cannot store under their own name (see checkName).
func (s *Store) CheckKey(key string) error {
	if len(key) > s.MaxKeyLen() {
		return fmt.Errorf("azurestore: key is %d bytes; with the store prefix %q (%d bytes) Azure allows keys of at most %d",
			len(key), s.prefix, len(s.prefix), s.MaxKeyLen())
	}
	if err := checkName(s.prefix+key, false); err != nil {
		return fmt.Errorf("azurestore: key %q: %w", key, err)
	}
	return nil
}

// MaxValueSize is the largest value, in bytes, that Put accepts.
func (s *Store) MaxValueSize() int { return MaxValueSize }

// noRetry turns off the SDK's retries for one call. A conditional write that
// the SDK repeats after a timeout or a 5xx can fail with 412 (or 409)
// against its own first attempt, which landed; the caller resolves such
// outcomes by reading back (store.PutResolved), which needs to see the
// first error. The options given here replace the client's for the call.
func noRetry(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

func conditions(cond driver.Cond) *blob.AccessConditions {
	m := &blob.ModifiedAccessConditions{}
	switch cond.Kind {
	case driver.IfAbsent:
		m.IfNoneMatch = new(azcore.ETagAny)
	case driver.IfMatch:
		m.IfMatch = new(azcore.ETag(cond.Version))
	}
	return &blob.AccessConditions{ModifiedAccessConditions: m}
}

// Get implements driver.Store with Get Blob; the version is the ETag. The
// SDK retries it as the client is configured.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the blob's Content-Length before reading its body, and
// reads at most max+1 bytes of it.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	resp, err := s.client.NewBlockBlobClient(s.prefix+key).DownloadStream(ctx, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	size := int64(-1)
	if resp.ContentLength != nil {
		size = *resp.ContentLength
	}
	data, err := driver.ReadLimited(resp.Body, size, max)
	if err != nil {
		if driver.Classify(nil, err) == driver.TooLarge {
			return nil, "", err
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("read blob: %w", errors.Join(ctx.Err(), err))
		}
		return nil, "", driver.Errorf(driver.Transient, "read blob: %w", err)
	}
	if resp.ETag == nil || *resp.ETag == "" {
		return nil, "", driver.Errorf(driver.Permanent, "the service returned no ETag: it cannot be used for conditional writes")
	}
	return data, string(*resp.ETag), nil
}

// Put implements driver.Store with Put Blob (a block blob in one request)
// and If-None-Match: * or If-Match: version, sent once: the SDK's retry
// policy is turned off for the call.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if cond.Kind != driver.IfAbsent && cond.Kind != driver.IfMatch {
		return "", driver.Errorf(driver.InvalidArgument, "azurestore: put needs a condition, got %v", cond.Kind)
	}
	if len(data) > MaxValueSize {
		return "", driver.Errorf(driver.InvalidArgument, "azurestore: value is %d bytes; a single Put Blob request carries at most %d", len(data), MaxValueSize)
	}
	resp, err := s.client.NewBlockBlobClient(s.prefix+key).Upload(noRetry(ctx),
		streaming.NopCloser(bytes.NewReader(data)),
		&blockblob.UploadOptions{AccessConditions: conditions(cond)})
	if err != nil {
		return "", conditionalError(err, cond)
	}
	if resp.ETag == nil || *resp.ETag == "" {
		// The write applied but we cannot name its version; reading it
		// back (as PutResolved does for any ambiguous outcome) will.
		return "", driver.Errorf(driver.Transient, "the service accepted the write but returned no ETag")
	}
	return string(*resp.ETag), nil
}

// Delete implements driver.Store with Delete Blob, snapshots included;
// with a condition it sends If-Match: version, once.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	o := &blob.DeleteOptions{DeleteSnapshots: new(blob.DeleteSnapshotsOptionTypeInclude)}
	c := s.client.NewBlockBlobClient(s.prefix + key)
	switch cond.Kind {
	case driver.Unconditional:
		// Idempotent, so the SDK may retry it.
		_, err := c.Delete(ctx, o)
		if bloberror.HasCode(err, bloberror.BlobNotFound) {
			return nil
		}
		return err
	case driver.IfMatch:
		o.AccessConditions = conditions(cond)
		if _, err := c.Delete(noRetry(ctx), o); err != nil {
			return conditionalError(err, cond)
		}
		return nil
	}
	return driver.Errorf(driver.InvalidArgument, "azurestore: delete accepts if-match or no condition, got %v", cond.Kind)
}

// List implements driver.Store with List Blobs (flat), as many pages as it
// takes to fill limit. The listing starts at the key after through the
// startFrom parameter (service version 2026-02-06 and later; sent by
// ListPolicy), and keys up to after are also skipped here: a service or a
// client that does not send startFrom costs more pages, never a wrong
// answer.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	full := s.prefix + prefix
	o := &container.ListBlobsFlatOptions{
		Prefix: &full,
		// One more than limit, as startFrom is inclusive; the service
		// returns at most 5,000 a page whatever MaxResults says.
		MaxResults: new(int32(min(limit+1, 5000))),
	}
	if after != "" && s.prefix+after >= full {
		ctx = withStartFrom(ctx, s.prefix+after) // see ListPolicy
	}
	pager := s.client.NewListBlobsFlatPager(o)
	var items []driver.Item
	for len(items) < limit && pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range page.Segment.BlobItems {
			if b == nil || b.Name == nil || b.Properties == nil {
				continue
			}
			if b.Deleted != nil && *b.Deleted {
				continue
			}
			key, ok := strings.CutPrefix(*b.Name, s.prefix)
			if !ok || !strings.HasPrefix(key, prefix) || key <= after || len(items) == limit {
				continue
			}
			var size int64
			if b.Properties.ContentLength != nil {
				size = *b.Properties.ContentLength
			}
			var etag string
			if b.Properties.ETag != nil {
				etag = quoteETag(string(*b.Properties.ETag))
			}
			items = append(items, driver.Item{Key: key, Version: etag, Size: size})
		}
	}
	return items, nil
}

// quoteETag returns etag as response headers carry it. Azure quotes the ETag
// header ("0x8DC...") but not the Etag element of a listing (0x8DC...);
// versions must compare equal whichever way they were read.
func quoteETag(etag string) string {
	if etag == "" || strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") {
		return etag
	}
	return `"` + etag + `"`
}

// CheckContainer lists at most one blob under the prefix and returns a
// Permanent error that says what is wrong if the container does not exist
// or the credentials are refused. An endpoint that cannot be reached gives
// a Transient error. Listing needs no permission beyond what the driver
// needs anyway.
func (s *Store) CheckContainer(ctx context.Context) error {
	p := s.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:     &s.prefix,
		MaxResults: new(int32(1)),
	})
	_, err := p.NextPage(ctx)
	if err == nil {
		return nil
	}
	where := s.opts.Endpoint
	if ctx.Err() != nil {
		return fmt.Errorf("azurestore: check container at %s: %w", where, errors.Join(ctx.Err(), err))
	}
	status, code := statusAndCode(err)
	switch {
	case code == string(bloberror.ContainerNotFound) || code == "" && status == 404:
		return driver.Errorf(driver.Permanent, "azurestore: container %s does not exist: %w", where, err)
	case authCodes[code] || status == 401 || status == 403:
		return driver.Errorf(driver.Permanent, "azurestore: access to container %s denied: the credentials are wrong, "+
			"or do not grant the role Storage Blob Data Contributor on the container: %w", where, err)
	}
	return driver.Errorf(classify(err), "azurestore: check container at %s: %w", where, err)
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return classify(err) }

// Close does nothing: an SDK client holds no resources but idle
// connections, which its transport closes after a while.
func (s *Store) Close() error { return nil }
