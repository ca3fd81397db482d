package azurestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/tenure-io/tenure/store/driver"
)

// statusAndCode returns the HTTP status (0 if no response arrived) and the
// Azure error code (x-ms-error-code, sent with HEAD responses too; empty if
// the response named none).
func statusAndCode(err error) (status int, code string) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode, re.ErrorCode
	}
	return 0, ""
}

// codeKinds classifies Azure Blob Storage error codes (the REST API's "Blob
// service error codes" and "Common error codes"). A code decides before the
// status does: Azure sends 409 for BlobAlreadyExists, 412 for lease errors
// as well as for ConditionNotMet, and 400 for Md5Mismatch.
var codeKinds = map[bloberror.Code]driver.Kind{
	bloberror.BlobNotFound:     driver.NotFound,
	bloberror.ResourceNotFound: driver.NotFound,

	// If-Match that does not hold, and If-None-Match: * on a blob that
	// exists (Put Blob answers that with 409 BlobAlreadyExists).
	bloberror.ConditionNotMet:   driver.PreconditionFailed,
	bloberror.BlobAlreadyExists: driver.PreconditionFailed,

	// 503: "Ingress/Egress/Operations per second is over the account limit".
	bloberror.ServerBusy: driver.Throttled,
	"TooManyRequests":    driver.Throttled,

	// 500: "The operation could not be completed within the permitted
	// time. The operation may or may not have succeeded on the server
	// side."
	bloberror.OperationTimedOut: driver.Transient,
	bloberror.InternalError:     driver.Transient,
	// The body was damaged in transit: sending it again may work.
	bloberror.MD5Mismatch:   driver.Transient,
	bloberror.CRC64Mismatch: driver.Transient,

	bloberror.AuthenticationFailed:              driver.Permanent,
	bloberror.AuthorizationFailure:              driver.Permanent,
	bloberror.AuthorizationPermissionMismatch:   driver.Permanent,
	bloberror.AuthorizationProtocolMismatch:     driver.Permanent,
	bloberror.AuthorizationResourceTypeMismatch: driver.Permanent,
	bloberror.AuthorizationServiceMismatch:      driver.Permanent,
	bloberror.AuthorizationSourceIPMismatch:     driver.Permanent,
	bloberror.InsufficientAccountPermissions:    driver.Permanent,
	bloberror.InvalidAuthenticationInfo:         driver.Permanent,
	bloberror.NoAuthenticationInformation:       driver.Permanent,
	"KeyBasedAuthenticationNotPermitted":        driver.Permanent,
	bloberror.AccountIsDisabled:                 driver.Permanent,
	bloberror.AccountBeingCreated:               driver.Permanent,
	bloberror.ContainerNotFound:                 driver.Permanent,
	bloberror.ContainerBeingDeleted:             driver.Permanent,
	bloberror.ContainerDisabled:                 driver.Permanent,
	// Someone else holds a lease on the blob (412 or 409): no write of
	// ours will apply until it is released, and it is not a version
	// conflict.
	bloberror.LeaseIDMissing:                   driver.Permanent,
	bloberror.LeaseIDMismatchWithBlobOperation: driver.Permanent,
	bloberror.LeaseLost:                        driver.Permanent,
	bloberror.LeaseNotPresentWithBlobOperation: driver.Permanent,
	bloberror.LeaseAlreadyPresent:              driver.Permanent,
	bloberror.BlobArchived:                     driver.Permanent,
	bloberror.BlobBeingRehydrated:              driver.Permanent,
	bloberror.BlobImmutableDueToPolicy:         driver.Permanent,
	bloberror.SnapshotsPresent:                 driver.Permanent,
	bloberror.InvalidBlobType:                  driver.Permanent,
	bloberror.UnsupportedHeader:                driver.Permanent,
	bloberror.ConditionHeadersNotSupported:     driver.Permanent,
	bloberror.FeatureVersionMismatch:           driver.Permanent,

	bloberror.InvalidResourceName:           driver.InvalidArgument,
	bloberror.InvalidURI:                    driver.InvalidArgument,
	bloberror.RequestURLFailedToParse:       driver.InvalidArgument,
	bloberror.RequestBodyTooLarge:           driver.InvalidArgument,
	bloberror.InvalidInput:                  driver.InvalidArgument,
	bloberror.OutOfRangeInput:               driver.InvalidArgument,
	bloberror.InvalidQueryParameterValue:    driver.InvalidArgument,
	bloberror.OutOfRangeQueryParameterValue: driver.InvalidArgument,
	bloberror.InvalidHeaderValue:            driver.InvalidArgument,
	bloberror.MissingRequiredHeader:         driver.InvalidArgument,
	bloberror.InvalidMetadata:               driver.InvalidArgument,
}

// authCodes are the error codes that mean the service refused the
// credentials or their permissions.
var authCodes = map[string]bool{
	string(bloberror.AuthenticationFailed):              true,
	string(bloberror.AuthorizationFailure):              true,
	string(bloberror.AuthorizationPermissionMismatch):   true,
	string(bloberror.AuthorizationProtocolMismatch):     true,
	string(bloberror.AuthorizationResourceTypeMismatch): true,
	string(bloberror.AuthorizationServiceMismatch):      true,
	string(bloberror.AuthorizationSourceIPMismatch):     true,
	string(bloberror.InsufficientAccountPermissions):    true,
	string(bloberror.InvalidAuthenticationInfo):         true,
	string(bloberror.NoAuthenticationInformation):       true,
	"KeyBasedAuthenticationNotPermitted":                true,
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
	if k, ok := codeKinds[bloberror.Code(code)]; ok {
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
	case status == 408:
		return driver.Transient
	case status == 409:
		// Other 409s concern the blob or container itself (a lease, an
		// archived blob, a container being deleted): repeating will not
		// help.
		return driver.Permanent
	case status == 401 || status == 403 || status == 405:
		return driver.Permanent
	case status >= 300 && status < 400:
		return driver.Permanent
	case status == 400 || status == 411 || status == 413 || status == 414 || status == 416:
		return driver.InvalidArgument
	case status >= 400:
		return driver.Unknown
	case status >= 200:
		// A success the SDK did not expect (Put Blob answers 201, not
		// 200): the service, or something before it, accepted the
		// request, which may have been applied.
		return driver.Transient
	}

	// No response: a token could not be had, or the connection failed.
	var authErr *azidentity.AuthenticationFailedError
	if errors.As(err, &authErr) {
		if r := authErr.RawResponse; r != nil && (r.StatusCode >= 500 || r.StatusCode == 429) {
			return driver.Transient
		}
		return driver.Permanent
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// The request may or may not have been applied.
		return driver.Transient
	}
	return driver.Unknown
}

// conditionalError gives the one classification that depends on the
// request: a write with If-Match on a missing blob may be answered 404
// BlobNotFound (Azurite answers 412), which for us means the condition does
// not hold.
func conditionalError(err error, cond driver.Cond) error {
	if cond.Kind != driver.IfMatch {
		return err
	}
	status, code := statusAndCode(err)
	if status == 404 && (code == string(bloberror.BlobNotFound) || code == "") {
		return &driver.Error{Kind: driver.PreconditionFailed, Err: fmt.Errorf("if-match on a missing blob: %w", err)}
	}
	return err
}
