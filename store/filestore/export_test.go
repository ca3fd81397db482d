package filestore

// SetSyncCommitted replaces the directory sync that follows a visible
// write or delete, and returns a function that restores it.
func SetSyncCommitted(f func(dir string) error) (restore func()) {
	old := syncCommitted
	syncCommitted = f
	return func() { syncCommitted = old }
}
