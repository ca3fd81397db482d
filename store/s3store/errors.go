package s3store

import (
	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// errorKinds maps an SDK error to a driver.Kind: S3's codes, then the
// REST-XML codes it shares with Route 53, S3's statuses, then the rules
// common to AWS services. Conditional writes add one rule of their own
// (conditionalError).
var errorKinds = awsutil.Classifier{
	Codes:    codeKinds,
	Shared:   []awsutil.CodeSet{awsutil.RESTXMLErrors},
	Statuses: statusKinds,
}

// Error codes, from the S3 error reference and from what S3-compatible
// servers send, less those in awsutil.RESTXMLErrors. A code decides before
// the status does: S3 sends 400 for RequestTimeout and 403 for
// RequestTimeTooSkewed, both of which pass.
var codeKinds = map[string]driver.Kind{
	"NoSuchKey":          driver.NotFound,
	"PreconditionFailed": driver.PreconditionFailed,

	"ConditionalRequestConflict": driver.Conflict,
	"OperationAborted":           driver.Conflict,

	"SlowDown":         driver.Throttled,
	"SlowDownRead":     driver.Throttled, // MinIO
	"SlowDownWrite":    driver.Throttled, // MinIO
	"TooManyRequests":  driver.Throttled,
	"RequestThrottled": driver.Throttled,

	"RequestTimeTooSkewed": driver.Transient, // the SDK corrects its clock offset from the reply
	"IncompleteBody":       driver.Transient,
	"BadDigest":            driver.Transient,

	"AllAccessDisabled":            driver.Permanent,
	"AccountProblem":               driver.Permanent,
	"InvalidAccessKeyId":           driver.Permanent,
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

// statusKinds are the statuses S3 gives a meaning of its own, for errors
// whose code (if any: a HEAD response has none) decided nothing.
var statusKinds = map[int]driver.Kind{
	412: driver.PreconditionFailed,
	404: driver.NotFound,
	// Other 409s than ConditionalRequestConflict (versitygw's
	// ObjectParentIsFile, for one) concern the key itself: repeating will
	// not help.
	409: driver.Permanent,
	405: driver.Permanent,
	400: driver.InvalidArgument,
	411: driver.InvalidArgument,
	413: driver.InvalidArgument,
	414: driver.InvalidArgument,
}
