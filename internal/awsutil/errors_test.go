package awsutil_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// apiError returns an error shaped as an SDK client returns one for a
// response with status and, unless it is empty, an error code.
func apiError(status int, code string) error {
	var cause error = errors.New("no body")
	if code != "" {
		cause = &smithy.GenericAPIError{Code: code, Message: "from the test"}
	}
	return &smithy.OperationError{
		ServiceID:     "Test",
		OperationName: "Op",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      cause,
			},
			RequestID: "req",
		},
	}
}

// operationError wraps err as an SDK client returns an error that came
// without a response.
func operationError(err error) error {
	return &smithy.OperationError{ServiceID: "Test", OperationName: "Op", Err: err}
}

func TestStatusAndCode(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"status and code", apiError(409, "ConditionalRequestConflict"), 409, "ConditionalRequestConflict"},
		{"status only (HEAD)", apiError(404, ""), 404, ""},
		{"code only", operationError(&smithy.GenericAPIError{Code: "Throttling"}), 0, "Throttling"},
		{"wrapped again", fmt.Errorf("put %q: %w", "k", apiError(503, "SlowDown")), 503, "SlowDown"},
		{"no response", operationError(&smithyhttp.RequestSendError{Err: errors.New("dial")}), 0, ""},
		{"nil", nil, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, code := awsutil.StatusAndCode(c.err)
			if status != c.wantStatus || code != c.wantCode {
				t.Errorf("StatusAndCode = %d, %q; want %d, %q", status, code, c.wantStatus, c.wantCode)
			}
		})
	}
}

// The common rules, with no service's codes or statuses: contexts, statuses,
// errors without a response.
func TestClassifierCommonRules(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want driver.Kind
	}{
		{"nil", nil, driver.Unknown},
		{"canceled", operationError(context.Canceled), driver.Canceled},
		{"canceled, with a response", fmt.Errorf("%w: %w", context.Canceled, apiError(500, "InternalError")), driver.Canceled},
		{"deadline", operationError(context.DeadlineExceeded), driver.Transient},

		{"a code alone decides nothing", apiError(400, "Throttling"), driver.Unknown},
		{"a code without a status", operationError(&smithy.GenericAPIError{Code: "Throttling"}), driver.Unknown},

		{"429", apiError(429, ""), driver.Throttled},
		{"500", apiError(500, ""), driver.Transient},
		{"502", apiError(502, "BadGateway"), driver.Transient},
		{"501", apiError(501, "NotImplemented"), driver.Permanent},
		{"401", apiError(401, ""), driver.Permanent},
		{"403", apiError(403, ""), driver.Permanent},
		{"301 (wrong region)", apiError(301, ""), driver.Permanent},
		{"307", apiError(307, "TemporaryRedirect"), driver.Permanent},
		{"400", apiError(400, ""), driver.Unknown},
		{"404", apiError(404, ""), driver.Unknown},
		{"412", apiError(412, ""), driver.Unknown},

		{"request not sent", operationError(&smithyhttp.RequestSendError{Err: errors.New("dial tcp: refused")}), driver.Transient},
		{"net error", operationError(&net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}), driver.Transient},
		{"body broke off", operationError(&smithy.DeserializationError{Err: io.ErrUnexpectedEOF}), driver.Transient},
		{"200 whose body broke off", operationError(&smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 200}},
			Err:      &smithy.DeserializationError{Err: io.ErrUnexpectedEOF},
		}), driver.Transient},
		{"200, no known cause", apiError(200, ""), driver.Unknown},
		{"unexpected EOF", operationError(io.ErrUnexpectedEOF), driver.Transient},
		{"EOF", operationError(io.EOF), driver.Transient},
		{"no region", operationError(&aws.MissingRegionError{}), driver.Permanent},
		{"no endpoint", operationError(&aws.EndpointNotFoundError{Err: errors.New("none")}), driver.Permanent},
		{"anything else", errors.New("mystery"), driver.Unknown},
	}
	var zero awsutil.Classifier
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := zero.Kind(c.err); got != c.want {
				t.Errorf("Kind(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// Each shared set classifies its own codes, at any status, and no others.
func TestCodeSets(t *testing.T) {
	common := awsutil.Classifier{Shared: []awsutil.CodeSet{awsutil.CommonErrors}}
	xml := awsutil.Classifier{Shared: []awsutil.CodeSet{awsutil.RESTXMLErrors}}
	both := awsutil.Classifier{Shared: []awsutil.CodeSet{awsutil.CommonErrors, awsutil.RESTXMLErrors}}
	cases := []struct {
		name string
		c    awsutil.Classifier
		err  error
		want driver.Kind
	}{
		{"Throttling at 400", common, apiError(400, "Throttling"), driver.Throttled},
		{"ThrottlingException at 400", common, apiError(400, "ThrottlingException"), driver.Throttled},
		{"InternalFailure", common, apiError(500, "InternalFailure"), driver.Transient},
		{"ServiceUnavailable at 400", common, apiError(400, "ServiceUnavailable"), driver.Transient},
		{"RequestTimeout at 400", common, apiError(400, "RequestTimeout"), driver.Transient},
		{"AccessDeniedException at 400", common, apiError(400, "AccessDeniedException"), driver.Permanent},
		{"UnrecognizedClientException at 400", common, apiError(400, "UnrecognizedClientException"), driver.Permanent},
		{"MissingAuthenticationToken at 500", common, apiError(500, "MissingAuthenticationToken"), driver.Permanent},
		{"not in CommonErrors: AccessDenied", common, apiError(400, "AccessDenied"), driver.Unknown},
		{"not in CommonErrors: InternalError", common, apiError(403, "InternalError"), driver.Permanent},

		{"Throttling at 503", xml, apiError(503, "Throttling"), driver.Throttled},
		{"InternalError at 400", xml, apiError(400, "InternalError"), driver.Transient},
		{"RequestTimeout at 400", xml, apiError(400, "RequestTimeout"), driver.Transient},
		{"AccessDenied at 400", xml, apiError(400, "AccessDenied"), driver.Permanent},
		{"SignatureDoesNotMatch", xml, apiError(403, "SignatureDoesNotMatch"), driver.Permanent},
		{"ExpiredToken at 400", xml, apiError(400, "ExpiredToken"), driver.Permanent},
		{"not in RESTXMLErrors: ThrottlingException", xml, apiError(503, "ThrottlingException"), driver.Transient},
		{"not in RESTXMLErrors: AccessDeniedException", xml, apiError(400, "AccessDeniedException"), driver.Unknown},

		{"both: AccessDenied", both, apiError(400, "AccessDenied"), driver.Permanent},
		{"both: AccessDeniedException", both, apiError(400, "AccessDeniedException"), driver.Permanent},
		{"both: unknown code", both, apiError(400, "NoSuchThing"), driver.Unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Kind(tc.err); got != tc.want {
				t.Errorf("Kind(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// A service's codes and statuses come before the shared codes and the
// common rules, and any code before any status.
func TestClassifierServiceRules(t *testing.T) {
	c := awsutil.Classifier{
		Codes: map[string]driver.Kind{
			"ConditionalCheckFailedException": driver.PreconditionFailed,
			"Throttling":                      driver.Permanent, // overrides a shared code
			"NoSuchKey":                       driver.NotFound,
		},
		Shared: []awsutil.CodeSet{awsutil.CommonErrors},
		Statuses: map[int]driver.Kind{
			412: driver.PreconditionFailed,
			404: driver.NotFound,
			400: driver.InvalidArgument,
			503: driver.Throttled, // overrides a common status rule
		},
	}
	cases := []struct {
		name string
		err  error
		want driver.Kind
	}{
		{"service code at 400", apiError(400, "ConditionalCheckFailedException"), driver.PreconditionFailed},
		{"service code over shared code", apiError(400, "Throttling"), driver.Permanent},
		{"service code over service status", apiError(400, "NoSuchKey"), driver.NotFound},
		{"shared code over service status", apiError(400, "AccessDeniedException"), driver.Permanent},
		{"shared code over service status 503", apiError(503, "ServiceUnavailable"), driver.Transient},
		{"service status without a code", apiError(412, ""), driver.PreconditionFailed},
		{"service status, unknown code", apiError(404, "SomethingElse"), driver.NotFound},
		{"service status over common rule", apiError(503, ""), driver.Throttled},
		{"common status rule", apiError(500, ""), driver.Transient},
		{"unlisted 4xx", apiError(418, ""), driver.Unknown},
		{"context first", fmt.Errorf("%w: %w", context.Canceled, apiError(400, "ConditionalCheckFailedException")), driver.Canceled},
		{"no response", operationError(&smithyhttp.RequestSendError{Err: errors.New("dial")}), driver.Transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Kind(tc.err); got != tc.want {
				t.Errorf("Kind(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
