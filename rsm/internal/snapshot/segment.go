package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/rsm/internal/record"
	"github.com/tenure-io/tenure/rsm/internal/rsmpb"
)

// Segments: the log's entries of a range exactly as the log stores them,
// each behind its length, checked as a log entry read at its index is.

// encodeSegment writes entries (consecutive indexes) as a segment.
func encodeSegment(entries []*rsmpb.Entry) ([]byte, error) {
	b := make([]byte, 0, 64+segmentSize(entries))
	b = append(b, record.Magic...)
	b = append(b, record.KindSegment)
	for _, e := range entries {
		at := len(b)
		b = append(b, 0, 0, 0, 0) // the entry's length, once known
		var err error
		if b, err = record.AppendEntry(b, e); err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	}
	return b, nil
}

// segmentSize is about the bytes entries take in a segment.
func segmentSize(entries []*rsmpb.Entry) int {
	n := 0
	for _, e := range entries {
		n += 4 + record.Header + proto.Size(e)
	}
	return n
}

// decodeSegment decodes a segment that must hold the entries first..last
// of group, each checked as a log entry read at its index is.
func decodeSegment(b []byte, group string, first, last uint64) ([]*rsmpb.Entry, error) {
	return decodeSegmentPar(b, group, first, last, 1, false)
}

// decodeSegmentPar is decodeSegment with the entries decoded by up to
// workers goroutines, each a run of consecutive entries: a cold start
// decodes as many bytes of segments as it applies, and decoding is most
// of a segment's cost. An error is the first entry's in index order. With
// borrow, the commands' data are parts of b (decodeEntryBorrowed), for
// machines that are all Borrowers.
func decodeSegmentPar(b []byte, group string, first, last uint64, workers int, borrow bool) ([]*rsmpb.Entry, error) {
	return decodeSegmentEach(b, group, first, last, workers, borrow, nil)
}

// decodeSegmentEach is decodeSegmentPar calling each, if not nil, with
// every entry decoded (the k-th of the segment) on the goroutine that
// decoded it.
func decodeSegmentEach(b []byte, group string, first, last uint64, workers int, borrow bool, each func(k int, e *rsmpb.Entry)) ([]*rsmpb.Entry, error) {
	frames, err := splitSegment(b, first, last)
	if err != nil {
		return nil, err
	}
	out := make([]*rsmpb.Entry, len(frames))
	errs := make([]error, len(frames))
	decodeRun := func(lo, hi int) {
		var in record.Interner
		if borrow {
			in = record.Interner{}
		}
		for k := lo; k < hi; k++ {
			i := first + uint64(k)
			var e *rsmpb.Entry
			var err error
			if borrow {
				e, err = record.DecodeEntryBorrowed(frames[k], i, in)
			} else {
				e, err = record.DecodeEntry(frames[k], i)
			}
			if err == nil && e.Group != "" && e.Group != group {
				err = fmt.Errorf("belongs to group %q", e.Group)
			}
			if err != nil {
				errs[k] = fmt.Errorf("segment entry %d: %w", i, err)
				return
			}
			out[k] = e
			if each != nil {
				each(k, e)
			}
		}
	}
	workers = max(1, min(workers, len(frames)))
	if workers == 1 {
		decodeRun(0, len(frames))
	} else {
		// Runs of equal bytes, not of equal counts: entries differ in size.
		var wg sync.WaitGroup
		per := (len(b) + workers - 1) / workers
		lo, size := 0, 0
		for k, f := range frames {
			size += len(f)
			if size >= per || k == len(frames)-1 {
				wg.Add(1)
				go func(lo, hi int) {
					defer wg.Done()
					decodeRun(lo, hi)
				}(lo, k+1)
				lo, size = k+1, 0
			}
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// splitSegment checks a segment's framing and cuts it into its entries,
// still encoded.
func splitSegment(b []byte, first, last uint64) ([][]byte, error) {
	if len(b) < len(record.Magic)+1 || string(b[:len(record.Magic)]) != record.Magic || b[len(record.Magic)] != record.KindSegment {
		if err := record.KindError(b, record.KindSegment); err != nil {
			return nil, err
		}
		return nil, errors.New("not a log segment")
	}
	if first == 0 || last < first {
		return nil, fmt.Errorf("segment range %d..%d", first, last)
	}
	rest := b[len(record.Magic)+1:]
	var out [][]byte
	for i := first; ; i++ {
		if len(rest) == 0 {
			if i != last+1 {
				return nil, fmt.Errorf("segment ends at %d, want %d", i-1, last)
			}
			return out, nil
		}
		if i > last {
			return nil, fmt.Errorf("segment has entries after %d", last)
		}
		if len(rest) < 4 {
			return nil, fmt.Errorf("segment ends inside the length of entry %d", i)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("segment ends inside entry %d", i)
		}
		out = append(out, rest[:n])
		rest = rest[n:]
	}
}
