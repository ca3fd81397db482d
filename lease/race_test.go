//go:build race

package lease_test

// raceEnabled: the race detector slows the loop tenfold; the scale tests
// run with fewer shards under it.
const raceEnabled = true
