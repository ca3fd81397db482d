// Package gcsstore is the tenure store driver for Google Cloud Storage,
// registered as the URL scheme "gs". It uses Google's generated client for
// the Cloud Storage JSON API, google.golang.org/api/storage/v1. Import it
// for its side effect, or import github.com/tenure-io/tenure/store/all:
//
//	import _ "github.com/tenure-io/tenure/store/gcsstore"
//
//	s, err := store.Open(ctx, "gs://my-bucket/tenure")
//	s, err = store.Open(ctx, "gs://tenure/dev?endpoint=http://127.0.0.1:4443")
//
// # URL
//
// gs://BUCKET/PREFIX?PARAMS. Every key is stored as the object PREFIX/key;
// a "/" is added after a non-empty PREFIX that lacks one (gs://b/p and
// gs://b/p/ are the same store). One parameter:
//
//   - endpoint: the base URL of a server other than Cloud Storage, such as
//     an emulator (http://127.0.0.1:4443); "/storage/v1/" is added to it.
//     Requests to it carry no credentials.
//
// Unknown or repeated parameters are an error. Credentials never go in the
// URL: they come from Application Default Credentials
// (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`,
// the metadata server on Google Cloud). With STORAGE_EMULATOR_HOST set (a
// host:port, or a URL such as http://127.0.0.1:4443), every request goes to
// that host without credentials, as with Google's own Cloud Storage
// clients; ?endpoint= takes precedence over it. Open makes one objects.list
// request and returns an error matching store.ErrPermanent that names the
// problem if the bucket does not exist, the credentials are refused or
// missing, or the URL (or STORAGE_EMULATOR_HOST) is malformed.
//
// New takes a *storage.Service (google.golang.org/api/storage/v1) of your
// own, for custom HTTP clients or credentials; ClientOptions gives the
// options Open builds its service with.
//
// # Permissions
//
// storage.objects.get, storage.objects.create and storage.objects.delete on
// the objects under PREFIX, and storage.objects.list on BUCKET (List, and
// the check at Open). A compare-and-swap replaces an object, which Cloud
// Storage counts as a delete as well as a create: storage.objects.delete is
// needed for Put, not only for Delete. roles/storage.objectUser grants all
// four.
//
// # Requests and errors
//
// Versions are object generations, as decimal strings. Put is one
// multipart upload with ifGenerationMatch=0 (create) or
// ifGenerationMatch=GENERATION (compare-and-swap), declaring the value's
// CRC32C so that the server refuses damaged bytes; Delete with a condition
// sends ifGenerationMatch. A version that is not a positive decimal integer
// matches no object, so a write conditioned on it fails with
// store.ErrPreconditionFailed without a request (and generation 0, which
// the API reads as "does not exist", is never sent as a version).
//
// Conditional writes are sent once: a retry whose first attempt landed
// would fail with 412 against its own write, reporting as lost a write that
// won. Such a write instead fails with the first error, which
// store.IsAmbiguous reports as ambiguous; store.PutResolved settles it by
// reading back. The service retries nothing itself (the driver never asks
// it to). The driver repeats the requests that are safe to repeat (Get,
// List, an unconditional Delete, Open's bucket check) after an error that
// maps to ErrTransient or ErrThrottled (below): up to three attempts, with
// pauses of 100 ms to 1 s, for a service from Open or from New alike. Get
// checks the CRC32C that Cloud Storage announces for the object
// (X-Goog-Hash) unless the bytes were decompressed on the way; a download
// whose body breaks off or fails that check is made again, whole.
//
// Errors map to store errors as follows: 412 (conditionNotMet), and 404
// on a conditional delete: ErrPreconditionFailed. 404 on Get:
// ErrNotFound. 429 and the reasons rateLimitExceeded and
// userRateLimitExceeded: ErrThrottled. 408, other 5xx, timeouts and
// connection errors: ErrTransient. 409: ErrConflict. 401, 403, 501,
// redirects, and 404 on Put and List (the bucket is gone): ErrPermanent.
// 400 (an object name Cloud Storage refuses) and 413: ErrInvalidArgument.
// errors.As still reaches the service's error type, *googleapi.Error.
//
// # Limits
//
// Object names are at most 1,024 bytes of UTF-8, the prefix included, and
// Cloud Storage refuses the names "." and ".." and those starting with
// ".well-known/acme-challenge/"; such keys are refused with
// store.ErrInvalidArgument before any request. Keys are otherwise stored
// verbatim. Values may be up to Cloud Storage's 5 TiB object size, though
// each is held in memory and sent in one request.
//
// # What is not guaranteed
//
// A write that fails with a timeout, a 5xx or a broken connection may have
// been applied. Cloud Storage allows about one write per second to one
// object name; more fail with 429, which the caller must back off from.
// The JSON API answers a read of a missing object and a read in a missing
// bucket alike, with 404: a bucket deleted after Open looks empty to Get,
// and an unconditional Delete there succeeds (Put and List report it as
// ErrPermanent). List is not a snapshot: objects written while it pages may
// or may not appear.
//
// fake-gcs-server, the emulator tenure's tests run against, applies
// ifGenerationMatch on uploads atomically but ignores it on deletes: there
// a delete on a stale generation would succeed. Before its first
// conditional delete the driver checks, once, on scratch keys under
// .tenure-probe/ (driver.DeleteCheck), that the server refuses a delete on
// a stale generation and one of a missing object; where it does not, every
// conditional delete fails with store.ErrUnsupported and deletes nothing,
// and store.Probe reports that. Run `tenure store probe URL` before
// trusting any server other than Cloud Storage.
package gcsstore
