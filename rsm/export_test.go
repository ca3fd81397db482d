package rsm

// SetPrepareFrom sets the segments' bytes from which a load prepares
// commands, and returns a function that restores it.
func SetPrepareFrom(n uint64) (restore func()) {
	old := prepareFrom
	prepareFrom = n
	return func() { prepareFrom = old }
}

// FollowLikeNoPacks makes h's nodes register with their leaders as a
// version without packs does (FollowRequest.reads_packs false).
func FollowLikeNoPacks(h *Host) { h.noPacks = true }

// LeaderStateMax is the bound leader_state.json is read within.
const LeaderStateMax = leaderStateMax
