package awsutil

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

// StatusAndCode returns the HTTP status of the response err came from (0 if
// no response arrived) and the error code the service put in it (empty if
// it named none, as for every response to HEAD).
func StatusAndCode(err error) (status int, code string) {
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

// Classifier maps an error from an AWS SDK client to a driver.Kind. Its
// fields say what is particular to one service; Kind adds the rules common
// to all of them. The zero Classifier knows only the common rules. It is
// safe for concurrent use if its maps are not modified.
type Classifier struct {
	// Codes maps the service's own error codes to kinds. They take
	// precedence over Shared, and any code over any status: JSON services
	// answer almost every error with 400, throttling included.
	Codes map[string]driver.Kind
	// Shared lists the sets of codes that the service sends as other
	// services do: CommonErrors, RESTXMLErrors.
	Shared []CodeSet
	// Statuses maps HTTP statuses that the service gives a meaning of its
	// own, for an error whose code decided nothing. They take precedence
	// over the common status rules.
	Statuses map[int]driver.Kind
}

// CodeSet is a set of error codes, each with its kind, that more than one
// AWS service sends with the same meaning. Its contents are fixed.
type CodeSet struct{ kinds map[string]driver.Kind }

// Kind returns the kind of code, and whether the set holds it.
func (s CodeSet) Kind(code string) (driver.Kind, bool) {
	k, ok := s.kinds[code]
	return k, ok
}

// CommonErrors are codes from the Common Errors that the API references of
// AWS services list (all but S3's), and that DynamoDB and Route 53 send:
// throttling, server failures, refused credentials.
var CommonErrors = CodeSet{map[string]driver.Kind{
	"Throttling":          driver.Throttled,
	"ThrottlingException": driver.Throttled,

	"InternalFailure":    driver.Transient,
	"ServiceUnavailable": driver.Transient,
	"RequestTimeout":     driver.Transient,

	"AccessDeniedException":       driver.Permanent,
	"InvalidClientTokenId":        driver.Permanent,
	"UnrecognizedClientException": driver.Permanent,
	"IncompleteSignature":         driver.Permanent,
	"MissingAuthenticationToken":  driver.Permanent,
}}

// RESTXMLErrors are codes in the spelling of S3's error reference, which
// Route 53, also a REST-XML service, sends as well: throttling, server
// failures, refused credentials.
var RESTXMLErrors = CodeSet{map[string]driver.Kind{
	"Throttling": driver.Throttled,

	"InternalError":  driver.Transient,
	"RequestTimeout": driver.Transient,

	"AccessDenied":          driver.Permanent,
	"SignatureDoesNotMatch": driver.Permanent,
	"ExpiredToken":          driver.Permanent,
}}

// Kind classifies err, in this order: the context's errors; the service's
// own codes, then its shared ones; the service's statuses, then the common
// status rules; then, for an error without a response, the SDK's
// configuration and transport errors. What none of these decides is
// driver.Unknown, as is nil.
func (c Classifier) Kind(err error) driver.Kind {
	switch {
	case err == nil:
		return driver.Unknown
	case errors.Is(err, context.Canceled):
		return driver.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Transient
	}
	status, code := StatusAndCode(err)
	if k, ok := c.Codes[code]; ok {
		return k
	}
	for _, set := range c.Shared {
		if k, ok := set.Kind(code); ok {
			return k
		}
	}
	if k, ok := c.Statuses[status]; ok {
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
		// A redirect means the wrong region or endpoint.
		return driver.Permanent
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
