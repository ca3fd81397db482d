// Package etcddiff holds the differential test of tenure's etcd API: one
// seeded random workload runs against embedded etcd and against a tenure
// group serving etcd's API, and every response, error and watch history
// must match. It is its own module so that etcd's server, which only this
// test needs, stays out of tenure's go.mod.
package etcddiff
