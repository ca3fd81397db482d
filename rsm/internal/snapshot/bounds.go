package snapshot

import "github.com/tenure-io/tenure/rsm/internal/record"

// Every snapshot object is read with a bound derived from what a leader
// writes there (docs/rsm.md, "Bounded reads"): a larger object is refused
// as a corrupt one is, and no more of it than the bound is read
// (record.TooLarge). The writers keep to the same bounds.
const (
	// basePartObjectMax bounds a base part: a base is cut into parts of
	// basePartMax bytes. A manifest also bounds each part by the base's
	// bytes (Base.Bytes).
	basePartObjectMax = basePartMax

	// manifestMax bounds the snapshot object in its current format, the
	// manifest: its fixed fields (a group name and a writer's ID of at
	// most 200 bytes each, nonces, varints) take under 1 KiB, and each
	// segment at most 105 bytes (a run of its own: a term, a nonce of at
	// most 64 hex digits, a count and one pair). A leader writes a base
	// instead of a segment once a manifest lists maxSegments of them (6.9
	// MiB at the most), and never writes a manifest above the bound.
	manifestMax = 16 << 20
)

// earlierSnapshotMax bounds the snapshot object in the earlier formats
// (format.go), which hold the whole state in one object: 2 GiB, the
// largest protobuf the first format could hold. Such an object is read
// only when it is larger than a manifest can be, once per version
// (Store.End remembers one it refused). Tests lower it.
var earlierSnapshotMax int64 = 2 << 30

// segmentObjectMax bounds a segment: entries up to segmentMax bytes
// together, each behind its 4-byte length, or one entry alone when it is
// larger (up to entryMax, the log's bound); after the magic and the kind
// byte. A manifest also bounds each of its segments by their bytes all
// together (SegBytes).
func segmentObjectMax(entryMax int) int {
	return len(record.Magic) + 1 + max(segmentMax, 4+entryMax)
}
