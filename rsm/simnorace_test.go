//go:build !race

package rsm

const simRace = false
