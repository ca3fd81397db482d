// Package dynamostore is the tenure store driver for Amazon DynamoDB,
// registered as the URL scheme "dynamodb". Import it for its side effect:
//
//	import _ "github.com/tenure-io/tenure/store/dynamostore"
//
//	s, err := store.Open(ctx, "dynamodb://tenure/app1?region=eu-west-1")
//	s, err = store.Open(ctx, "dynamodb://tenure?endpoint=http://127.0.0.1:8000&region=us-east-1&create=true")
//
// # URL
//
// dynamodb://TABLE/NAMESPACE?PARAMS. Every key of the store is one item of
// TABLE whose partition key is "/"+NAMESPACE ("/" when the URL has no path;
// dynamodb://t/ns and dynamodb://t/ns/ are the same store), so one table
// holds any number of stores. Parameters:
//
//   - endpoint: the server's base URL, for anything but AWS DynamoDB
//     (DynamoDB Local, moto).
//   - region: the region. Default: from the AWS configuration (AWS_REGION,
//     the profile); Open fails if there is none.
//   - profile: the shared-configuration profile to take credentials and
//     settings from. Default: AWS_PROFILE, else "default".
//   - create: true to create TABLE if it does not exist (on-demand
//     capacity) and wait until it is active. Default false.
//
// Unknown or repeated parameters are an error. Credentials never go in the
// URL. Open makes one DescribeTable request and returns an error matching
// store.ErrPermanent that names the problem if the table does not exist
// (and create is not set), its key schema is not the one below, the
// credentials are refused or missing, or the URL is malformed.
//
// New takes a DynamoDB client of your own (anything with the methods of
// API), for custom HTTP clients, credentials or middleware.
//
// # Table
//
// The key schema is fixed; other attributes are the driver's:
//
//	p   S  partition key (HASH): "/" + the namespace
//	k   S  sort key (RANGE): the tenure key
//	v   B  the value
//	ver S  the version: 128 random bits, URL-safe base64, new on every write
//	sz  N  len(v), so that List need not read values
//
// Create it with:
//
//	aws dynamodb create-table --table-name tenure \
//	    --attribute-definitions AttributeName=p,AttributeType=S AttributeName=k,AttributeType=S \
//	    --key-schema AttributeName=p,KeyType=HASH AttributeName=k,KeyType=RANGE \
//	    --billing-mode PAY_PER_REQUEST
//
// No TTL attribute, index or stream is needed. The table may hold other
// partitions, but an item in a store's partition that the driver did not
// write is reported as an error matching store.ErrPermanent.
//
// A store's items share one partition key because DynamoDB returns a
// Query's items in the byte order of the sort key, and only within one
// partition: that is what makes List ordered and paged, where a Scan would
// be neither. The cost is that a store's throughput is that of one
// partition key (DynamoDB documents about 3,000 reads and 1,000 writes a
// second, more with adaptive capacity); tenure's coordination records are
// far below it, and heavier users split their work across namespaces.
//
// # Permissions
//
// dynamodb:GetItem, dynamodb:PutItem, dynamodb:DeleteItem, dynamodb:Query
// and dynamodb:DescribeTable on the table; dynamodb:CreateTable as well
// with create=true.
//
// # Requests and errors
//
// Get is a GetItem with ConsistentRead. Put is a PutItem with the condition
// attribute_not_exists(k) (create) or ver = :ver (compare-and-swap); Delete
// with a condition is a DeleteItem with ver = :ver. No condition involves a
// clock: a version matches or it does not. The SDK's retries are turned off
// for those conditional writes, because a retry after an ambiguous failure
// can fail its condition against its own first attempt; settle ambiguous
// outcomes with store.PutResolved. Get, List and unconditional Delete keep
// the SDK's retries. List is a Query on the store's partition with
// ConsistentRead, begins_with(k, :prefix) or k > :after as its key
// condition, projecting k, ver and sz, paged with ExclusiveStartKey.
//
// Errors map to store errors by DynamoDB's error code:
// ConditionalCheckFailedException: ErrPreconditionFailed (a conditional
// delete of a missing item fails this way too). TransactionConflictException
// and ReplicatedWriteConflictException: ErrConflict.
// ProvisionedThroughputExceededException, RequestLimitExceeded and
// ThrottlingException: ErrThrottled. InternalServerError, other 5xx,
// timeouts and connection errors: ErrTransient. ResourceNotFoundException
// (no such table), AccessDeniedException and the signature and credential
// errors: ErrPermanent. ValidationException: ErrInvalidArgument. errors.As
// still reaches the SDK's error types, such as
// *types.ConditionalCheckFailedException and smithy.APIError.
//
// # Limits
//
// Keys are stored verbatim as the sort key, which DynamoDB limits to 1,024
// bytes: the portable layer's own limit, so every key tenure accepts fits.
// An item is at most 400 KiB, attribute names included; Put refuses a value
// larger than MaxValueSize (400 KiB less the partition key and 1,088 bytes
// kept for the longest key, the attribute names and the version: 408,511
// bytes for the namespace "") with an error matching
// store.ErrInvalidArgument, before sending anything. One limit for every
// key, so that callers can rely on it.
//
// # What is not guaranteed
//
// The driver is exactly as safe as DynamoDB's conditional writes, which
// DynamoDB applies atomically per item. A write that fails with a timeout,
// a 5xx or a broken connection may have been applied. Versions are random,
// not ordered: compare them for equality only. List is not a snapshot: keys
// written while it pages may or may not appear. DynamoDB Local and moto
// are test servers; moto in particular checks a condition and applies the
// write without holding a lock, so two racing writers can both succeed
// there (tenure's tests put a proxy in front of it that serialises
// requests), and it counts binary attributes by their base64 length, so it
// refuses values above about 300 KiB that DynamoDB takes.
package dynamostore
