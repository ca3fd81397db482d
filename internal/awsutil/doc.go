// Package awsutil holds what the store drivers built on the AWS SDK for Go v2
// (s3store, dynamostore, route53store) share: the strict rules for their
// URLs, loading the AWS configuration, and the part of error classification
// that does not depend on the service.
//
// A driver describes itself once and uses the description for its URL and
// its configuration:
//
//	var awsDriver = awsutil.Driver{
//		Name: "s3store", Scheme: "s3", Resource: "bucket", ResourceName: "bucket name",
//		Form: "s3://bucket/prefix", Params: []string{"endpoint", "region", "path_style", "profile"},
//		ExampleEndpoint: "http://127.0.0.1:9000",
//	}
//
//	if err := awsDriver.CheckHost(u); err != nil { ... }  // scheme, no credentials, a host, no port
//	// the driver's own checks of u.Host and u.Path
//	q, settings, err := awsDriver.Query(u)                // unknown or repeated parameters, ?endpoint=
//	// the driver's own parameters, from q
//	cfg, err := awsDriver.LoadConfig(ctx, settings)       // region, profile, default credential chain
//	client := s3.NewFromConfig(cfg, func(o *s3.Options) { ... settings.Endpoint ... })
//
// It classifies errors with a Classifier that holds its service's own codes
// and statuses and names the shared sets of codes the service sends; the
// Classifier adds the context errors, the common status rules and the
// errors of requests that got no response:
//
//	var errorKinds = awsutil.Classifier{
//		Codes:    codeKinds,                                 // S3's own: NoSuchKey, SlowDown...
//		Shared:   []awsutil.CodeSet{awsutil.RESTXMLErrors}, // AccessDenied, InternalError...
//		Statuses: statusKinds,                               // 412, 404...
//	}
//	func (s *Store) ErrorKind(err error) driver.Kind { return errorKinds.Kind(err) }
//
// A driver names only the sets whose codes its service sends: each code in
// a set changes what an error with that code means to the driver.
//
// # Logging
//
// LoadConfig sets the configuration's logger to Logger(Settings.Logger),
// which the driver's opener fills from store.OpenOptions.Logger: the lines
// the SDK would print on stderr in a format of its own become slog records
// (its warnings at WARN, the rest at DEBUG, with source=aws-sdk), so a
// program logging JSON keeps logging JSON.
//
// # Errors
//
// Every error from CheckHost, Query, Errorf and LoadConfig is a
// *driver.Error of kind Permanent that begins with the driver's name, except
// that LoadConfig returns the context's error, unclassified, when ctx ended
// while it retrieved credentials. URL errors show the URL redacted, never a
// password.
//
// # What it does not do
//
// It knows nothing of buckets, tables or zones, nor of any code or status
// whose meaning depends on the request (S3's 404 on If-Match, DynamoDB's
// ConditionalCheckFailedException, Route 53's InvalidChangeBatch): drivers
// keep those. It does not set the endpoint on the aws.Config: a driver sets
// it on its client's options, where it takes precedence over
// AWS_ENDPOINT_URL_<SERVICE> and the shared configuration's services
// section, which would override aws.Config.BaseEndpoint. It makes no
// request but those of the credential chain, and holds no state.
package awsutil
