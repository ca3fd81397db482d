package route53store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenure-io/tenure/store/driver"
)

// statusAndCode returns the HTTP status (0 if no response arrived) and the
// Route 53 error code.
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

// throttleCodes are the answers to a request that Route 53 refused without
// processing it: too many requests for the account, or a change batch sent
// while the zone's previous one was still being applied.
var throttleCodes = map[string]bool{
	"Throttling":              true,
	"ThrottlingException":     true,
	"PriorRequestNotComplete": true,
}

// Error codes, from the Route 53 API reference. A code decides before the
// status does: Route 53 answers throttling with 400.
var codeKinds = map[string]driver.Kind{
	"Throttling":              driver.Throttled,
	"ThrottlingException":     driver.Throttled,
	"PriorRequestNotComplete": driver.Throttled,

	"InternalFailure":    driver.Transient,
	"InternalError":      driver.Transient,
	"ServiceUnavailable": driver.Transient,
	"RequestTimeout":     driver.Transient,

	"NoSuchHostedZone":            driver.Permanent,
	"HostedZoneNotFound":          driver.Permanent,
	"AccessDenied":                driver.Permanent,
	"AccessDeniedException":       driver.Permanent,
	"NotAuthorizedException":      driver.Permanent,
	"InvalidClientTokenId":        driver.Permanent,
	"UnrecognizedClientException": driver.Permanent,
	"SignatureDoesNotMatch":       driver.Permanent,
	"IncompleteSignature":         driver.Permanent,
	"MissingAuthenticationToken":  driver.Permanent,
	"ExpiredToken":                driver.Permanent,
	"LimitsExceeded":              driver.Permanent, // records per zone

	// A change batch that is refused for any reason but its conditions
	// (see changeError), or a request Route 53 cannot parse.
	"InvalidChangeBatch": driver.InvalidArgument,
	"InvalidInput":       driver.InvalidArgument,
	"InvalidArgument":    driver.InvalidArgument,
	"InvalidDomainName":  driver.InvalidArgument,
}

// classify maps an SDK error to a driver.Kind. Change batches add one rule
// of their own (changeError).
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
	case status == 404:
		return driver.Permanent // no such zone
	case status >= 300 && status < 400:
		return driver.Permanent
	case status >= 400:
		return driver.Unknown
	}
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

// conditionMessages are the three ways Route 53 says that a change batch
// failed on the state of a record rather than on its form, from the
// ChangeResourceRecordSets reference:
//
//	Tried to create resource record set [name='…', type='TXT'] but it already exists
//	Tried to delete resource record set [name='…', type='TXT'] but it was not found
//	Tried to delete resource record set [name='…', type='TXT'] but the values provided do not match the current values
//
// InvalidChangeBatch carries no finer code, so these phrases are the only
// way to tell a failed condition from a malformed batch: the one place
// where tenure reads an error's text. A batch that the driver built can
// fail only these ways unless Route 53 changes its limits; anything else
// stays InvalidArgument, never a precondition failure.
var conditionMessages = []string{
	"but it already exists",
	"but it was not found",
	"but the values provided do not match the current values",
}

// changeError classifies the error of a ChangeResourceRecordSets request:
// InvalidChangeBatch for a failed condition becomes PreconditionFailed.
func changeError(err error) error {
	var icb *types.InvalidChangeBatch
	if !errors.As(err, &icb) {
		return err
	}
	msgs := append([]string{icb.ErrorMessage()}, icb.Messages...)
	for _, m := range msgs {
		for _, phrase := range conditionMessages {
			if strings.Contains(m, phrase) {
				return &driver.Error{Kind: driver.PreconditionFailed, Err: err}
			}
		}
	}
	return err
}
