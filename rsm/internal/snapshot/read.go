package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
	"github.com/tenure-io/tenure/store"
)

// Reading the snapshot object: its end index and version for rule 8 (a
// listing, unless its version is new), or the whole object, bounded and
// checked, remembered by version so that it is read once.

// End is a read of the snapshot for its end index and version: a
// listing of its key, and only if its version is not the one this store
// last read or wrote, a read of the whole object (returned, so that the
// caller need not read it again). A listing issued after log reads sees
// every snapshot written before it, as a read would: the store is strongly
// consistent for lists, and versions are never reused. It is rule 8's read
// of the snapshot after log entries (docs/rsm.md; rsm's readLog).
func (g *Store) End(ctx context.Context) (end uint64, version string, snap *Stored, err error) {
	key := g.key(Key)
	var items []store.Item
	err = g.do(ctx, func(ctx context.Context) error {
		var e error
		items, e = g.st.List(ctx, key, "", 1)
		return e
	})
	if err != nil {
		return 0, "", nil, err
	}
	if len(items) == 0 || items[0].Key != key {
		return 0, "", nil, nil
	}
	g.mu.Lock()
	known, knownEnd := g.snapVersion, g.snapEnd
	refused, refusedErr := g.refused, g.refusedErr
	g.mu.Unlock()
	if items[0].Version == known && known != "" {
		return knownEnd, known, nil, nil
	}
	if items[0].Version == refused && refused != "" {
		return 0, "", nil, refusedErr
	}
	snap, version, err = g.Read(ctx)
	var c *record.CorruptError
	if errors.As(err, &c) && (version == items[0].Version || version == "" && items[0].Size > earlierSnapshotMax) {
		// The object listed is the one refused (read at that version,
		// or refused unread for the size the listing gives too): until
		// an operator replaces it, it is refused as it is, unread.
		g.mu.Lock()
		g.refused, g.refusedErr = items[0].Version, err
		g.mu.Unlock()
	}
	if err != nil || snap == nil {
		return 0, "", nil, err
	}
	return snap.EndIndex, version, snap, nil
}

// rememberSnap records the snapshot version last read or written, with
// its end index (for End), its manifest if it is one and its
// writer's term (for the next snapshot written over it).
func (g *Store) rememberSnap(version string, end uint64, m *Manifest, term uint64) {
	g.mu.Lock()
	g.snapVersion, g.snapEnd, g.snapMan, g.snapTerm = version, end, m, term
	g.mu.Unlock()
}

// Held returns the snapshot this store last read or wrote: its version,
// its manifest (nil for the earlier formats) and its writer's term.
func (g *Store) Held() (version string, m *Manifest, term uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.snapVersion, g.snapMan, g.snapTerm
}

// Read returns the snapshot; nil and "" if there is none. It is read as a
// manifest, within manifestMax bytes; only an object larger than that is
// read again, as a snapshot of the earlier formats, within
// earlierSnapshotMax (bounded reads, docs/rsm.md). A *CorruptError comes
// with the version refused, or "" if it was refused unread (too large):
// rule 12, a snapshot that is corrupt, too large, of another kind or of
// another group is refused and never applied.
func (g *Store) Read(ctx context.Context) (*Stored, string, error) {
	var data []byte
	var version string
	key := g.key(Key)
	read := func(max int64) error {
		return g.do(ctx, func(ctx context.Context) error {
			var e error
			data, version, e = g.st.GetLimited(ctx, key, max)
			return e
		})
	}
	err := read(manifestMax)
	if errors.Is(err, store.ErrTooLarge) {
		err = record.TooLarge(read(earlierSnapshotMax), key, "snapshot of the earlier formats", earlierSnapshotMax)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var s *Stored
	var m *Manifest
	if len(data) > len(record.Magic) && data[len(record.Magic)] == record.KindManifest {
		if len(data) > manifestMax {
			err = fmt.Errorf("%w: a manifest of %d bytes; a manifest is at most %d", record.ErrTooLarge, len(data), manifestMax)
		} else if m, err = DecodeManifest(data); err == nil {
			s = &Stored{Snapshot: &rsmpb.Snapshot{EndIndex: m.End, Group: m.Group, Nonce: m.Nonce,
				Writer: m.Writer, WriterTerm: m.WriterTerm}, Man: m}
		}
	} else {
		s, err = Decode(data)
	}
	if err == nil && s.Group != "" && s.Group != g.group {
		err = fmt.Errorf("it belongs to group %q", s.Group)
	}
	if err != nil {
		return nil, version, &record.CorruptError{Key: key, Err: err}
	}
	s.Version = version
	g.rememberSnap(version, s.EndIndex, m, s.WriterTerm)
	return s, version, nil
}
