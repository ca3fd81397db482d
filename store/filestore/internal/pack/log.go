package pack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
)

// A Log is a pack: it keeps the keys of one key directory as records appended to
// segment files, so that a write costs one fdatasync(2) of a file that
// only grows, where a file per key costs two flushes (the file's and its
// directory's) and an inode. The directory's own path ("log.d") is then a
// regular file, the pack's head: its marker, its format, and the flock(2)
// that writers of every process hold while they append. The segments are
// in a sibling directory ("log.p"), named by their sequence number in hex;
// no key maps to either name ('.' is always escaped in a key's path).
//
// Writers of a Log share batches (group commit): one goroutine takes
// the head's lock, reads what other writers appended since it last looked,
// checks each write's condition in order, appends the batch as one frame,
// releases the lock, syncs the segment, then answers them all. A frame is
// never acknowledged before its sync, and a writer syncs whatever it finds
// appended by others before it appends (one still syncing, or one that
// died before its sync), so only the last frame of a pack may be torn by
// a crash: a
// writer cuts such a tail, and a reader stops at it. A bad frame anywhere
// else is corruption, reported as such.
//
// A reader, which takes no lock, makes durable what it is about to
// report: when it reads frames that it did not write or see synced, it
// syncs the segment before it answers, so that nothing it returns can be
// lost in a crash (the writer of those frames may still be syncing them;
// one of the two syncs finds nothing to do).
//
// A new segment starts when the last one reaches Config.SegmentMax; the oldest
// segments are removed once every put they hold is overwritten or
// deleted, which is how a log truncated from its start reclaims its space.
//
// A Log is safe for concurrent use, and so are Logs of one pack in many
// processes: each reads what the others appended before it answers.
type Log struct {
	head     string // the head file: the key directory's own path
	segDir   string // the segments' directory
	readOnly bool
	headID   fsys.FileID // the head found; another file there is another pack
	headOK   bool        // headFD was found to be the head (lockHead)
	// segGone: segment l.seg was removed when readSegment last looked
	// (fsys.Unlinked).
	segGone  bool
	gone     func() // forgets this pack, when its head is gone or replaced
	validKey func(string) bool
	segMax   int64
	prealloc bool
	hooks    *Hooks

	// lead is held by the goroutine that writes batches for the queue.
	lead  chan struct{}
	qmu   sync.Mutex
	queue []*packOp

	mu      sync.Mutex // guards what follows, and the files' use
	headFD  int        // the head, opened by the first writer (-1 before)
	segs    map[uint64]*os.File
	first   uint64 // the oldest segment this Log has not removed
	shut    uint64 // the oldest segment this Log has not closed as dead (reclaim)
	seg     uint64 // the segment read up to off; 0 before any
	listed  uint64 // the last segment a listing found since the index began
	off     int64
	durable int64 // the bytes of seg known to be durable
	keys    map[string]packLoc
	live    map[uint64]int // the puts in keys, by segment
	frame   []byte         // the last batch's frame, its memory used again
	closed  bool
}

// packLoc is where a key's value is: its segment, offset and length, the
// checksum its record carries, and its version.
type packLoc struct {
	seg     uint64
	off     int64
	size    int
	crc     uint32
	version string
}

// packOp is one write waiting for its batch.
type packOp struct {
	key   string
	value []byte
	del   bool
	cond  driver.Cond
	// visible, if not nil, is called once the op's record is appended and
	// in the index, before the sync (driver.WithVisible).
	visible func()
	state   atomic.Int32 // opQueued, opTaken, opAbandoned
	done    chan struct{}
	// The outcome, set before done closes.
	version string
	err     error
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

const (
	// HeadText is a pack's head file: its format. Another text is a
	// format this version does not know, and refused.
	HeadText  = "tenure filestore pack, format 1\n"
	segSuffix = ".s"

	// packGapTries bounds how often a read starts over when segments it
	// was reading are removed under it.
	packGapTries = 8
)

// frameKeep bounds the frame buffer a pack keeps for its next batch: a
// batch of large values allocates its own.
const frameKeep = 1 << 20

// DefaultSegmentMax is the size at which a pack starts a new segment. A
// segment's blocks are freed all at once when it is removed, and a file
// system that discards what it frees (ext4 mounted with -o discard,
// common on cloud disks) holds the disk meanwhile: 32 MiB segments gave
// eight writers of an RSM 43 to 62 puts slower than 10 ms in 20 s, 4 MiB
// ones 3 to 7 (docs/BENCHMARKS.md). Smaller ones start a segment (a
// create, its allocation and a directory sync) more often, and 2 and 1
// MiB did no better in a first sitting.
const DefaultSegmentMax = 4 << 20

// Config is where a Log is and how it writes.
type Config struct {
	// Head is the head file's path, Segments the segments' directory.
	Head, Segments string
	// ReadOnly opens the segments for reading only; writes then fail.
	ReadOnly bool
	// ValidKey says whether a record's key is one the store could have
	// written; a record with another is corruption.
	ValidKey func(key string) bool
	// Gone, if set, is called when the head is found removed or replaced
	// (by hand: a pack never turns back into a directory), before the
	// operation fails with ErrGone.
	Gone func()
	// SegmentMax is the size at which a new segment starts (0:
	// DefaultSegmentMax).
	SegmentMax int64
	// NoPrealloc leaves new segments' blocks to be allocated by each
	// append rather than at once.
	NoPrealloc bool
	// Hooks, if set, are consulted at each use: tests set them.
	Hooks *Hooks
}

// Hooks are what tests change in a Log's work: each nil field leaves it
// as it is.
type Hooks struct {
	// BeforeSync runs after a writer releases the head's lock and before
	// it syncs its frame; tests stop a writer there.
	BeforeSync func()
	// AfterSegmentRead runs when a Log has read the segment it reads up
	// to its end, before it looks for the next one; writer says whether
	// it holds the head's lock.
	AfterSegmentRead func(writer bool)
	// AfterNextMissing runs when a Log has found the segment after the
	// one it read missing, before it decides whether that is the end of
	// the pack.
	AfterNextMissing func(writer bool)
	// Queued runs when a write is queued, with the writes queued then.
	Queued func(n int)
	// Sync replaces the sync of a segment's appended frames, and SyncDir
	// that of a new segment's name (for tests that check no crash, to run
	// many seeds in seconds).
	Sync    func(*os.File) error
	SyncDir func(dir string) error
}

// ErrGone is a pack whose head was removed or replaced since the Log
// was opened (by hand: a pack never turns back into a directory).
var ErrGone = errors.New("the pack's head was removed or replaced")

// errPackGap is a segment gone under a reader: the writers removed it,
// so the reader's index must be built again from the oldest segment.
var errPackGap = errors.New("a segment was removed while it was read")

// Open opens the pack whose head is at c.Head: it checks the head's
// format, and remembers which file it is (another file there later is
// another pack, ErrGone). It reads no segment: each operation reads what
// was appended since the last.
func Open(c Config) (*Log, error) {
	id, err := fsys.IDOf(c.Head)
	if err != nil {
		return nil, ioErr("stat pack head", err)
	}
	if err := CheckHead(c.Head); err != nil {
		return nil, err
	}
	if c.SegmentMax <= 0 {
		c.SegmentMax = DefaultSegmentMax
	}
	if c.Hooks == nil {
		c.Hooks = &Hooks{}
	}
	return &Log{
		head:     c.Head,
		segDir:   c.Segments,
		readOnly: c.ReadOnly,
		validKey: c.ValidKey,
		gone:     c.Gone,
		segMax:   c.SegmentMax,
		prealloc: !c.NoPrealloc,
		hooks:    c.Hooks,
		headID:   id,
		lead:     make(chan struct{}, 1),
		headFD:   -1,
		segs:     map[uint64]*os.File{},
		keys:     map[string]packLoc{},
		live:     map[uint64]int{},
	}, nil
}

// Head is the path of the pack's head.
func (l *Log) Head() string { return l.head }

func (l *Log) sync(f *os.File) error {
	if h := l.hooks.Sync; h != nil {
		return h(f)
	}
	return fsys.Fdatasync(f)
}

func (l *Log) syncDir(dir string) error {
	if h := l.hooks.SyncDir; h != nil {
		return h(dir)
	}
	return fsys.SyncDir(dir)
}

func (l *Log) segPath(n uint64) string {
	const digits = "0123456789abcdef"
	var name [16]byte // %016x, without fmt: every batch asks for one
	for i := len(name) - 1; i >= 0; i-- {
		name[i] = digits[n&15]
		n >>= 4
	}
	return filepath.Join(l.segDir, string(name[:])+segSuffix)
}

// Version is the version of data: a hash of its bytes, as S3's ETag is,
// so the same bytes always have the same version.
func Version(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// ioErr wraps an unexpected error of the file system. A missing file
// here is not a missing key but the store's directory changing under
// us, so it is not NotFound.
func ioErr(op string, err error) error {
	k := fsys.Kind(err)
	if k == driver.NotFound {
		k = driver.Permanent
	}
	return driver.Errorf(k, "filestore: %s: %w", op, err)
}

func errClosed() error { return driver.Errorf(driver.Permanent, "filestore: %w", store.ErrClosed) }

func errExists() error { return driver.Errorf(driver.PreconditionFailed, "filestore: key exists") }

func packCorrupt(what string, args ...any) error {
	return &driver.Error{Kind: driver.Permanent, Err: corruptError("filestore: corrupt pack: " + fmt.Sprintf(what, args...))}
}

// corruptError is damage to the store's own data: it matches
// store.ErrCorrupt.
type corruptError string

func (e corruptError) Error() string        { return string(e) }
func (e corruptError) Is(target error) bool { return target == store.ErrCorrupt }

// checkHead reads the head file and refuses a format it does not know.
func CheckHead(head string) error {
	b, err := os.ReadFile(head)
	if err != nil {
		return ioErr("read pack head", err)
	}
	if string(b) != HeadText {
		return packCorrupt("%s is not a pack's head of a format this version knows (%q)", head, firstLine(b))
	}
	return nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return string(b[:min(len(b), 80)])
}

// open returns segment n, opened for reading (and writing, in a writable
// store).
func (l *Log) open(n uint64) (*os.File, error) {
	if f, ok := l.segs[n]; ok {
		return f, nil
	}
	flag := os.O_RDWR
	if l.readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(l.segPath(n), flag, 0)
	if err != nil {
		return nil, err
	}
	l.segs[n] = f
	return f, nil
}

// listSegs returns the segments' numbers, in order.
func (l *Log) listSegs() ([]uint64, error) {
	entries, err := os.ReadDir(l.segDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, ioErr("list pack segments", err)
	}
	var out []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok || len(name) != 16 {
			continue
		}
		if n, err := strconv.ParseUint(name, 16, 64); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// forget tells Config.Gone that the head is gone or replaced, and
// forgets the index: the next use reads what is there now.
func (l *Log) forget() {
	if l.gone != nil {
		l.gone()
	}
	l.reset()
}

// reset forgets the index, to build it again from the oldest segment.
// Segments it closes may have been removed: closed off the caller's path,
// as reclaim's.
func (l *Log) reset() {
	var drop []*os.File
	for n, f := range l.segs {
		drop = append(drop, f)
		delete(l.segs, n)
	}
	if len(drop) > 0 {
		go closeFiles(drop)
	}
	clear(l.keys)
	clear(l.live)
	l.first, l.shut, l.seg, l.listed, l.off, l.durable = 0, 0, 0, 0, 0, 0
}

// catchUp reads into the index what was appended since it last read,
// starting again from the oldest segment when one it needed was removed.
// A writer (holding the head's lock) cuts a torn last frame.
func (l *Log) catchUp(writer bool) error {
	for try := 1; ; try++ {
		err := l.catchUpOnce(writer)
		if err == nil {
			l.reclaim(writer && !l.readOnly)
		}
		if !errors.Is(err, errPackGap) {
			return err
		}
		if try == packGapTries {
			return driver.Errorf(driver.Transient, "filestore: pack %s: %w, %d times in a row", l.head, err, try)
		}
		l.reset()
	}
}

func (l *Log) catchUpOnce(writer bool) error {
	if id, err := fsys.IDOf(l.head); err != nil || id != l.headID {
		l.forget()
		return driver.Errorf(driver.Transient, "filestore: pack %s: %w", l.head, ErrGone)
	}
	if l.seg == 0 {
		segs, err := l.listSegs()
		if err != nil || len(segs) == 0 {
			return err
		}
		l.first, l.shut, l.seg = segs[0], segs[0], segs[0]
		l.listed = segs[len(segs)-1]
	}
	for {
		f, err := l.open(l.seg)
		if errors.Is(err, fs.ErrNotExist) {
			return errPackGap
		}
		if err != nil {
			return ioErr("open pack segment", err)
		}
		torn, err := l.readSegment(f)
		if err != nil {
			return err
		}
		if h := l.hooks.AfterSegmentRead; h != nil {
			h(writer)
		}
		_, err = l.open(l.seg + 1)
		if errors.Is(err, fs.ErrNotExist) {
			if h := l.hooks.AfterNextMissing; h != nil {
				h(writer)
			}
			last, err := l.isLast(f, writer)
			if err != nil {
				return err
			}
			if last {
				if torn && writer {
					// Under the head's lock: no writer is appending, so a
					// torn frame is one whose writer died, never synced.
					if err := f.Truncate(l.off); err != nil {
						return ioErr("cut a pack's torn tail", err)
					}
				}
				return l.syncRead(f)
			}
		} else if err != nil {
			return ioErr("open pack segment", err)
		}
		// Segment l.seg+1 exists: no writer appends to l.seg any more, but
		// one may have appended since the read above, filling it before it
		// started the next (another Log, which this one's stat did not
		// see). Read it again to its end before moving on, or a key put
		// there would be missed: read as absent, created again over its
		// value, its segment reclaimed. A writer starts a segment only
		// after the last frame of the one before is whole, so what looks
		// torn now is corruption.
		if torn, err = l.readSegment(f); err != nil {
			return err
		}
		if torn {
			return packCorrupt("%s ends in a torn frame at %d, and a later segment exists", l.segPath(l.seg), l.off)
		}
		if err := l.syncRead(f); err != nil {
			return err
		}
		l.seg, l.off, l.durable = l.seg+1, 0, 0
	}
}

// isLast reports whether segment l.seg, read through f, is the pack's
// last, segment l.seg+1 having been found missing. It must be: a segment
// missing between others is not a removal (those go oldest first, and f
// would be fsys.Unlinked) but damage, and a reader that took the segment
// before the gap for the last would answer that the keys after it are
// absent. A writer, about to append, lists the segments again, and so
// does a reader that finds its segment full (a writer starts the next
// one then); a reader otherwise goes by the listing its index began
// with, or last took. A reader's listing may find a segment a writer
// made after the reader looked: isLast reports false, and no error, if
// segment l.seg+1 is there now.
func (l *Log) isLast(f *os.File, writer bool) (bool, error) {
	// Under the head's lock no one removes segments (reclaim), so a
	// writer goes by what readSegment just saw; a reader looks again.
	if (writer && l.segGone) || (!writer && fsys.Unlinked(f)) {
		return false, errPackGap
	}
	if writer || l.off >= l.segMax {
		segs, err := l.listSegs()
		if err != nil {
			return false, err
		}
		if len(segs) > 0 {
			l.listed = max(l.listed, segs[len(segs)-1])
		}
	}
	if l.listed <= l.seg {
		return true, nil
	}
	_, err := l.open(l.seg + 1)
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, ioErr("open pack segment", err)
	case fsys.Unlinked(f):
		return false, errPackGap
	}
	return false, packCorrupt("segment %d of %s is missing, and segment %d exists", l.seg+1, l.segDir, l.listed)
}

// syncRead makes durable the bytes of the current segment read but not
// known durable: frames another writer appended, which it may not have
// synced yet (or ever, if it died).
func (l *Log) syncRead(f *os.File) error {
	if l.off <= l.durable {
		return nil
	}
	if err := l.sync(f); err != nil {
		return ioErr("sync pack segment", err)
	}
	l.durable = l.off
	return nil
}

// readSegment reads f's frames after l.off into the index. It reports a
// torn tail (a frame cut short by the end of the file, or a bad frame
// that ends where the file does) without an error, and a bad frame that
// more bytes follow as corruption.
func (l *Log) readSegment(f *os.File) (torn bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return false, ioErr("stat pack segment", err)
	}
	l.segGone = fsys.UnlinkedInfo(fi)
	size := fi.Size()
	var buf []byte
	whole := int64(0) // a frame's length that the last read cut
	for l.off < size {
		n := min(size-l.off, max(whole, ReadChunk))
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b, err := readFull(f, buf[:n], l.off)
		if err != nil {
			return false, err
		}
		if len(b) == 0 {
			return false, nil // cut since the stat
		}
		whole = 0
		for len(b) > 0 {
			recs, fn, st, why := decodeFrame(b, l.validKey)
			if st == frameOK {
				l.apply(recs, l.seg, l.off)
				l.off += int64(fn)
				b = b[fn:]
				continue
			}
			end := l.off+int64(len(b)) == size
			if st == frameShort && !end {
				whole = max(int64(fn), frameHeader) // read it whole
				break
			}
			rest := b
			if !end {
				// What follows a bad frame decides whether it is a torn
				// tail: read all of it (a crash's aftermath, rarely).
				if rest, err = readFull(f, make([]byte, size-l.off), l.off); err != nil {
					return false, err
				}
			}
			return l.tail(rest, st, fn, why)
		}
	}
	return false, nil
}

// ReadChunk is the most of a segment a read takes at a time (more for
// a larger frame): a cold start reads a log of up to a segment's size.
const ReadChunk = 1 << 20

// readFull reads into b at off, short only at the end of the file.
func readFull(f *os.File, b []byte, off int64) ([]byte, error) {
	n, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, ioErr("read pack segment", err)
	}
	return b[:n], nil
}

// tail decides what a frame that did not decode (st, its claimed length
// n, why) is, with rest the segment's bytes from it to its end: a torn
// tail if nothing whole follows it (a crash leaves the bytes it wrote, or
// zeros where the size was written and the data was not), else corruption.
func (l *Log) tail(rest []byte, st frameStatus, n int, why string) (torn bool, err error) {
	tail := st == frameShort || n == len(rest) || n == 0 && allZero(rest)
	if tail && !l.frameWithin(rest[1:]) {
		return true, nil
	}
	if why == "" {
		why = "a frame cut short, and frames after it"
	}
	return false, packCorrupt("%s at offset %d: %s", l.segPath(l.seg), l.off, why)
}

// frameWithin reports whether a whole frame starts anywhere in b.
func (l *Log) frameWithin(b []byte) bool {
	magic := binary.LittleEndian.AppendUint32(nil, frameMagic)
	for i := 0; ; i++ {
		j := bytes.Index(b[i:], magic)
		if j < 0 {
			return false
		}
		i += j
		if _, _, st, _ := decodeFrame(b[i:], l.validKey); st == frameOK {
			return true
		}
	}
}

// allZero reports whether b holds only zero bytes: what a crash leaves
// where a file's size was written and its data was not.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// apply enters a frame's records, at offset off of segment seg, in the
// index.
func (l *Log) apply(recs []packRec, seg uint64, off int64) {
	for _, r := range recs {
		if old, ok := l.keys[r.key]; ok {
			l.live[old.seg]--
			delete(l.keys, r.key)
		}
		if r.del {
			continue
		}
		version := r.version
		if version == "" {
			version = Version(r.value)
		}
		l.keys[r.key] = packLoc{
			seg:     seg,
			off:     off + int64(r.off+recHeader+len(r.key)),
			size:    len(r.value),
			crc:     r.crc,
			version: version,
		}
		l.live[seg]++
	}
}

// Get reads key's value, of at most max bytes, into buf's memory if it
// fits, and its version. A missing key is a driver.NotFound error.
func (l *Log) Get(key string, max int64, buf []byte) ([]byte, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, "", errClosed()
	}
	for try := 1; ; try++ {
		if err := l.catchUp(false); err != nil {
			return nil, "", err
		}
		loc, ok := l.keys[key]
		if !ok {
			return nil, "", driver.Errorf(driver.NotFound, "filestore: no such key")
		}
		if int64(loc.size) > max {
			return nil, "", driver.TooLargeError(int64(loc.size), max)
		}
		f, err := l.open(loc.seg)
		if errors.Is(err, fs.ErrNotExist) && try < packGapTries {
			l.reset() // removed since: the key was overwritten or deleted
			continue
		}
		if err != nil {
			return nil, "", ioErr("open pack segment", err)
		}
		data := buf[:0]
		if cap(data) < loc.size {
			data = make([]byte, loc.size)
		}
		data = data[:loc.size]
		if _, err := f.ReadAt(data, loc.off); err != nil {
			return nil, "", ioErr("read pack segment", err)
		}
		if recCRC(key, data) != loc.crc {
			return nil, "", packCorrupt("%s at offset %d: the value of %q does not match its checksum", l.segPath(loc.seg), loc.off, key)
		}
		return data, loc.version, nil
	}
}

// Item is a key a pack's listing found.
type Item struct {
	Key     string
	Version string
	Size    int64
}

// List returns the keys with prefix after after, in order.
func (l *Log) List(prefix, after string) ([]Item, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed()
	}
	if err := l.catchUp(false); err != nil {
		return nil, err
	}
	var out []Item
	for k, loc := range l.keys {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, Item{k, loc.version, int64(loc.size)})
		}
	}
	slices.SortFunc(out, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Put writes key's value under cond (driver.IfAbsent or driver.IfMatch),
// and returns its version once it is durable.
func (l *Log) Put(ctx context.Context, key string, data []byte, cond driver.Cond) (string, error) {
	if len(data) > ValueMax {
		return "", driver.TooLargeError(int64(len(data)), ValueMax)
	}
	op := &packOp{key: key, value: data, cond: cond, visible: driver.VisibleFunc(ctx)}
	l.do(ctx, op)
	return op.version, op.err
}

// Delete deletes key under cond (unconditional, or driver.IfMatch), and
// returns once the deletion is durable. Deleting a missing key
// unconditionally is no error.
func (l *Log) Delete(ctx context.Context, key string, cond driver.Cond) error {
	op := &packOp{key: key, del: true, cond: cond, visible: driver.VisibleFunc(ctx)}
	l.do(ctx, op)
	return op.err
}

// do runs op in a batch, and returns once the batch is durable or ctx
// ends before a batch took op (op.err says which).
func (l *Log) do(ctx context.Context, op *packOp) {
	op.done = make(chan struct{})
	l.qmu.Lock()
	l.queue = append(l.queue, op)
	n := len(l.queue)
	l.qmu.Unlock()
	if h := l.hooks.Queued; h != nil {
		h(n)
	}
	for {
		select {
		case <-op.done:
			return
		case <-ctx.Done():
			if op.state.CompareAndSwap(opQueued, opAbandoned) {
				op.err = ctx.Err()
				return
			}
			<-op.done // taken: its batch decides it
			return
		case l.lead <- struct{}{}:
			l.writeQueued(ctx)
			<-l.lead
		}
	}
}

// writeQueued writes batches of the queued ops until the queue is empty.
// It takes the head's lock before it takes any op, waiting at most until
// ctx (its own op's) ends: the ops stay queued for another waiter to
// write then.
func (l *Log) writeQueued(ctx context.Context) {
	for {
		l.qmu.Lock()
		empty := len(l.queue) == 0
		l.qmu.Unlock()
		if empty {
			return
		}
		l.mu.Lock()
		err := l.lockHead(ctx)
		if err != nil && ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		l.qmu.Lock()
		q := l.queue
		l.queue = nil
		l.qmu.Unlock()
		ops := q[:0]
		for _, op := range q {
			if op.state.CompareAndSwap(opQueued, opTaken) {
				ops = append(ops, op)
			}
		}
		if err == nil {
			l.writeBatch(ops) // and unlocks the head
		} else {
			for _, op := range ops {
				op.err = err
			}
		}
		l.mu.Unlock()
		for _, op := range ops {
			close(op.done)
		}
	}
}

// lockHead takes the head's flock, opening the head first if need be.
func (l *Log) lockHead(ctx context.Context) error {
	if l.closed {
		return errClosed()
	}
	if l.headFD < 0 {
		fd, err := fsys.OpenLockFile(l.head)
		if err != nil {
			return ioErr("open pack head", err)
		}
		l.headFD, l.headOK = fd, false
	}
	if _, err := fsys.WaitLock(ctx, l.headFD, fsys.TryLock); err != nil {
		if se := (*os.SyscallError)(nil); errors.As(err, &se) {
			return ioErr("flock", se.Err)
		}
		return err
	}
	// The lock is the head's, found by its path: a head replaced since
	// (by hand) would be another lock, excluding no one. Checked once a
	// descriptor: an open file stays the file it is (catchUp checks that
	// the path still names it).
	if l.headOK {
		return nil
	}
	if id, err := fsys.FDID(l.headFD); err != nil || id != l.headID {
		_ = fsys.Unlock(l.headFD)
		_ = fsys.CloseFD(l.headFD)
		l.headFD = -1
		l.forget()
		return driver.Errorf(driver.Transient, "filestore: pack %s: %w", l.head, ErrGone)
	}
	l.headOK = true
	return nil
}

// writeBatch, under the head's lock, reads what other writers appended,
// checks each op's condition in order, and appends the records of those
// that hold as one frame. It releases the lock before it syncs the frame:
// a writer that takes it next syncs what it finds appended (catchUp), so
// only the last frame may be unsynced still, and a writer stopped in its
// sync (SIGSTOP, a slow disk) holds no one else up.
func (l *Log) writeBatch(ops []*packOp) {
	locked := true
	release := func() {
		if locked {
			_ = fsys.Unlock(l.headFD)
			locked = false
		}
	}
	defer release()
	fail := func(err error) {
		for _, op := range ops {
			if op.err == nil {
				op.err = err
			}
		}
	}
	if err := l.catchUp(true); err != nil {
		fail(err)
		return
	}
	recs := l.check(ops)
	if len(recs) == 0 {
		return
	}
	seg, off, err := l.appendTo()
	if err != nil {
		fail(err)
		return
	}
	frame := appendFrame(l.frame[:0], recs)
	if cap(frame) <= frameKeep {
		l.frame = frame
	}
	f := l.segs[seg]
	if _, err := f.WriteAt(frame, off); err != nil {
		// Cut off again, under the lock: no one appended after it.
		if f.Truncate(off) != nil {
			l.reset() // readers may find it: start over from the files
		}
		fail(driver.Errorf(driver.Transient, "filestore: append to pack %s: %w", l.head, err))
		return
	}
	// In the index now: this process's readers wait for l.mu, held until
	// the sync.
	if seg != l.seg {
		l.durable = 0
	}
	l.apply(recs, seg, off)
	end := off + int64(len(frame))
	l.seg, l.off = seg, end
	l.reclaim(true)
	release()
	// Visible now: a Log of another process reads the frame (and syncs it
	// before it answers, syncRead), and this one's readers wait for l.mu,
	// held until the sync.
	for _, op := range ops {
		if op.err == nil && op.visible != nil {
			op.visible()
		}
	}
	if h := l.hooks.BeforeSync; h != nil {
		h()
	}
	if err := l.sync(f); err != nil {
		// Others may have appended after it, and their syncs (or a
		// reader's) may yet make it durable: not a definite failure.
		fail(driver.Errorf(driver.Transient, "filestore: sync of pack %s after an append (it may be lost in a crash): %w", l.head, err))
		return
	}
	l.durable = end // l.mu is held: still the segment's end
}

// check decides each op against the index and the ops before it in the
// batch, and returns the records of those whose condition holds.
func (l *Log) check(ops []*packOp) []packRec {
	type cur struct {
		present bool
		version string
	}
	batch := map[string]cur{}
	lookup := func(key string) cur {
		if c, ok := batch[key]; ok {
			return c
		}
		loc, ok := l.keys[key]
		return cur{ok, loc.version}
	}
	var recs []packRec
	for _, op := range ops {
		c := lookup(op.key)
		switch {
		case op.cond.Kind == driver.IfAbsent && c.present:
			op.err = errExists()
			continue
		case op.cond.Kind == driver.IfMatch && !c.present:
			op.err = driver.Errorf(driver.PreconditionFailed, "filestore: key does not exist")
			continue
		case op.cond.Kind == driver.IfMatch && c.version != op.cond.Version:
			op.err = driver.Errorf(driver.PreconditionFailed, "filestore: version mismatch")
			continue
		case op.del && !c.present:
			op.visible = nil // nothing made, nothing to show
			continue
		}
		if op.del {
			batch[op.key] = cur{}
		} else {
			op.version = Version(op.value)
			batch[op.key] = cur{true, op.version}
		}
		recs = append(recs, packRec{del: op.del, key: op.key, value: op.value, version: op.version})
	}
	return recs
}

// appendTo returns the segment to append to and its end: the last, or a
// new one if the last is full (or there is none). A new segment's name
// is synced into its directory before any frame in it is acknowledged.
func (l *Log) appendTo() (uint64, int64, error) {
	if l.seg != 0 && l.off < l.segMax {
		return l.seg, l.off, nil
	}
	n := l.seg + 1
	if err := os.MkdirAll(l.segDir, 0o755); err != nil {
		return 0, 0, ioErr("make pack segments directory", err)
	}
	f, err := os.OpenFile(l.segPath(n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, 0, ioErr("create pack segment", err)
	}
	// Its blocks allocated now, once, and its size left as it is: an
	// append then only marks blocks written, where allocating them would
	// be part of each append's sync. Where the file system cannot, each
	// append allocates its own.
	if l.prealloc {
		fsys.Preallocate(f, l.segMax)
	}
	if err := l.syncDir(l.segDir); err != nil {
		_ = f.Close()
		return 0, 0, ioErr("sync pack segments directory", err)
	}
	l.segs[n] = f
	if l.seg == 0 {
		l.first, l.shut = n, n
	}
	return n, 0, nil
}

// reclaim drops the oldest segments while none of their puts is live,
// never the one read or appended to: a writer (remove, under the head's
// lock) removes them, oldest first, and every Log closes its
// descriptors of them, removed or not, so that a Log that only reads
// holds no removed segment's blocks. Removal goes strictly from the
// oldest: a segment missing after one that is still there is damage
// (isLast), which a reader that has not listed the segments since would
// take for the end of the pack. Their removal needs no sync: a segment
// back after a crash holds only what later frames override.
//
// Closing the last descriptor of a removed segment frees its blocks,
// which took 18 ms for a 32 MiB segment on ext4 with online discard,
// and every write of the Log waited for it. So a writer opens a
// segment before it removes it (the unlink then frees nothing), and the
// descriptors are closed by a goroutine of their own, off every batch's
// and read's path.
func (l *Log) reclaim(remove bool) {
	var drop []*os.File
	for remove && l.first != 0 && l.first < l.seg && l.live[l.first] <= 0 {
		if _, open := l.segs[l.first]; !open {
			f, err := os.Open(l.segPath(l.first))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				break
			}
			if f != nil {
				drop = append(drop, f)
			}
		}
		if err := os.Remove(l.segPath(l.first)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			break
		}
		l.first++
	}
	n := l.shut
	for ; n != 0 && n < l.seg && (n < l.first || l.live[n] <= 0); n++ {
		if f, ok := l.segs[n]; ok {
			drop = append(drop, f)
			delete(l.segs, n)
		}
		delete(l.live, n)
	}
	l.shut = n
	if len(drop) > 0 {
		go closeFiles(drop)
	}
}

// closeFiles closes files dropped from a pack.
func closeFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// Close closes the pack's files; later calls fail with store.ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for n, f := range l.segs {
		errs = append(errs, f.Close())
		delete(l.segs, n)
	}
	if l.headFD >= 0 {
		errs = append(errs, fsys.CloseFD(l.headFD))
		l.headFD = -1
	}
	return errors.Join(errs...)
}
