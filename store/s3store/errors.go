package s3store

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

// statusAndCode returns the HTTP status (0 if no response arrived) and the S3
// error code (empty if the body named none, as for every HEAD response).
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

// Error codes, from the S3 error reference and from what S3-compatible
// servers send. A code decides before the status does: S3 sends 400 for
// RequestTimeout and 403 for RequestTimeTooSkewed, both of which pass.
var codeKinds = map[string]driver.Kind{
	"NoSuchKey":          driver.NotFound,
	"PreconditionFailed": driver.PreconditionFailed,

	"ConditionalRequestConflict": driver.Conflict,
	"OperationAborted":           driver.Conflict,

	"SlowDown":         driver.Throttled,
	"SlowDownRead":     driver.Throttled, // MinIO
	"SlowDownWrite":    driver.Throttled, // MinIO
	"Throttling":       driver.Throttled,
	"TooManyRequests":  driver.Throttled,
	"RequestThrottled": driver.Throttled,

	"InternalError":        driver.Transient,
	"RequestTimeout":       driver.Transient,
	"RequestTimeTooSkewed": driver.Transient, // the SDK corrects its clock offset from the reply
	"IncompleteBody":       driver.Transient,
	"BadDigest":            driver.Transient,

	"AccessDenied":                 driver.Permanent,
	"AllAccessDisabled":            driver.Permanent,
	"AccountProblem":               driver.Permanent,
	"InvalidAccessKeyId":           driver.Permanent,
	"SignatureDoesNotMatch":        driver.Permanent,
	"ExpiredToken":                 driver.Permanent,
	"InvalidToken":                 driver.Permanent,
	"AuthorizationHeaderMalformed": driver.Permanent,
	"XAdminUserNotFound":           driver.Permanent, // versitygw, with 404, for an unknown access key
	"NoSuchBucket":                 driver.Permanent,
	"InvalidBucketName":            driver.Permanent,
	"PermanentRedirect":            driver.Permanent,
	// A server that does not implement conditional headers may say so;
	// retrying will not help.
	"NotImplemented": driver.Permanent,

	"KeyTooLongError":         driver.InvalidArgument,
	"InvalidArgument":         driver.InvalidArgument,
	"EntityTooLarge":          driver.InvalidArgument,
	"XMinioInvalidObjectName": driver.InvalidArgument,
}

// classify maps an SDK error to a driver.Kind. Conditional writes add one
// rule of their own (conditionalError).
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
	case status == 412:
		return driver.PreconditionFailed
	case status == 404:
		return driver.NotFound
	case status == 429:
		return driver.Throttled
	case status == 501:
		return driver.Permanent
	case status >= 500:
		return driver.Transient
	case status == 409:
		// Other 409s (versitygw's ObjectParentIsFile, for one) concern
		// the key itself: repeating will not help.
		return driver.Permanent
	case status == 401 || status == 403 || status == 405:
		return driver.Permanent
	case status >= 300 && status < 400:
		// A redirect means the wrong region or endpoint.
		return driver.Permanent
	case status == 400 || status == 411 || status == 413 || status == 414:
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
