package gcsstore

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/api/googleapi"

	"github.com/tenure-io/tenure/store/driver"
)

// statusAndReason returns the HTTP status (0 if no response arrived) and the
// first error reason of a JSON API error (empty if the body named none).
func statusAndReason(err error) (status int, reason string) {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return 0, ""
	}
	for _, item := range ge.Errors {
		if item.Reason != "" {
			return ge.Code, item.Reason
		}
	}
	return ge.Code, ""
}

// Error reasons of the JSON API
// (https://cloud.google.com/storage/docs/json_api/v1/status-codes). A
// reason decides before the status does: quota errors have come with 403
// as well as 429.
var reasonKinds = map[string]driver.Kind{
	"conditionNotMet":       driver.PreconditionFailed,
	"rateLimitExceeded":     driver.Throttled,
	"userRateLimitExceeded": driver.Throttled,
	"backendError":          driver.Transient,
	"internalError":         driver.Transient,
}

// classify maps a service error to a driver.Kind. Writes, conditional
// deletes and listings add rules of their own (Store.writeError,
// Store.Delete, Store.List).
func classify(err error) driver.Kind {
	switch {
	case err == nil:
		return driver.Unknown
	case errors.Is(err, context.Canceled):
		return driver.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Transient
	}
	status, reason := statusAndReason(err)
	if k, ok := reasonKinds[reason]; ok {
		return k
	}
	switch {
	case status == 412:
		return driver.PreconditionFailed
	case status == 404:
		return driver.NotFound
	case status == 429:
		return driver.Throttled
	case status == 408:
		return driver.Transient
	case status == 409:
		// A concurrent change to the same object: the write did not
		// apply; re-read and retry.
		return driver.Conflict
	case status == 501:
		return driver.Permanent
	case status >= 500:
		return driver.Transient
	case status == 401 || status == 403 || status == 405:
		return driver.Permanent
	case status >= 300 && status < 400:
		return driver.Permanent
	case status == 400 || status == 411 || status == 413 || status == 414:
		// A bad object name, an oversized value.
		return driver.InvalidArgument
	case status >= 400:
		return driver.Unknown
	}

	// No response, or a success whose body broke off: the request may or
	// may not have been applied.
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return driver.Transient
	}
	return driver.Unknown
}
