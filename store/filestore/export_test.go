package filestore

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
