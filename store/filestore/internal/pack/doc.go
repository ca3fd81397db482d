// Package pack is filestore's packed log: the keys of one prefix kept as
// records appended to segment files, under a head file that marks the
// prefix a pack (filestore's doc, "Packs", says what a user sees).
//
// Open a Log on a pack's head and segments' directory; Get, List, Put
// and Delete then work as a driver.Store's do on its keys, each catching
// up first with what other Logs of the pack (in this process or others)
// appended. Writers append under a flock(2) on the head; the oldest
// segments are reclaimed once nothing in them is live.
//
// Errors are driver errors: driver.NotFound for a missing key,
// driver.PreconditionFailed for a condition that does not hold, a
// permanent error matching store.ErrCorrupt for damage (a bad frame that
// frames follow, a missing segment), ErrGone when the head was replaced.
//
// What it does not guarantee: a Log trusts the file system's flock and
// fdatasync, and every writer of a pack to be a Log of this format; a
// segment removed or edited by hand is reported, not repaired.
//
// The format on disk is described in frame.go; testdata/format1 holds a
// pack written by the first version, which every later one must read.
package pack
