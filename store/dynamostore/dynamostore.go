package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tenure-io/tenure/store/driver"
)

// Attribute names of the table and of every item. The key schema is
// (AttrPartition HASH, AttrKey RANGE), both strings.
const (
	AttrPartition = "p"   // S: "/" + the store's namespace
	AttrKey       = "k"   // S: the tenure key
	AttrValue     = "v"   // B: the value
	AttrVersion   = "ver" // S: the version token
	AttrSize      = "sz"  // N: len(value), so that List need not read values
)

// Limits of DynamoDB that the driver checks before sending anything.
const (
	// MaxItemSize is DynamoDB's limit on an item: 400 KiB, attribute
	// names included.
	MaxItemSize = 400 * 1024
	// MaxSortKeyLen is DynamoDB's limit on a sort key value, in bytes.
	MaxSortKeyLen = 1024
	// MaxPartitionKeyLen is DynamoDB's limit on a partition key value.
	MaxPartitionKeyLen = 2048

	// itemOverhead bounds everything in an item but the partition and the
	// value: the longest key (1,024 bytes), the attribute names, the
	// 22-byte version and the size number (at most 21 bytes), with room
	// to spare. MaxValueSize subtracts it whatever the key, so that one
	// limit holds for every key.
	itemOverhead = MaxSortKeyLen + 64
)

// API is the part of *dynamodb.Client that the driver uses. Pass New a
// *dynamodb.Client of your own to choose its HTTP client, credentials or
// middleware.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options tune New. The zero value is the default.
type Options struct {
	// Endpoint names the server in error messages, such as
	// "http://127.0.0.1:8000". Empty means AWS DynamoDB. Open sets it from
	// the URL.
	Endpoint string
}

// Store is the DynamoDB driver. It is safe for concurrent use by multiple
// goroutines, and across processes: every write is a conditional request
// that DynamoDB decides.
type Store struct {
	client    API
	table     string
	partition string
	opts      Options
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Limits = (*Store)(nil)
)

// New returns a driver for the items of namespace in table. namespace may be
// empty; it must not start or end with "/". Every item of the store has
// the partition key "/"+namespace, so that List is one ordered Query. New
// makes no request; OpenURL also checks the table (see CheckTable). Wrap
// the result with store.New to use it.
//
// Requests are made as client is configured, except that conditional
// writes never use the client's retryer (see Put).
func New(client API, table, namespace string, opts Options) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(driver.Permanent, "dynamostore: nil client")
	}
	if err := checkTableName(table); err != nil {
		return nil, err
	}
	if strings.HasPrefix(namespace, "/") || strings.HasSuffix(namespace, "/") {
		return nil, driver.Errorf(driver.Permanent, "dynamostore: namespace %q starts or ends with \"/\"", namespace)
	}
	if !utf8.ValidString(namespace) {
		return nil, driver.Errorf(driver.Permanent, "dynamostore: namespace %q is not valid UTF-8", namespace)
	}
	partition := "/" + namespace
	if len(partition) > MaxPartitionKeyLen {
		return nil, driver.Errorf(driver.Permanent, "dynamostore: namespace is %d bytes; DynamoDB partition keys are at most %d bytes", len(namespace), MaxPartitionKeyLen-1)
	}
	return &Store{client: client, table: table, partition: partition, opts: opts}, nil
}

// checkTableName applies DynamoDB's rules for table names: 3 to 255
// characters of a-z, A-Z, 0-9, '_', '-' and '.'.
func checkTableName(table string) error {
	if len(table) < 3 || len(table) > 255 {
		return driver.Errorf(driver.Permanent, "dynamostore: table name %q: DynamoDB table names are 3 to 255 characters", table)
	}
	for _, c := range table {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return driver.Errorf(driver.Permanent, "dynamostore: table name %q: DynamoDB table names hold only a-z, A-Z, 0-9, '_', '-' and '.'", table)
		}
	}
	return nil
}

// Table returns the table's name.
func (s *Store) Table() string { return s.table }

// Partition returns the partition key value that every item of the store
// has: "/" + the namespace.
func (s *Store) Partition() string { return s.partition }

// MaxValueSize is the largest value, in bytes, that Put accepts for any key:
// DynamoDB's 400 KiB item limit less the partition key and a fixed
// allowance for the key, attribute names, version and size.
func (s *Store) MaxValueSize() int { return MaxItemSize - len(s.partition) - itemOverhead }

// CheckKey implements driver.Limits: DynamoDB sort keys are at most 1,024
// bytes.
func (s *Store) CheckKey(key string) error {
	if len(key) > MaxSortKeyLen {
		return fmt.Errorf("dynamostore: key is %d bytes; DynamoDB sort keys are at most %d", len(key), MaxSortKeyLen)
	}
	return nil
}

// noRetry turns off the SDK's retries for one call. A conditional write that
// the SDK repeats after a timeout or a 5xx can fail its condition against
// its own first attempt, which landed; the caller resolves such outcomes by
// reading back (store.PutResolved), which needs to see the first error.
func noRetry(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

func (s *Store) itemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrPartition: &types.AttributeValueMemberS{Value: s.partition},
		AttrKey:       &types.AttributeValueMemberS{Value: key},
	}
}

// newVersion returns a fresh version token: 128 random bits. Every write
// gets one, so a version is never reused, even for the same bytes (no ABA).
func newVersion() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Get implements driver.Store with a strongly consistent GetItem. The SDK
// retries it as the client is configured.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.GetLimited(ctx, key, math.MaxInt64)
}

// GetLimited checks the value's length before handing it on. DynamoDB
// returns an item only whole, and an item is at most 400 KB, so that is
// what a read costs at most.
func (s *Store) GetLimited(ctx context.Context, key string, max int64) ([]byte, string, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.itemKey(key),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#v, #ver"),
		ExpressionAttributeNames: map[string]string{"#v": AttrValue, "#ver": AttrVersion},
	})
	if err != nil {
		return nil, "", err
	}
	if out.Item == nil {
		return nil, "", driver.Errorf(driver.NotFound, "no item")
	}
	v, ok := out.Item[AttrValue].(*types.AttributeValueMemberB)
	if !ok {
		return nil, "", driver.Errorf(driver.Permanent, "dynamostore: item has no binary attribute %q: not written by tenure", AttrValue)
	}
	ver, ok := out.Item[AttrVersion].(*types.AttributeValueMemberS)
	if !ok || ver.Value == "" {
		return nil, "", driver.Errorf(driver.Permanent, "dynamostore: item has no string attribute %q: not written by tenure", AttrVersion)
	}
	data := v.Value
	if int64(len(data)) > max {
		return nil, "", driver.TooLargeError(int64(len(data)), max)
	}
	if data == nil {
		data = []byte{}
	}
	return data, ver.Value, nil
}

// Put implements driver.Store with a PutItem whose ConditionExpression is
// attribute_not_exists(k) (create) or ver = :ver (compare-and-swap), sent
// once: the client's retryer is not used. No condition involves a clock.
// A value larger than MaxValueSize is refused before any request.
func (s *Store) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if max := s.MaxValueSize(); len(data) > max {
		return "", driver.Errorf(driver.InvalidArgument,
			"dynamostore: value is %d bytes; with DynamoDB's 400 KiB item limit this store holds values of at most %d", len(data), max)
	}
	version := newVersion()
	value := data
	if value == nil {
		value = []byte{}
	}
	item := s.itemKey(key)
	item[AttrValue] = &types.AttributeValueMemberB{Value: value}
	item[AttrVersion] = &types.AttributeValueMemberS{Value: version}
	item[AttrSize] = &types.AttributeValueMemberN{Value: strconv.Itoa(len(data))}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}
	switch cond.Kind {
	case driver.IfAbsent:
		in.ConditionExpression = aws.String(condAbsent)
		in.ExpressionAttributeNames = map[string]string{"#k": AttrKey}
	case driver.IfMatch:
		in.ConditionExpression = aws.String(condMatch)
		in.ExpressionAttributeNames = map[string]string{"#ver": AttrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":ver": &types.AttributeValueMemberS{Value: cond.Version}}
	default:
		return "", driver.Errorf(driver.InvalidArgument, "dynamostore: put needs a condition, got %v", cond.Kind)
	}
	if _, err := s.client.PutItem(ctx, in, noRetry); err != nil {
		return "", err
	}
	return version, nil
}

// The condition expressions, exactly as sent.
const (
	condAbsent = "attribute_not_exists(#k)"
	condMatch  = "#ver = :ver"
)

// Delete implements driver.Store with DeleteItem; with a condition it sends
// ver = :ver, once. DynamoDB answers a conditional delete of a missing item
// with ConditionalCheckFailedException, as the contract wants.
func (s *Store) Delete(ctx context.Context, key string, cond driver.Cond) error {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: s.itemKey(key)}
	switch cond.Kind {
	case driver.Unconditional:
		// Idempotent, so the SDK may retry it.
		_, err := s.client.DeleteItem(ctx, in)
		return err
	case driver.IfMatch:
		in.ConditionExpression = aws.String(condMatch)
		in.ExpressionAttributeNames = map[string]string{"#ver": AttrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":ver": &types.AttributeValueMemberS{Value: cond.Version}}
		_, err := s.client.DeleteItem(ctx, in, noRetry)
		return err
	}
	return driver.Errorf(driver.InvalidArgument, "dynamostore: delete accepts if-match or no condition, got %v", cond.Kind)
}

// queryPageMax bounds the items one Query page evaluates; DynamoDB also
// stops a page at 1 MB.
const queryPageMax = 1000

// List implements driver.Store with strongly consistent Query requests on
// the store's partition, which DynamoDB returns in byte order of the sort
// key: begins_with(k, :prefix) when after sorts before prefix, else
// k > :after, stopping at the first key past the prefix. It pages with
// ExclusiveStartKey until limit items are found or the range ends.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]driver.Item, error) {
	names := map[string]string{"#p": AttrPartition, "#k": AttrKey, "#ver": AttrVersion, "#sz": AttrSize}
	values := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: s.partition}}
	cond := "#p = :p"
	switch {
	case after < prefix || after == "":
		// Every key with the prefix sorts after after.
		if prefix != "" {
			cond += " AND begins_with(#k, :prefix)"
			values[":prefix"] = &types.AttributeValueMemberS{Value: prefix}
		}
	case strings.HasPrefix(after, prefix):
		cond += " AND #k > :after"
		values[":after"] = &types.AttributeValueMemberS{Value: after}
	default:
		// after sorts after every key with the prefix.
		return nil, nil
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String(cond),
		ProjectionExpression:      aws.String("#k, #ver, #sz"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ConsistentRead:            aws.Bool(true),
	}
	var items []driver.Item
	for len(items) < limit {
		in.Limit = aws.Int32(int32(min(limit-len(items), queryPageMax)))
		out, err := s.client.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, it := range out.Items {
			item, err := listItem(it)
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(item.Key, prefix) {
				return items, nil // past the prefix: keys are in order
			}
			if len(items) < limit {
				items = append(items, item)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return items, nil
}

func listItem(it map[string]types.AttributeValue) (driver.Item, error) {
	k, ok := it[AttrKey].(*types.AttributeValueMemberS)
	if !ok {
		return driver.Item{}, driver.Errorf(driver.Permanent, "dynamostore: Query returned an item without a string %q", AttrKey)
	}
	ver, ok := it[AttrVersion].(*types.AttributeValueMemberS)
	if !ok || ver.Value == "" {
		return driver.Item{}, driver.Errorf(driver.Permanent, "dynamostore: item %q has no string attribute %q: not written by tenure", k.Value, AttrVersion)
	}
	sz, ok := it[AttrSize].(*types.AttributeValueMemberN)
	if !ok {
		return driver.Item{}, driver.Errorf(driver.Permanent, "dynamostore: item %q has no number attribute %q: not written by tenure", k.Value, AttrSize)
	}
	n, err := strconv.ParseInt(sz.Value, 10, 64)
	if err != nil || n < 0 {
		return driver.Item{}, driver.Errorf(driver.Permanent, "dynamostore: item %q has size %q: not written by tenure", k.Value, sz.Value)
	}
	return driver.Item{Key: k.Value, Version: ver.Value, Size: n}, nil
}

// ErrorKind implements driver.Store.
func (s *Store) ErrorKind(err error) driver.Kind { return errorKinds.Kind(err) }

// Close does nothing: an SDK client holds no resources but idle
// connections, which its transport closes after a while.
func (s *Store) Close() error { return nil }
