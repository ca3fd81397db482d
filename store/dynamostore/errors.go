package dynamostore

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenure-io/tenure/store/driver"
)

// statusAndCode returns the HTTP status (0 if no response arrived) and the
// DynamoDB error code, such as "ConditionalCheckFailedException".
func statusAndCode(err error) (status int, code string) {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	return status, code
}

// Error codes, from the DynamoDB API reference (Common Errors and each
// operation's Errors). A code decides before the status does: DynamoDB
// answers almost every error with 400.
var codeKinds = map[string]driver.Kind{
	"ConditionalCheckFailedException": driver.PreconditionFailed,

	// Another writer's transaction holds the item, or (multi-region
	// strong consistency) another region's write to it is in progress:
	// re-read and retry.
	"TransactionConflictException":     driver.Conflict,
	"ReplicatedWriteConflictException": driver.Conflict,

	"ProvisionedThroughputExceededException": driver.Throttled,
	"RequestLimitExceeded":                   driver.Throttled,
	"ThrottlingException":                    driver.Throttled,
	"Throttling":                             driver.Throttled,
	"LimitExceededException":                 driver.Throttled,

	"InternalServerError":     driver.Transient,
	"InternalFailure":         driver.Transient,
	"ServiceUnavailable":      driver.Transient,
	"RequestTimeout":          driver.Transient,
	"RequestTimeoutException": driver.Transient,

	"ResourceNotFoundException":                driver.Permanent, // no such table
	"ResourceInUseException":                   driver.Permanent,
	"TableNotFoundException":                   driver.Permanent,
	"AccessDeniedException":                    driver.Permanent,
	"UnrecognizedClientException":              driver.Permanent,
	"InvalidClientTokenId":                     driver.Permanent,
	"InvalidSignatureException":                driver.Permanent,
	"IncompleteSignature":                      driver.Permanent,
	"IncompleteSignatureException":             driver.Permanent,
	"MissingAuthenticationToken":               driver.Permanent,
	"MissingAuthenticationTokenException":      driver.Permanent,
	"ExpiredTokenException":                    driver.Permanent,
	"NotAuthorized":                            driver.Permanent,
	"InvalidEndpointException":                 driver.Permanent,
	"ItemCollectionSizeLimitExceededException": driver.Permanent,

	"ValidationException":    driver.InvalidArgument,
	"SerializationException": driver.InvalidArgument,
}

// classify maps an SDK error to a driver.Kind.
func classify(err error) driver.Kind {
	switch {
	case err == nil:
		return driver.Unknown
	case errors.Is(err, context.Canceled):
		return driver.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Transient
	}
	status, code := statusAndCode(err)
	if k, ok := codeKinds[code]; ok {
		return k
	}
	switch {
	case status == 429:
		return driver.Throttled
	case status == 501:
		return driver.Permanent
	case status >= 500:
		return driver.Transient
	case status == 401 || status == 403:
		return driver.Permanent
	case status >= 300 && status < 400:
		return driver.Permanent
	case status == 413:
		return driver.InvalidArgument
	case status >= 400:
		return driver.Unknown
	}

	// No response, or a success whose body broke off: the request may or
	// may not have been applied.
	var (
		send       *smithyhttp.RequestSendError
		netErr     net.Error
		deser      *smithy.DeserializationError
		noRegion   *aws.MissingRegionError
		noEndpoint *aws.EndpointNotFoundError
	)
	switch {
	case errors.As(err, &noRegion), errors.As(err, &noEndpoint):
		return driver.Permanent
	case errors.As(err, &send), errors.As(err, &netErr), errors.As(err, &deser),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return driver.Transient
	}
	return driver.Unknown
}
