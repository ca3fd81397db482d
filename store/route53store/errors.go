package route53store

import (
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// throttleCodes are the answers to a request that Route 53 refused without
// processing it: too many requests for the account, or a change batch sent
// while the zone's previous one was still being applied.
var throttleCodes = map[string]bool{
	"Throttling":              true,
	"ThrottlingException":     true,
	"PriorRequestNotComplete": true,
}

// errorKinds maps an SDK error to a driver.Kind: Route 53's codes, then the
// AWS Common Errors and the REST-XML codes it shares with S3, Route 53's
// statuses, then the rules common to AWS services. Change batches add one
// rule of their own (changeError).
var errorKinds = awsutil.Classifier{
	Codes:    codeKinds,
	Shared:   []awsutil.CodeSet{awsutil.CommonErrors, awsutil.RESTXMLErrors},
	Statuses: statusKinds,
}

// Error codes, from the Route 53 API reference, less those in
// awsutil.CommonErrors and awsutil.RESTXMLErrors. A code decides before the
// status does: Route 53 answers throttling with 400.
var codeKinds = map[string]driver.Kind{
	"PriorRequestNotComplete": driver.Throttled,

	"NoSuchHostedZone":       driver.Permanent,
	"HostedZoneNotFound":     driver.Permanent,
	"NotAuthorizedException": driver.Permanent,
	"LimitsExceeded":         driver.Permanent, // records per zone

	// A change batch that is refused for any reason but its conditions
	// (see changeError), or a request Route 53 cannot parse.
	"InvalidChangeBatch": driver.InvalidArgument,
	"InvalidInput":       driver.InvalidArgument,
	"InvalidArgument":    driver.InvalidArgument,
	"InvalidDomainName":  driver.InvalidArgument,
}

// statusKinds are the statuses Route 53 gives a meaning of its own.
var statusKinds = map[int]driver.Kind{
	404: driver.Permanent, // no such zone
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
