// Package azurestore is the tenure store driver for Azure Blob Storage,
// registered as the URL scheme "azblob". Import it for its side effect, or
// import github.com/tenure-io/tenure/store/all:
//
//	import _ "github.com/tenure-io/tenure/store/azurestore"
//
//	s, err := store.Open(ctx, "azblob://tenure/prod?account=mystorageacct")
//	s, err = store.Open(ctx, "azblob://tenure/dev?endpoint=http://127.0.0.1:10000/devstoreaccount1&account=devstoreaccount1")
//
// # URL
//
// azblob://CONTAINER/PREFIX?PARAMS. Every key is stored as the block blob
// PREFIX/key in CONTAINER; a "/" is added after a non-empty PREFIX that
// lacks one. Parameters:
//
//   - account: the storage account. Default: AZURE_STORAGE_ACCOUNT.
//   - endpoint: the blob service's base URL. Default:
//     https://ACCOUNT.blob.core.windows.net. For Azurite, the path-style
//     account URL, such as http://127.0.0.1:10000/devstoreaccount1.
//
// Unknown or repeated parameters are an error. Credentials never go in the
// URL; they come from the environment, the first that applies:
//
//  1. AZURE_STORAGE_CONNECTION_STRING: names the account, endpoint and
//     credentials (account key or SAS) itself, so the URL must carry
//     neither ?account= nor ?endpoint=.
//  2. AZURE_STORAGE_KEY: the account's shared key, for the account named
//     by ?account= or AZURE_STORAGE_ACCOUNT.
//  3. Otherwise Microsoft Entra ID through azidentity's
//     DefaultAzureCredential: environment (service principal), workload
//     identity, managed identity, Azure CLI, Azure Developer CLI. Tokens
//     are only sent over https endpoints.
//
// Open gets a token if it needs one, then makes one List Blobs request,
// and returns an error matching store.ErrPermanent that names the problem
// if the container does not exist, the credentials are missing or refused,
// or the URL is malformed. The container is never created.
//
// New takes a *container.Client of your own (anything with the methods of
// API), for custom credentials, HTTP clients or pipeline policies.
//
// # Permissions
//
// With Entra ID, the role Storage Blob Data Contributor on the container
// (or the storage account) is enough: it allows reading, writing, deleting
// and listing blobs. Storage Blob Data Reader is not enough for anything
// but a read-only tool. With a shared key or an account SAS every
// operation is allowed; a SAS needs read, write, delete and list
// permissions on blob objects in the container.
//
// # Requests and errors
//
// Versions are ETags, passed back verbatim as If-Match; Azure gives every
// write a new ETag, even of the same bytes. Put is one Put Blob request
// with If-None-Match: * (create) or If-Match: ETAG (compare-and-swap).
// Delete removes the blob with its snapshots, if any; with a condition it
// sends If-Match. The SDK's retry policy is turned off for those conditional
// writes (per call, with policy.WithRetryOptions and MaxRetries -1),
// because a retry after an ambiguous failure can fail against its own
// first attempt; settle ambiguous outcomes with store.PutResolved instead.
// Get, List and unconditional Delete keep the client's retries (the SDK's
// default: three, with exponential backoff).
//
// Errors map to store errors as follows. 412 ConditionNotMet, 409
// BlobAlreadyExists (Azure's answer to If-None-Match: * on a blob that
// exists), and 404 on a write with If-Match: ErrPreconditionFailed. 404
// BlobNotFound on Get: ErrNotFound. 503 ServerBusy and 429: ErrThrottled.
// 500 OperationTimedOut ("may or may not have succeeded"), other 5xx,
// timeouts and connection errors: ErrTransient. 401, 403
// (AuthenticationFailed, AuthorizationPermissionMismatch, ...),
// ContainerNotFound, lease errors (someone else holds a lease on the
// blob: 412 LeaseIdMissing and the like), archived blobs and other 409s:
// ErrPermanent. 400 InvalidResourceName and other malformed requests:
// ErrInvalidArgument. errors.As still reaches the SDK's
// *azcore.ResponseError.
//
// List uses List Blobs with the prefix and the startFrom parameter
// (service version 2026-02-06 and later) to begin at the key after, and
// asks for limit+1 blobs a page. Azure has no exclusive start-after: the
// driver drops keys up to after itself, so a service that ignores
// startFrom (an older emulator) still answers correctly, at the cost of
// listing, in pages of up to 5,000, every blob under the prefix that sorts
// before after.
//
// # Limits
//
// Keys are stored verbatim, and Azure cannot store every key that the
// portable layer accepts. CheckKey refuses, with store.ErrInvalidArgument
// before any request: keys with a backslash (Azure turns it into "/"); a
// path segment ending in "." (Azure trims trailing dots, so "a.", ".",
// "..", "x/../y" and "x./y" are refused); more than 254 path segments,
// or more than 1,024 bytes, prefix included; and C1 control, private-use
// and non-characters, which Azure refuses. tenure's own key layouts avoid
// all of them.
//
// Values are at most MaxValueSize (256 MiB, the SDK's limit for a single
// Put Blob); larger values are refused with store.ErrInvalidArgument, as
// they would need several requests that cannot form one conditional write.
//
// # What is not guaranteed
//
// The driver is only as safe as the service's conditional writes, which
// Azure Blob Storage enforces atomically; an emulator or gateway that
// ignored them would give no mutual exclusion, which is why every
// long-lived tenure component probes first. A write that fails with a
// timeout, a 5xx or a broken connection may have been applied. List is not
// a snapshot: blobs written while it pages may or may not appear. A blob
// under the prefix that tenure did not write (a page or append blob, one
// under a lease, one in the archive tier) gives errors, not data. Accounts
// with a hierarchical namespace (Data Lake Storage) are not tested: they
// treat "/" as a directory separator and cannot hold both "a" and "a/b".
package azurestore
