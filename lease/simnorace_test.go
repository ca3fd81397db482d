//go:build !race

package lease

const simEvery = 1
