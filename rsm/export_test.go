package rsm

// SetPrepareFrom sets the segments' bytes from which a load prepares
// commands, and returns a function that restores it.
func SetPrepareFrom(n uint64) (restore func()) {
	old := prepareFrom
	prepareFrom = n
	return func() { prepareFrom = old }
}
