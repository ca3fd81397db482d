package gcsstore

// Classify exposes the error classification to the tests.
var Classify = classify

// TrustConditionalDeletes settles d's check of conditional deletes as
// enforced, for tests against a fake server that records requests.
func TrustConditionalDeletes(d *Store) { d.deletes.Settle(nil) }
