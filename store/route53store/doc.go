// Package route53store is the tenure store driver for Amazon Route 53,
// registered as the URL scheme "route53": each key is a TXT record in a
// hosted zone. It is for deployments that already run on Route 53 and want
// no other service; DynamoDB or S3 are better stores wherever they are an
// option (see "What is not guaranteed"). Import it for its side effect:
//
//	import _ "github.com/tenure-io/tenure/store/route53store"
//
//	s, err := store.Open(ctx, "route53://Z0123456789ABCDEFGHIJ/tenure")
//
// # URL
//
// route53://ZONEID/NAME?PARAMS. ZONEID is the hosted zone's ID; NAME is one
// or more DNS labels (a-z, 0-9, '-', '_'), such as "tenure" or
// "prod.tenure", under which every record of the store lives: with the zone
// example.com, records are named KEYLABELS.tenure.example.com. Parameters:
//
//   - endpoint: the server's base URL, for anything but AWS Route 53.
//   - region: the signing region. Default: from the AWS configuration,
//     else us-east-1 (Route 53 is global).
//   - profile: the shared-configuration profile to take credentials and
//     settings from.
//   - rate: requests a second for this store (default 5; see Throttling).
//
// Unknown or repeated parameters are an error. Credentials never go in the
// URL. Open makes one GetHostedZone request, to learn the zone's name, and
// returns an error matching store.ErrPermanent that names the problem if
// the zone does not exist, the credentials are refused or missing, or the
// URL is malformed. New takes a client of your own and the zone's name.
//
// # Records
//
// A key's record name is the key's bytes in base32 with the "extended hex"
// alphabet, lower case and unpadded (0-9, a-v), cut into labels of 63
// characters, the first label nearest NAME: "lock" under tenure.example.com
// is dhnm6qo.tenure.example.com. Base32 because DNS names ignore case, so
// base64 would alias "a" and "A"; the hex alphabet because it keeps the
// keys' byte order. A key may be any key tenure accepts, up to the length
// whose name fits DNS's 253 characters: 1 byte of key takes 1.6 characters,
// so with a root (NAME and zone) of 30 characters keys are at most 136
// bytes. Store.MaxKeyLen gives the exact figure; longer keys are refused
// with store.ErrInvalidArgument before any request. tenure's own keys are
// far shorter.
//
// The record's value is one TXT value: "tnr1:" NONCE ":" BASE64(value), cut
// into quoted strings of 255 characters. The value never holds a space, a
// quote or a backslash, so nothing splits or escapes it, and owner IDs with
// spaces round-trip. A TXT value is at most 4,000 characters, which leaves
// values of at most MaxValueSize (2,946) bytes; larger ones are refused with
// store.ErrInvalidArgument before any request. The TTL is RecordTTL (60 s);
// it only matters to DNS resolvers, which the driver never uses.
//
// The version is a digest (SHA-256) of the record's TTL and value: exactly
// what a DELETE must name. The random nonce makes every write's record,
// and so its version, new, even for the same bytes: no ABA.
//
// # Writes
//
// Every write is one ChangeResourceRecordSets batch, which Route 53 applies
// atomically or not at all:
//
//   - create-if-absent: CREATE. Route 53 refuses to create a record that
//     exists.
//   - compare-and-swap: DELETE of the exact current record (TTL and value)
//     and CREATE of the new one. Route 53 refuses a DELETE whose values do
//     not match the current ones, and then applies neither change.
//   - conditional delete: DELETE of the exact record.
//   - unconditional delete: read, then DELETE of what was read, again if it
//     changed in between (up to 5 times, then store.ErrConflict).
//
// The exact record behind a version comes from a cache of the versions the
// store has written or read (1,024 of them), so a leader renewing its own
// record sends one request; for any other version the driver reads the
// record first, and refuses the write (store.ErrPreconditionFailed, nothing
// sent) if the record read is not at that version.
//
// Route 53 says a condition failed only with InvalidChangeBatch and a
// message ("... but it already exists", "... but it was not found", "...
// but the values provided do not match the current values"). Those three
// phrases map to store.ErrPreconditionFailed; any other InvalidChangeBatch
// is store.ErrInvalidArgument. This is the one place where tenure reads an
// error's text: Route 53 gives no finer code.
//
// # Consistency
//
// shardcoordinator's Route 53 lock lists "eventual consistency enabling
// lock theft": a candidate that reads a stale record and judges it expired
// by the timestamp in it deletes and replaces a lease that the leader had
// just renewed. Two things close that hole here. The swap's condition is
// the exact record the candidate read, TTL and value, nonce included,
// which Route 53 checks against its authoritative copy when it applies the
// batch, not against any replica a read went to: if the leader renewed
// since, the record differs, the DELETE fails, and the whole batch is
// refused. And tenure never judges a lease by a timestamp another node
// wrote: a follower takes over only after the version it sees has not
// changed for LeaderTimeout on its own clock, and the nonce means a renewal
// always changes the version.
//
// What stays: reads (ListResourceRecordSets) are not documented to be
// strongly consistent, so Get and List may return a version older than the
// latest write. A follower can then believe a live leader's version has
// not changed, try to take over, and fail: a wasted request and a later
// takeover, never two leaders. But anything that needs a read to reflect
// every write acknowledged before it (the replicated state machine's
// linearizable reads and its check that a leader's term still stands) is
// not guaranteed on this store. Writes are applied to Route 53's
// authoritative copy at once (the change is PENDING only while it reaches
// the DNS servers, which the driver does not use) and the driver does not
// wait for INSYNC.
//
// # Throttling
//
// Route 53 limits API requests per AWS account (five a second for many
// years; a larger bucket since), and refuses a change batch for a zone
// while that zone's previous one is still being applied
// (PriorRequestNotComplete). Each Store paces its own requests with a
// token bucket, Options.RequestsPerSecond (default 5, ?rate=); stores and
// processes that share an account share its limit, so give each a part.
// A change that Route 53 refused with Throttling or PriorRequestNotComplete
// was not applied, so the driver sends it again after a jittered backoff
// (200 ms doubling to 5 s, Options.ThrottleRetries times, default 4) and
// then returns store.ErrThrottled. A change whose answer was lost (a
// timeout, a 5xx) is never sent again: the SDK's retries are off for
// changes, and store.PutResolved settles the outcome. Reads keep the SDK's
// retries.
//
// # List
//
// Route 53 lists records by name with the labels compared from the right,
// which is not the byte order of keys, and its exact comparison is not
// documented. So List reads every record from NAME's own name on, while
// the names extend NAME (its subtree, and sibling names such as
// NAME-other, which some orders put first), keeps the store's TXT records
// that match prefix and after, sorts them and returns the first limit. It
// costs one request per 300 records under NAME, whatever the limit, so
// keep NAME for tenure and keep the number of keys small (election and
// lease records are; a replicated state machine's log is not a good fit).
// Records under NAME that the driver did not write (other programs' names,
// other record types) are skipped; a TXT record at a key's own name that
// the driver cannot decode is an error matching store.ErrPermanent and
// store.ErrCorrupt.
//
// # Permissions
//
// route53:GetHostedZone, route53:ListResourceRecordSets and
// route53:ChangeResourceRecordSets on the hosted zone. An IAM condition on
// route53:ChangeResourceRecordSetsNormalizedRecordNames can confine the
// role to names under NAME.
//
// # What is not guaranteed
//
// Reads may be stale (see Consistency). A change that fails with a
// timeout, a 5xx or a broken connection may have been applied. List is not
// a snapshot and reads the whole store. Values are small (2,946 bytes) and
// keys short. moto, the emulator tenure's tests use, does not enforce a
// change batch's conditions at all (it accepts a CREATE of an existing
// name and a DELETE of a stale value); store.Probe reports it as unsafe,
// and tenure's tests check the driver's conditions against a fake with
// Route 53's documented semantics instead.
package route53store
