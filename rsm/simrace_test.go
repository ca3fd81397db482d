//go:build race

package rsm

// The race detector slows the simulation about tenfold: CI runs fewer
// seeds under it, all of them without it.
const simRace = true
