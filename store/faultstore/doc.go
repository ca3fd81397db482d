// Package faultstore measures what tenure costs a store and breaks the store
// on purpose, for tests and benchmarks.
//
// A *Store wraps any driver.Store and is one itself, so it goes under the
// portable layer like any backend:
//
//	fs := faultstore.New(memstore.New(), faultstore.WithSeed(1))
//	s := store.New(fs)
//
// # Counting
//
// Every call is counted by operation (OpGet, OpPutCreate, OpPutCAS,
// OpDelete, OpList) and by the result its caller saw (OK, NotFound,
// PreconditionFailed, Throttled, Transient, ...), injected faults included,
// since a real store bills failed requests too:
//
//	before := fs.Counts()
//	// ... run for an hour of simulated time ...
//	used := fs.Counts().Sub(before)
//	perHour := float64(used.Total()) / elapsed.Hours()
//	refused := used.Get(faultstore.Writes, faultstore.PreconditionFailed)
//
// # Faults
//
// Each knob may be changed while calls are in flight:
//
//	fs.SetLatency(faultstore.AllOps, faultstore.LogNormal(20*time.Millisecond, 0.5))
//	fs.FailRate(faultstore.OpGet, driver.Transient, 0.01) // 1% of reads fail
//	fs.Throttle(faultstore.Writes, 0.05)                  // 5% of writes get SlowDown
//	fs.FailNext(faultstore.OpPutCAS, driver.Conflict, 1)  // the next CAS gets a 409
//	fs.AmbiguousNext(faultstore.OpPutCreate, 1)           // applied, then reported as failed
//	fs.SetPartition(faultstore.BlackHoled)                // every call hangs until its ctx ends
//	fs.SetPartition(faultstore.Connected)
//	fs.IgnoreConditions(faultstore.Writes)                // a store store.Probe must refuse
//	fs.ClearFaults()
//
// The knobs are shorthands for rules, which can also match a key prefix,
// skip the first calls, stop after a number of hits, delay the fault and
// wrap an error of the test's own type:
//
//	remove, err := fs.AddRule(faultstore.Rule{
//		Ops:    faultstore.OpPutCAS,
//		Prefix: "election/",
//		P:      1,
//		Skip:   2,
//		Times:  1,
//		Action: faultstore.ApplyThenHang, // the third CAS lands; its response never comes
//	})
//
// Injected errors are built with driver.Errorf, so the portable layer
// classifies them like a real store's: errors.Is(err, store.ErrTransient)
// holds for a dropped connection, store.ErrThrottled for throttling. A
// fault that makes the caller wait until its ctx ends returns a Transient
// error that wraps ctx.Err(); plain latency cut short returns ctx.Err()
// itself, as a slow but healthy store would.
//
// # Network faults
//
// A *Transport is an http.RoundTripper for tests against a real S3 server
// (MinIO): it answers 500 InternalError or 503 SlowDown with S3's XML error
// body, delays or black-holes requests, and sends a request, discards the
// response and reports a reset connection (HTTPApplyThenDrop), so that the
// write lands and the SDK never learns it:
//
//	tr := faultstore.NewTransport(http.DefaultTransport)
//	tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.WithIfMatch,
//		P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop})
//	client := &http.Client{Transport: tr}
//
// # What it does not do
//
// faultstore does not reorder or delay writes after they were applied (a
// write is visible to every later call the moment the inner store applied
// it), does not model clock skew, and does not fake time: delays are real
// sleeps, so tests that measure them should run under testing/synctest.
// A call that hangs until its ctx ends hangs for good under a ctx that
// never ends, and *store.Store's Close waits for it. With a seed,
// a sequence of calls meets the same faults on every run; concurrent calls
// draw in the order they arrive, which is not reproducible. The counters
// count calls made to the Store, not the extra calls IgnoreConditions makes
// to emulate unconditional writes.
package faultstore
