// Package filestore is tenure's embedded default store: each key is a file
// under one directory on a local file system. Import it for its side effect
// and open it by URL, or call New:
//
//	import _ "github.com/tenure-io/tenure/store/filestore"
//
//	s, err := store.Open(ctx, "file:///var/lib/tenure")  // absolute path
//	s, err = store.Open(ctx, "file://./data")           // relative to the working directory
//
// The directory is created if missing. Open fails with a clear error if the
// path is a regular file or the directory cannot be written.
//
// Opened with store.ReadOnly() (or by NewReadOnly), the store creates and
// writes nothing: not the directory, nor <dir>/.locks or <dir>/.tmp, and it
// works on a directory the process cannot write. Open then fails when the
// directory does not exist (the error matches fs.ErrNotExist), and Put and
// Delete fail with store.ErrReadOnly.
//
// # Guarantees
//
// Every write is atomic and durable when it returns. Writes of a key hold an
// exclusive flock(2) on one of 256 lock files in <dir>/.locks, check their
// condition under it, and only then write the value in full to a new file
// and fsync it. Create-if-absent writes an unnamed file (open(2) with
// O_TMPFILE) in the key's directory and gives it the key's name with
// linkat(2), which fails if the name exists: by its descriptor
// (AT_EMPTY_PATH) where the kernel allows it (a process with
// CAP_DAC_READ_SEARCH, as root has), else through /proc/self/fd. Where
// O_TMPFILE is missing, or /proc too where it is needed (other systems
// than Linux, file systems that refuse it), it writes a temp file in
// <dir>/.tmp and links it into place with link(2), which fails the same
// way. Compare-and-swap writes a temp file in <dir>/.tmp and renames it
// over the old file; delete removes the file. The key's directory is
// fsynced before the call returns, by a
// sync that started after the change was made; writers of one Store that
// change the same directory at the same time share such a sync (group
// commit), so pipelined writes and deletes in one directory cost one fsync
// each of their files and a few of the directory between them; the
// directory stays open between its syncs. A crash at any moment, of the
// process or of the machine, leaves each key with its old value or its new
// one, never a torn or partial one, and an acknowledged write survives it.
// Reads take no lock: they open one complete file or none.
//
// A create writes the unnamed file its directory's previous create left
// open (a spare), and opens the next while it writes, syncs and links: the
// opening, where a file system is slow to find a free inode (ext4 without
// a journal passes over each inode freed in the last minutes), overlaps the
// create's syncs instead of adding to them. A Store holds at most four
// spares, one per directory, and closes them with Close.
//
// A create checks that the name is absent before taking the lock, and
// again under it only if it had to wait for the lock: the link refuses an
// existing name in any case, the check spares a loser the write. A Store
// remembers the directories it made or found, and makes one again if a
// create finds it removed.
//
// A compare-and-swap hashes the current file to check its version, reading
// it in pieces (a large value is not held in memory); a file of up to 64 KiB
// is checked before the lock too, so contending writers that lost are
// refused without waiting for it. A Store remembers the versions of the
// last few values over 64 KiB it wrote and holds those files open: while
// the key's file is still that file (same inode, which the open file keeps
// from being reused, same size and modification time) its version is
// known without reading it again.
//
// These guarantees hold between goroutines, between Stores opened on the
// same directory in one process, and between processes on the same machine.
// Waiting for a lock ends when the caller's context does.
//
// Versions are a hash of the value (like S3's ETag): writing the same bytes
// twice gives the same version. tenure's records always carry a nonce, so
// this does not cause ABA for them. A reader that has no use for the
// version (store.Store.Read, driver.Reader) skips the hash, and reads into
// a buffer it reuses.
//
// Keys map to paths: each '/'-separated segment of the key is escaped to
// [a-z0-9_-] and %XX, so that any key round-trips, including keys with
// spaces, Unicode, "." and "..", and leading, trailing or doubled slashes,
// and no two keys collide on file systems that fold case or normalise
// Unicode. List reads the directories below the prefix's last '/', so it is
// cheap when keys are grouped by prefix, and it reads each listed file to
// report its version.
//
// # Packs
//
// Pack makes a prefix a pack, when no key is stored under it yet: its keys
// are then kept as records appended to segment files rather than a file
// each. A write costs one fdatasync(2) of a segment, where a file per key
// costs two flushes (the file's and its directory's) plus an inode and
// its blocks: for a log, whose entries are written once and deleted
// oldest first, that is less than half the time and a quarter of the CPU
// per entry. Every operation works on a packed key as on any other, with
// the same guarantees; only the cost changes.
//
// The pack's head, a regular file, takes the place of the prefix's
// directory (<dir>/g.d/log.d for "g/log/"); its segments are in
// <dir>/g.d/log.p. A Store finds a pack by its head: whether a prefix is
// packed is the directory's state, the same for every process, and a
// process of a version without packs fails to write under the prefix (its
// path is a file) instead of writing beside the pack.
//
// Writers of one Store share batches: one appends the records of all the
// writes waiting as one frame and syncs it once. Writers of all Stores
// and processes exclude each other by a flock(2) on the head, held from
// reading what others appended, through checking each write's condition,
// to the frame's write; the sync comes after, and the next writer syncs
// what it finds appended before it appends. A frame carries a CRC-32C, and each record a
// CRC-32C of its key and value, checked again when the value is read.
// Only the last frame can be torn by a crash (a writer syncs what it finds
// appended before it appends): a reader stops before a torn frame and the
// next writer cuts it; a bad frame that frames follow is reported as a
// corrupt pack, and nothing is cut. A reader that finds frames it did
// not see synced syncs the segment before it answers, so nothing it
// returns can be lost in a crash; a whole frame whose writer died before
// its sync is thus read as written, as a write whose answer was lost.
// A reader that moves on from a segment to the next reads the first to
// its end again (no one appends to it once the next exists): a frame
// another Store appended there after the reader's first look, before it
// started the next segment, is read, never skipped.
// A segment is started at 4 MiB with its blocks allocated at once, and
// the oldest segments are removed when no put in them is live any more;
// every Store closes them then, and a removed segment's last descriptor is
// closed off the path of reads and writes (freeing its blocks can hold
// the disk for milliseconds). Segments go oldest first, so a segment
// missing while a later one exists (an operator's removal, a damaged
// disk) is reported as a corrupt pack: by a writer before it appends,
// and by a reader that reaches the gap, since it lists the segments when
// it first reads the pack and whenever the one it read is full. No key
// after the gap is written before it or reported absent.
//
// The packed log is its own package (store/filestore/internal/pack, a Log
// per pack); filestore finds packs under a Store's directory and routes
// their keys to them.
//
// A writer stopped (SIGSTOP) in its sync holds no lock. One stopped in the
// tens of microseconds between taking the head's lock and writing its
// frame holds it, and the pack's other writers wait for it, as writers of
// a key wait for a writer stopped holding the key's lock.
//
// # Errors
//
// Conditions that do not hold are reported as store.ErrPreconditionFailed,
// absent keys as store.ErrNotFound, and keys whose path would exceed the
// system's path limit (4096 bytes on Linux, 1024 elsewhere, including the
// directory's own path) as store.ErrInvalidArgument before anything is
// written. Permission errors and read-only file systems are permanent; a
// full disk is transient. An error after the rename, link or unlink made a
// change visible (the directory fsync) is transient whatever its errno: the
// change may have landed, and store.PutResolved settles it by reading back.
//
// # What it does not guarantee
//
// It is for one machine. Network file systems (NFS, SMB, FUSE mounts of
// object stores, and the like) may not make flock(2) and link(2) atomic
// between clients, and their caches may serve stale reads: do not share a
// filestore directory between machines, and do not put one on a network
// file system even for one machine. File systems without hard links (FAT,
// exFAT) cannot be used. On operating systems without flock(2) (Windows,
// Solaris) New returns an error.
//
// A key directory is removed when its last key is deleted (and its parents,
// when that leaves them empty), so that keys under prefixes used once, as
// a snapshot's parts are, leave nothing behind; a listing removes the empty
// ones it walks (at most 1,000 each time: those an older version left).
// Creates and deletes share a lock on their key's directory (flock(2) on
// <dir>/.locks/dNN) from before their change until the directory's sync,
// and a removal takes it alone, so a directory is never removed between a
// change and its sync; a create that finds its directory removed makes it
// again. Versions of this package that removed no directory take no such
// lock. One that shares a store with this version finds a removed
// directory and makes it again, but one that kept a directory open for its
// syncs, and then creates a key in a directory made again at that path,
// syncs the removed one: that key is durable only once the file system
// writes it back (seconds), so a machine crash just then could lose it.
// Upgrade the processes that share a store together. An unnamed file of a create that did not
// finish, and a spare, vanish with their process (after a machine crash, the file
// system's recovery frees it: the journal's orphan list, or fsck without a
// journal). Temp files in <dir>/.tmp left by a crashed writer (a
// compare-and-swap, or a create without O_TMPFILE) are removed by the next
// New, once they are a minute old; a writer stalled for longer than that
// between writing its temp file and committing it fails with a transient
// error and changes nothing.
package filestore
