package rsm

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

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

// DialAsPeer connects to addr as h does to its peers, with h's key.
func DialAsPeer(h *Host, addr string) (*grpc.ClientConn, error) {
	creds := h.clientCreds(addr)
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
}
