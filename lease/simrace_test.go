//go:build race

package lease

// simEvery: under the race detector, which finds nothing in the
// simulation's one goroutine, it plays one case in three of three members.
const simEvery = 3
