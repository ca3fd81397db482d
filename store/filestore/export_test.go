package filestore

import "os"

// SetSyncCommitted replaces the directory sync that follows a visible
// write or delete, and returns a function that restores it.
func SetSyncCommitted(f func(dir string) error) (restore func()) {
	old := syncCommitted
	syncCommitted = f
	return func() { syncCommitted = old }
}

// SetPackSegMax sets the size at which packs start a new segment, until
// the returned function restores it.
func SetPackSegMax(n int64) (restore func()) {
	prev := packSegMax
	packSegMax = n
	return func() { packSegMax = prev }
}

// SetPackNoSync makes packs skip their syncs, until the returned function
// restores them: for tests of what Stores see while none crashes.
func SetPackNoSync() (restore func()) {
	sync, syncDir := packSync, packSyncDir
	packSync = func(*os.File) error { return nil }
	packSyncDir = func(string) error { return nil }
	return func() { packSync, packSyncDir = sync, syncDir }
}
