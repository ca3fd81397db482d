package filestore

import (
	"sync"

	"github.com/tenure-io/tenure/store/filestore/internal/fsys"
)

// spares holds unnamed files opened ahead of the creates that will write
// them: a create takes its directory's spare if one is open, and a
// goroutine opens the next while the create writes, syncs and links. The
// opening is the costliest step of a small create where the file system
// pays for inode allocation (ext4 without a journal skips the inodes it
// freed in the last minutes, one by one): taken off the create's path, it
// overlaps the create's own syncs and the caller's next round trip. Spares
// are unnamed, so a crash leaves nothing behind; at most maxSpares are open,
// one per directory, the least recently used closed first.
type spares struct {
	mu      sync.Mutex
	closed  bool
	files   []spare // least recently used first
	opening sync.WaitGroup
}

// spare is one directory's unnamed file; fd is -1 while it is opening.
type spare struct {
	dir string
	fd  int
}

// maxSpares bounds the spares open at once (and the descriptors they hold):
// a store's creates go to a few directories (a group's log, its snapshot
// objects).
const maxSpares = 4

// take returns dir's spare if one is open; the caller owns it.
func (sp *spares) take(dir string) (fd int, ok bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i, f := range sp.files {
		if f.dir == dir && f.fd >= 0 {
			sp.files = append(sp.files[:i], sp.files[i+1:]...)
			return f.fd, true
		}
	}
	return -1, false
}

// refill opens dir's next spare with open in a goroutine of its own, unless
// dir has one open or opening. With maxSpares open it first closes the least
// recently used; with all of them still opening it opens none.
func (sp *spares) refill(dir string, open func(dir string) (int, error)) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return
	}
	for _, f := range sp.files {
		if f.dir == dir {
			return
		}
	}
	if len(sp.files) >= maxSpares {
		i := 0
		for i < len(sp.files) && sp.files[i].fd < 0 {
			i++
		}
		if i == len(sp.files) {
			return
		}
		_ = fsys.CloseFD(sp.files[i].fd)
		sp.files = append(sp.files[:i], sp.files[i+1:]...)
	}
	sp.files = append(sp.files, spare{dir: dir, fd: -1})
	sp.opening.Add(1)
	go func() {
		defer sp.opening.Done()
		fd, err := open(dir)
		sp.mu.Lock()
		defer sp.mu.Unlock()
		for i, f := range sp.files {
			if f.dir != dir || f.fd >= 0 {
				continue
			}
			if err != nil || sp.closed {
				sp.files = append(sp.files[:i], sp.files[i+1:]...)
				break
			}
			sp.files[i].fd = fd
			return
		}
		if err == nil {
			_ = fsys.CloseFD(fd)
		}
	}()
}

// closeAll closes every spare, after waiting for those opening; refill
// opens no more.
func (sp *spares) closeAll() {
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	sp.opening.Wait()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, f := range sp.files {
		if f.fd >= 0 {
			_ = fsys.CloseFD(f.fd)
		}
	}
	sp.files = nil
}
