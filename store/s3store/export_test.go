package s3store

// ConfigureChecksums lets tests build clients configured as OpenURL's.
var ConfigureChecksums = configureChecksums

// TrustConditionalDeletes settles d's check of conditional deletes as
// enforced, for tests against a fake server that records requests.
func TrustConditionalDeletes(d *Store) { d.deletes.Settle(nil) }
