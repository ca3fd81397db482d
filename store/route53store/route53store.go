package route53store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// API is the part of *route53.Client that the driver uses. Pass New a
// *route53.Client of your own to choose its HTTP client, credentials or
// middleware.
type API interface {
	ChangeResourceRecordSets(ctx context.Context, in *route53.ChangeResourceRecordSetsInput, optFns ...func(*route53.Options)) (*route53.ChangeResourceRecordSetsOutput, error)
	ListResourceRecordSets(ctx context.Context, in *route53.ListResourceRecordSetsInput, optFns ...func(*route53.Options)) (*route53.ListResourceRecordSetsOutput, error)
	GetHostedZone(ctx context.Context, in *route53.GetHostedZoneInput, optFns ...func(*route53.Options)) (*route53.GetHostedZoneOutput, error)
}

var _ API = (*route53.Client)(nil)

// Defaults of Options.
const (
	// DefaultRequestsPerSecond paces a Store's requests at Route 53's
	// long-standing limit of five requests a second.
	DefaultRequestsPerSecond = 5
	// DefaultThrottleRetries is how many times a refused (throttled)
	// change is sent again.
	DefaultThrottleRetries = 4
	// RecordTTL is the TTL of the records the driver creates, in seconds.
	// It matters only to DNS resolvers; the driver reads through the API.
	RecordTTL = 60
	// listPageSize is the most records Route 53 returns in one
	// ListResourceRecordSets page.
	listPageSize = 300
)

// Options tune New. The zero value is the default.
type Options struct {
	// Endpoint names the server in error messages. Empty means AWS
	// Route 53. Open sets it from the URL.
	Endpoint string
	// RequestsPerSecond paces every request the store sends, with a token
	// bucket (default DefaultRequestsPerSecond). Route 53 limits requests
	// per AWS account, so stores and processes that share an account
	// should share the rate. Negative: no pacing, for tests against
	// emulators.
	RequestsPerSecond float64
	// Burst is how many requests may go at once after a quiet spell
	// (default: RequestsPerSecond, rounded up, at least 1).
	Burst int
	// ThrottleRetries is how many times a change that Route 53 refused
	// with Throttling or PriorRequestNotComplete is sent again, after a
	// backoff (default DefaultThrottleRetries; negative: never). Such a
	// change was not applied, so sending it again is safe, unlike a
	// change whose answer was lost.
	ThrottleRetries int
}

// Validate reports an invalid option, naming the field.
func (o Options) Validate() error {
	switch {
	case math.IsNaN(o.RequestsPerSecond):
		return fmt.Errorf("route53store: Options.RequestsPerSecond is NaN")
	case o.Burst < 0:
		return fmt.Errorf("route53store: Options.Burst is %d: must not be negative", o.Burst)
	}
	return nil
}

// Store is the Route 53 driver. It is safe for concurrent use by multiple
// goroutines, and across processes: every write is a change batch whose
// DELETE Route 53 checks against its authoritative records. See the package
// documentation for what reads do not guarantee.
type Store struct {
	client   API
	zoneID   string
	root     string // "prefix.zone.", lower case
	maxKey   int
	opts     Options
	limiter  *limiter
	retries  int
	versions versionCache
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
)

// New returns a driver for the TXT records under prefix (such as "tenure"
// or "prod.tenure") in the hosted zone zoneID, whose name is zoneName (such
// as "example.com."). New makes no request; OpenURL looks the zone's name
// up (see LookupZone). Wrap the result with store.New to use it.
func New(client API, zoneID, zoneName, prefix string, opts Options) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(driver.Permanent, "route53store: nil client")
	}
	if err := opts.Validate(); err != nil {
		return nil, driver.Errorf(driver.Permanent, "%w", err)
	}
	zoneID = strings.TrimPrefix(zoneID, "/hostedzone/")
	if zoneID == "" {
		return nil, driver.Errorf(driver.Permanent, "route53store: no hosted zone ID")
	}
	if zoneName == "" || zoneName == "." {
		return nil, driver.Errorf(driver.Permanent, "route53store: no hosted zone name")
	}
	if err := checkPrefixName(prefix); err != nil {
		return nil, driver.Errorf(driver.Permanent, "route53store: %w", err)
	}
	root := normalizeName(prefix + "." + normalizeName(zoneName))
	maxKey := maxKeyLen(len(root) - 1)
	if maxKey < 1 {
		return nil, driver.Errorf(driver.Permanent, "route53store: the name %q leaves no room for keys in a DNS name of %d characters", root, MaxNameLen)
	}
	rate := opts.RequestsPerSecond
	if rate == 0 {
		rate = DefaultRequestsPerSecond
	}
	burst := opts.Burst
	if burst == 0 {
		burst = int(math.Ceil(rate))
	}
	retries := opts.ThrottleRetries
	switch {
	case retries == 0:
		retries = DefaultThrottleRetries
	case retries < 0:
		retries = 0
	}
	return &Store{
		client:  client,
		zoneID:  zoneID,
		root:    root,
		maxKey:  maxKey,
		opts:    opts,
		limiter: newLimiter(rate, burst),
		retries: retries,
	}, nil
}

// Root returns the name that every record of the store is under, such as
// "tenure.example.com.".
func (s *Store) Root() string { return s.root }

// MaxKeyLen is the longest key, in bytes, that this store accepts: its
// encoded name must fit in a DNS name with the root.
func (s *Store) MaxKeyLen() int { return s.maxKey }

// MaxValueSize is the largest value, in bytes, that Put accepts.
func (s *Store) MaxValueSize() int { return MaxValueSize }

// CheckKey implements driver.Limits.
func (s *Store) CheckKey(key string) error {
	if len(key) > s.maxKey {
		return fmt.Errorf("route53store: key is %d bytes; its record name under %q would pass DNS's %d characters: keys here are at most %d bytes",
			len(key), s.root, MaxNameLen, s.maxKey)
	}
	return nil
}

// record is a TXT record as the driver reads and deletes it.
type record struct {
	ttl   int64
	value string
}

// versionCache remembers the record behind each version the store has
// written or read, so that a compare-and-swap can name the exact record in
// its DELETE without reading it first. A version is a digest of its
// record, so an entry is never wrong, only missing.
type versionCache struct {
	mu    sync.Mutex
	m     map[string]record
	order []string // insertion order, for eviction
}

const versionCacheSize = 1024

func (c *versionCache) get(version string) (record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[version]
	return r, ok
}

func (c *versionCache) put(version string, r record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]record{}
	}
	if _, ok := c.m[version]; ok {
		return
	}
	if len(c.order) >= versionCacheSize {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[version] = r
	c.order = append(c.order, version)
}

// list sends one ListResourceRecordSets request, paced.
func (s *Store) list(ctx context.Context, in *route53.ListResourceRecordSetsInput) (*route53.ListResourceRecordSetsOutput, error) {
	if err := s.limiter.wait(ctx); err != nil {
		return nil, err
	}
	out, err := s.client.ListResourceRecordSets(ctx, in)
	if err != nil && throttleCodes[code(err)] {
		s.limiter.drain()
	}
	return out, err
}

func code(err error) string {
	_, c := awsutil.StatusAndCode(err)
	return c
}

// read returns the record of name, or an error of kind NotFound.
func (s *Store) read(ctx context.Context, name string) (record, error) {
	out, err := s.list(ctx, &route53.ListResourceRecordSetsInput{
		HostedZoneId:    aws.String(s.zoneID),
		StartRecordName: aws.String(name),
		StartRecordType: types.RRTypeTxt,
		MaxItems:        aws.Int32(1),
	})
	if err != nil {
		return record{}, err
	}
	if len(out.ResourceRecordSets) == 0 {
		return record{}, driver.Errorf(driver.NotFound, "no record")
	}
	rr := out.ResourceRecordSets[0]
	if normalizeName(aws.ToString(rr.Name)) != name || rr.Type != types.RRTypeTxt {
		return record{}, driver.Errorf(driver.NotFound, "no record")
	}
	return recordOf(rr)
}

// recordOf returns the one value of a TXT record set the driver wrote.
func recordOf(rr types.ResourceRecordSet) (record, error) {
	if len(rr.ResourceRecords) != 1 || rr.TTL == nil {
		return record{}, driver.Errorf(driver.Permanent, "route53store: TXT record %s has %d values: %w", aws.ToString(rr.Name), len(rr.ResourceRecords), errNotOurs)
	}
	return record{ttl: *rr.TTL, value: aws.ToString(rr.ResourceRecords[0].Value)}, nil
}

// change sends one change batch, paced, without the SDK's retries; a batch
// that Route 53 refused as throttled (and so did not apply) is sent again
// after a backoff, up to the store's limit.
func (s *Store) change(ctx context.Context, changes []types.Change) error {
	in := &route53.ChangeResourceRecordSetsInput{
		HostedZoneId: aws.String(s.zoneID),
		ChangeBatch:  &types.ChangeBatch{Changes: changes},
	}
	for attempt := 0; ; attempt++ {
		if err := s.limiter.wait(ctx); err != nil {
			return err
		}
		_, err := s.client.ChangeResourceRecordSets(ctx, in, noRetry)
		if err == nil || !throttleCodes[code(err)] {
			return changeError(err)
		}
		s.limiter.drain()
		if attempt >= s.retries {
			return err
		}
		t := time.NewTimer(throttleBackoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// throttleBackoff is the wait before resending a throttled change: 200 ms
// doubling up to 5 s, with full jitter so that racing writers spread out.
func throttleBackoff(attempt int) time.Duration {
	d := min(200*time.Millisecond<<attempt, 5*time.Second)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// noRetry turns off the SDK's retries for one call: a change whose answer
// was lost (a timeout, a 5xx) may have been applied, and a retry would
// fail its DELETE against its own first attempt.
func noRetry(o *route53.Options) { o.Retryer = aws.NopRetryer{} }

func txtSet(name string, r record) *types.ResourceRecordSet {
	return &types.ResourceRecordSet{
		Name:            aws.String(name),
		Type:            types.RRTypeTxt,
		TTL:             aws.Int64(r.ttl),
		ResourceRecords: []types.ResourceRecord{{Value: aws.String(r.value)}},
	}
}

// Get implements driver.Store with ListResourceRecordSets starting at the
// key's name. It may return an older version than the latest write: see
// the package documentation.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the decoded value's length before handing it on. A TXT
// record set is small and returned whole (MaxValueSize bounds it).
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	name := recordName(key, s.root)
	r, err := s.read(ctx, name)
	if err != nil {
		return nil, "", err
	}
	data, err := decodeValue(r.value)
	if err != nil {
		return nil, "", driver.Errorf(driver.Permanent, "route53store: TXT record %s: %w", name, err)
	}
	if int64(len(data)) > max {
		return nil, "", driver.TooLargeError(int64(len(data)), max)
	}
	v := versionOf(r.ttl, r.value)
	s.versions.put(v, r)
	return data, v, nil
}

// Put implements driver.Store with one change batch: CREATE (create) or
// DELETE of the exact current record and CREATE of the new one
// (compare-and-swap), which Route 53 applies atomically or not at all. The
// exact current record comes from the versions this store has written or
// read, or else from a read: a stale read can only make the DELETE fail.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if len(data) > MaxValueSize {
		return "", driver.Errorf(driver.InvalidArgument,
			"route53store: value is %d bytes; a TXT record of %d characters holds values of at most %d in base64",
			len(data), MaxValueChars, MaxValueSize)
	}
	name := recordName(key, s.root)
	next := record{ttl: RecordTTL, value: encodeValue(data)}
	var changes []types.Change
	switch cond.Kind {
	case driver.IfAbsent:
	case driver.IfMatch:
		cur, err := s.current(ctx, name, cond.Version)
		if err != nil {
			return "", err
		}
		changes = append(changes, types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: txtSet(name, cur)})
	default:
		return "", driver.Errorf(driver.InvalidArgument, "route53store: put needs a condition, got %v", cond.Kind)
	}
	changes = append(changes, types.Change{Action: types.ChangeActionCreate, ResourceRecordSet: txtSet(name, next)})
	if err := s.change(ctx, changes); err != nil {
		return "", err
	}
	v := versionOf(next.ttl, next.value)
	s.versions.put(v, next)
	return v, nil
}

// current returns the record that version names, from the cache or from a
// read; an error of kind PreconditionFailed if the read shows the key
// missing or at another version.
func (s *Store) current(ctx context.Context, name, version string) (record, error) {
	if r, ok := s.versions.get(version); ok {
		return r, nil
	}
	r, err := s.read(ctx, name)
	if err != nil {
		if driver.Classify(nil, err) == driver.NotFound {
			return record{}, driver.Errorf(driver.PreconditionFailed, "if-match on a missing key")
		}
		return record{}, err
	}
	if v := versionOf(r.ttl, r.value); v != version {
		s.versions.put(v, r)
		return record{}, driver.Errorf(driver.PreconditionFailed, "if-match on version %q: the key is at another version", version)
	}
	return r, nil
}

// unconditionalDeleteTries bounds how often an unconditional Delete reads
// and deletes a key that other writers keep changing.
const unconditionalDeleteTries = 5

// Delete implements driver.Store with a change batch that deletes the exact
// record: the one version names (IfMatch), or the one just read
// (unconditional, read and deleted again if it changed in between).
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	name := recordName(key, s.root)
	switch cond.Kind {
	case driver.IfMatch:
		cur, err := s.current(ctx, name, cond.Version)
		if err != nil {
			return err
		}
		return s.change(ctx, []types.Change{{Action: types.ChangeActionDelete, ResourceRecordSet: txtSet(name, cur)}})
	case driver.Unconditional:
		for try := 1; ; try++ {
			cur, err := s.read(ctx, name)
			if driver.Classify(nil, err) == driver.NotFound {
				return nil
			}
			if err != nil {
				return err
			}
			err = s.change(ctx, []types.Change{{Action: types.ChangeActionDelete, ResourceRecordSet: txtSet(name, cur)}})
			if driver.Classify(nil, err) != driver.PreconditionFailed {
				return err
			}
			if try == unconditionalDeleteTries {
				return driver.Errorf(driver.Conflict, "route53store: the record changed under each of %d deletes: %w", try, err)
			}
		}
	}
	return driver.Errorf(driver.InvalidArgument, "route53store: delete accepts if-match or no condition, got %v", cond.Kind)
}

// List implements driver.Store. Route 53 lists records by DNS name, labels
// compared from the right, which is not the byte order of keys; so List
// reads every record under the store's root, starting at the root's name
// and stopping at the first name that does not extend it, keeps the keys
// that match, and sorts them. It costs one request per 300 records in the
// store, whatever limit is, and skips records under the root that the
// driver did not write.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	revRoot := reversedLabels(s.root)
	in := &route53.ListResourceRecordSetsInput{
		HostedZoneId:    aws.String(s.zoneID),
		StartRecordName: aws.String(s.root),
		MaxItems:        aws.Int32(listPageSize),
	}
	var items []driver.Item
	for {
		out, err := s.list(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, rr := range out.ResourceRecordSets {
			name := normalizeName(aws.ToString(rr.Name))
			// Names that extend the root as a string come together
			// whether Route 53 compares reversed names as strings or
			// label by label; the root's own records are among them.
			if !strings.HasPrefix(reversedLabels(name), revRoot) {
				return finishList(items, limit), nil
			}
			if rr.Type != types.RRTypeTxt {
				continue
			}
			key, ok := keyOf(name, s.root)
			if !ok || !strings.HasPrefix(key, prefix) || key <= after {
				continue
			}
			r, err := recordOf(rr)
			if err != nil {
				return nil, err
			}
			data, err := decodeValue(r.value)
			if err != nil {
				return nil, driver.Errorf(driver.Permanent, "route53store: TXT record %s: %w", name, err)
			}
			items = append(items, driver.Item{Key: key, Version: versionOf(r.ttl, r.value), Size: int64(len(data))})
		}
		if !out.IsTruncated || aws.ToString(out.NextRecordName) == "" {
			return finishList(items, limit), nil
		}
		in.StartRecordName = out.NextRecordName
		in.StartRecordType = out.NextRecordType
		in.StartRecordIdentifier = out.NextRecordIdentifier
	}
}

func finishList(items []driver.Item, limit int) []driver.Item {
	slices.SortFunc(items, func(a, b driver.Item) int { return strings.Compare(a.Key, b.Key) })
	return items[:min(len(items), limit)]
}

// LookupZone returns the name of the hosted zone zoneID, such as
// "example.com.", with one GetHostedZone request.
func LookupZone(ctx context.Context, client API, zoneID string) (string, error) {
	out, err := client.GetHostedZone(ctx, &route53.GetHostedZoneInput{Id: aws.String(strings.TrimPrefix(zoneID, "/hostedzone/"))})
	if err != nil {
		return "", err
	}
	if out.HostedZone == nil || aws.ToString(out.HostedZone.Name) == "" {
		return "", driver.Errorf(driver.Permanent, "route53store: GetHostedZone %q returned no zone name", zoneID)
	}
	return normalizeName(aws.ToString(out.HostedZone.Name)), nil
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return errorKinds.Kind(err) }

// Close does nothing: an SDK client holds no resources but idle
// connections, which its transport closes after a while.
func (s *Store) Close() error { return nil }
