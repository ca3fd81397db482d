package dynamostore

import (
	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// errorKinds maps an SDK error to a driver.Kind: DynamoDB's codes, then the
// AWS Common Errors, DynamoDB's statuses, then the rules common to AWS
// services.
var errorKinds = awsutil.Classifier{
	Codes:    codeKinds,
	Shared:   []awsutil.CodeSet{awsutil.CommonErrors},
	Statuses: statusKinds,
}

// Error codes, from the DynamoDB API reference (Common Errors and each
// operation's Errors), less those in awsutil.CommonErrors. A code decides
// before the status does: DynamoDB answers almost every error with 400.
var codeKinds = map[string]driver.Kind{
	"ConditionalCheckFailedException": driver.PreconditionFailed,

	// Another writer's transaction holds the item, or (multi-region
	// strong consistency) another region's write to it is in progress:
	// re-read and retry.
	"TransactionConflictException":     driver.Conflict,
	"ReplicatedWriteConflictException": driver.Conflict,

	"ProvisionedThroughputExceededException": driver.Throttled,
	"RequestLimitExceeded":                   driver.Throttled,
	"LimitExceededException":                 driver.Throttled,

	"InternalServerError":     driver.Transient,
	"RequestTimeoutException": driver.Transient,

	"ResourceNotFoundException":                driver.Permanent, // no such table
	"ResourceInUseException":                   driver.Permanent,
	"TableNotFoundException":                   driver.Permanent,
	"InvalidSignatureException":                driver.Permanent,
	"IncompleteSignatureException":             driver.Permanent,
	"MissingAuthenticationTokenException":      driver.Permanent,
	"ExpiredTokenException":                    driver.Permanent,
	"NotAuthorized":                            driver.Permanent,
	"InvalidEndpointException":                 driver.Permanent,
	"ItemCollectionSizeLimitExceededException": driver.Permanent,

	"ValidationException":    driver.InvalidArgument,
	"SerializationException": driver.InvalidArgument,
}

// statusKinds are the statuses DynamoDB gives a meaning of its own.
var statusKinds = map[int]driver.Kind{
	413: driver.InvalidArgument,
}
