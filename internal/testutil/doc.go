// Package testutil starts real servers for integration tests: MinIO and
// versitygw, both S3-compatible, on loopback ports chosen at run time.
//
// Binaries are found, in order, through an environment variable
// (TENURE_MINIO_BIN, TENURE_VERSITYGW_BIN), in the cache directory that
// scripts/install-servers fills (${TENURE_CACHE:-$HOME/.cache/tenure}/bin),
// then on PATH. A test whose server is missing is skipped with a message
// saying how to install it, unless TENURE_REQUIRE_SERVERS=1 (CI), in which
// case it fails. Etcdctl finds etcdctl 3.7 the same way
// (TENURE_ETCDCTL_BIN); Etcdctl34 finds Debian's etcdctl 3.4 at
// /usr/bin/etcdctl (TENURE_ETCDCTL34_BIN), not on PATH, where 3.7 comes
// first. Nothing in this package panics.
//
// Usage, with one server per test binary shared by every test:
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		srv := testutil.MinIO(t)
//		// srv.Endpoint, srv.Bucket, srv.AccessKey, ...
//	}
//
// Without Main, each call starts a server of its own and stops it when the
// calling test ends; that is correct but slower. Either way no server outlives
// the test binary: Main stops shared servers after the tests, t.Cleanup stops
// per-test ones, and on Linux the child is also killed by the kernel if the
// test binary dies (a panic, a -timeout), through PR_SET_PDEATHSIG.
//
// Tests share a bucket: give every test a key prefix of its own.
package testutil
