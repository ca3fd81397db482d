// Package s3store is the tenure store driver for Amazon S3 and S3-compatible
// servers, registered as the URL scheme "s3". Import it for its side effect,
// or import github.com/tenure-io/tenure/store/all:
//
//	import _ "github.com/tenure-io/tenure/store/s3store"
//
//	s, err := store.Open(ctx, "s3://my-bucket/tenure?region=eu-west-1")
//	s, err = store.Open(ctx, "s3://tenure/dev?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true")
//
// # URL
//
// s3://BUCKET/PREFIX?PARAMS. Every key is stored as the object PREFIX/key;
// a "/" is added after a non-empty PREFIX that lacks one (s3://b/p and
// s3://b/p/ are the same store). Parameters:
//
//   - endpoint: the server's base URL, for anything but AWS S3
//     (http://127.0.0.1:9000, https://ACCOUNT.r2.cloudflarestorage.com).
//   - region: the signing region. Default: from the AWS configuration
//     (AWS_REGION, the profile); Open fails if there is none.
//   - path_style: true to address the bucket as endpoint/BUCKET rather than
//     BUCKET.endpoint. The SDK already does so when the endpoint is an IP
//     address (http://127.0.0.1:9000); set it for a server named by a host
//     name without wildcard DNS for its buckets. Default false.
//   - profile: the shared-configuration profile to take credentials and
//     settings from. Default: AWS_PROFILE, else "default".
//
// Unknown or repeated parameters are an error. Credentials never go in the
// URL: they come from the AWS default chain (environment variables, shared
// files, web identity, container and instance roles). Open makes one
// HeadBucket request (and, only if it fails with a 4xx, one ListObjectsV2
// whose error code names the cause, as a HEAD response carries none) and
// returns an error matching store.ErrPermanent that names the problem if
// the bucket does not exist, the credentials are refused or missing, or the
// URL is malformed.
//
// New takes an S3 client of your own (anything with the methods of API),
// for custom HTTP clients, credentials or middleware.
//
// # Permissions
//
// s3:GetObject, s3:PutObject and s3:DeleteObject on BUCKET/PREFIX*, and
// s3:ListBucket on BUCKET (List, and the bucket check at Open). AWS
// requires s3:GetObject for a delete with If-Match as well.
//
// # Requests and errors
//
// Versions are ETags, passed back verbatim as If-Match. Put sends
// If-None-Match: * (create) or If-Match: ETAG (compare-and-swap); Delete
// with a condition sends If-Match. The SDK's own retries are turned off for
// those conditional writes, because a retry after an ambiguous failure can
// fail with 412 against its own first attempt; settle ambiguous outcomes
// with store.PutResolved instead. Get, List and unconditional Delete keep the
// SDK's retries. Clients that Open builds do not add the SDK's default CRC32
// checksums (aws-chunked uploads over HTTPS), which some S3-compatible
// servers mishandle; SigV4 or TLS already protects the bytes in transit.
//
// Errors map to store errors as follows: 412, and 404 on a write with
// If-Match: ErrPreconditionFailed. 404 NoSuchKey on Get: ErrNotFound. 409
// ConditionalRequestConflict: ErrConflict (re-read and retry). 503 SlowDown
// and 429: ErrThrottled. Other 5xx, timeouts and connection errors:
// ErrTransient. 401, 403, NoSuchBucket, 501 NotImplemented, redirects
// (wrong region) and other 409s: ErrPermanent. 400 (KeyTooLongError,
// InvalidArgument, ...): ErrInvalidArgument. errors.As still reaches the
// SDK's error types, such as smithy.APIError.
//
// # Compatibility
//
// AWS S3 has enforced If-None-Match on PutObject since August 2024 and
// If-Match since November 2024; it has since added If-Match on DeleteObject
// for general purpose buckets. Cloudflare R2 supports both on PutObject.
// versitygw v1.8.0 (posix backend) enforces them, and If-Match on a
// DeleteObject of a key that exists, but answers a conditional delete of a
// missing key with success. MinIO supports conditional PutObject but, as of
// the release tenure tests against, ignores If-Match on DeleteObject: a
// delete on a stale version succeeds.
//
// So before its first conditional delete the driver checks, once, on
// scratch keys under .tenure-probe/ (five requests; see
// driver.DeleteCheck), that the server refuses a delete on a stale version
// and one of a missing key. Where it does not (MinIO, versitygw), every
// conditional delete fails with store.ErrUnsupported, naming the server and
// what it ignores, and deletes nothing; unconditional deletes work as
// before. No tenure component but the probe makes conditional deletes;
// store.Probe reports the refusal (deleteIfMatchUnsupported) and passes the
// store. Run `tenure store probe URL` before trusting any other server.
//
// Keys are stored verbatim. AWS S3 accepts any UTF-8 key of up to 1,024 bytes
// (the prefix included; longer keys are refused before any request).
// Servers that map keys to files refuse or alias some keys that S3 accepts:
// keys with empty, "." or ".." path segments, keys ending in "/", path
// segments longer than 255 bytes, and a key that is also a prefix of
// another ("a" and "a/b"): versitygw refuses the second, MinIO stores it
// but leaves it out of listings. tenure's own key layouts avoid all of them.
//
// # What is not guaranteed
//
// The driver is only as safe as the server's conditional writes: a server
// that ignores If-None-Match or If-Match gives no mutual exclusion at all,
// which is why every long-lived tenure component probes first. A write
// that fails with a timeout, a 5xx or a broken connection may have been
// applied. ETags of single-part uploads are MD5 digests of the content, so
// rewriting the same bytes yields the same version; tenure's records carry a
// nonce for that reason. List is not a snapshot: keys written while it pages
// may or may not appear.
package s3store
