package rsm

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"

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

// Every node's replica in this package's tests checks that it is used on
// its owner's goroutine only.
func init() { assertOwner = ownedBy }

// ownedBy returns a check that panics unless it runs on the goroutine that
// called ownedBy.
func ownedBy() func() {
	owner := goroutineID()
	return func() {
		if g := goroutineID(); g != owner {
			panic(fmt.Sprintf("rsm: the replica owned by goroutine %d was used by goroutine %d", owner, g))
		}
	}
}

// goroutineID is the running goroutine's number, from its stack's header
// ("goroutine 7 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}
