// Package store is the portable store every tenure component stands on: a
// key whose value is read with a version and written only if a condition
// on that version holds (Get, Put with IfAbsent or IfMatch, Delete, List).
// Open names a driver by URL (file://, mem://, s3://, gs://, azblob://,
// dynamodb://, etcd://, route53://); a *Store validates arguments,
// classifies the driver's errors once (KindOf, errors.Is with ErrNotFound,
// ErrPreconditionFailed, ...) and waits for calls in flight on Close.
//
// # Conditional deletes
//
// Delete with IfMatch(v) either keeps its contract, refused with
// ErrPreconditionFailed when the key is missing or has another version, or
// fails with ErrUnsupported and deletes nothing: some S3-compatible servers
// (MinIO, versitygw) and fake-gcs-server ignore the condition of a delete,
// and their drivers find that out once, before the first conditional
// delete, and then refuse every one. It is not emulated: a compare-and-swap
// to a tombstone followed by a delete is not atomic (a create landing on
// the tombstone in between would be deleted). Apart from Probe, no tenure
// component makes a conditional delete.
//
// # Metrics
//
// A Store registers no metrics itself. Count its calls with Metrics:
//
//	m, err := store.NewMetrics(prometheus.DefaultRegisterer, nil)
//	s, err := store.Open(ctx, "file:///var/lib/tenure", store.WithObserver(m.Observe))
//
// which exports tenure_store_requests_total{op,cond,result} and
// tenure_store_request_duration_seconds{op} (see Metrics). Stores that
// share a Registerer share these series. The election package does the same
// for a store it opens itself from a URL with its Registerer; a store passed
// in as a *Store is counted by whoever opened it, so no call is counted
// twice.
package store
